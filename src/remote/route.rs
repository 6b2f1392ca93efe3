//! How the local side reaches a listening far end: directly when it can, otherwise (or
//! with `--via-ssh`) through one `ssh -W 127.0.0.1:PORT` per connection, riding on the
//! shared ssh connection. The first connection decides which, for all the others.
//!
//! Not here: starting the far end (`farend`), the connections themselves (`transport`).

use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::process::Stdio;
use std::sync::Mutex;

use super::rsh::{spawn_prefixer, Rsh};
use crate::config::RemotePath;
use crate::error::{exit, Error, Result};
use crate::transport::{self, Conn, Role, Ticket, TransportError};

/// How many of a ticket's addresses are tried directly before the ssh fallback.
const DIRECT_ATTEMPTS: usize = 2;

/// How the local side reaches a listening far end: directly when it can, otherwise (or
/// with `--via-ssh`) through one `ssh -W 127.0.0.1:PORT` per connection.
pub struct Route<'a> {
    rsh: &'a Rsh,
    at: &'a RemotePath,
    ticket: Ticket,
    /// The ticket cut to the addresses tried before falling back to ssh.
    probe: Ticket,
    port: Option<u16>,
    encrypt: bool,
    state: Mutex<RouteState>,
}

#[derive(Clone, Copy)]
enum RouteState {
    Unknown,
    Direct(std::net::SocketAddr),
    Tunnel,
}

impl<'a> Route<'a> {
    /// For a pull: dials the control connection (which decides direct or tunnel), then
    /// `streams` data connections in parallel, and hands each to a receiver through `tx`.
    pub fn dial_into(&self, streams: usize, tx: &crossbeam_channel::Sender<(Conn, Role)>) {
        let control = match self.dial(Role::Control) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("{}", crate::progress::error_line(&e));
                return;
            }
        };
        if tx.send((control, Role::Control)).is_err() {
            return;
        }
        std::thread::scope(|s| {
            for _ in 0..streams {
                s.spawn(move || match self.dial(Role::Data) {
                    Ok(c) => {
                        let _ = tx.send((c, Role::Data));
                    }
                    Err(e) => crate::progress::warn(&format!("a data stream failed: {e}")),
                });
            }
        });
    }

    /// A route to the far end that printed `ticket` and listens on `port`.
    pub fn new(
        rsh: &'a Rsh,
        at: &'a RemotePath,
        ticket: Ticket,
        port: Option<u16>,
        encrypt: bool,
        via_ssh: bool,
    ) -> Route<'a> {
        let state = if via_ssh {
            RouteState::Tunnel
        } else {
            RouteState::Unknown
        };
        // The first addresses only (the one ssh reached, then the host's first interface):
        // when those time out behind a firewall, waiting 3 s for each of the rest would
        // only delay the fallback.
        let mut probe = ticket.clone();
        probe.addrs.truncate(DIRECT_ATTEMPTS);
        Route {
            rsh,
            at,
            probe,
            ticket,
            port,
            encrypt,
            state: Mutex::new(state),
        }
    }

    /// The ticket's block key.
    pub fn key(&self) -> [u8; 32] {
        self.ticket.secret.block_key()
    }

    /// One authenticated connection of `role`. The first call decides the route: a direct
    /// connection if one can be made within the connect timeout, else a tunnel.
    pub fn dial(&self, role: Role) -> Result<Conn> {
        let mut st = self
            .state
            .lock()
            .map_err(|_| Error::io("dialing", io::Error::other("poisoned")))?;
        match *st {
            RouteState::Direct(a) => {
                drop(st);
                Ok(transport::connect_addr(
                    a,
                    &self.ticket,
                    role,
                    self.encrypt,
                )?)
            }
            RouteState::Tunnel => {
                drop(st);
                self.tunnel(role)
            }
            RouteState::Unknown => match transport::connect(&self.probe, role, self.encrypt) {
                Ok(c) => {
                    if let Some(a) = c.peer_addr() {
                        *st = RouteState::Direct(a);
                    }
                    Ok(c)
                }
                Err(TransportError::Connect { addrs, source }) => {
                    eprintln!(
                        "haul: {}: cannot connect directly to {addrs} ({source}); \
                         carrying the streams through ssh instead",
                        crate::progress::escape(&self.at.host)
                    );
                    *st = RouteState::Tunnel;
                    drop(st);
                    self.tunnel(role)
                }
                Err(e) => Err(e.into()),
            },
        }
    }

    fn tunnel(&self, role: Role) -> Result<Conn> {
        let host = &self.at.host;
        let Some(port) = self.port else {
            return Err(Error::Usage("the far end gave no port to tunnel to".into()));
        };
        if !self.rsh.can_tunnel() {
            return Err(Error::Host {
                host: host.clone(),
                message: "cannot carry the streams through the remote shell: it is not \
                          ssh (ssh -W is needed)"
                    .into(),
                code: exit::NETWORK,
            });
        }
        let (ours, theirs) =
            UnixStream::pair().map_err(|e| Error::io("creating a tunnel socket", e))?;
        let theirs_out = theirs
            .try_clone()
            .map_err(|e| Error::io("creating a tunnel socket", e))?;
        let mut cmd = self.rsh.command();
        cmd.arg("-W")
            .arg(format!("127.0.0.1:{port}"))
            .arg(self.at.ssh_destination())
            .stdin(Stdio::from(OwnedFd::from(theirs)))
            .stdout(Stdio::from(OwnedFd::from(theirs_out)))
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().map_err(|e| Error::Host {
            host: host.clone(),
            message: format!("cannot run '{}': {e}", self.rsh.words[0]),
            code: exit::NETWORK,
        })?;
        // The command holds our copies of its ends until it is dropped: drop it now, so
        // the tunnel sees end of input when we close ours.
        drop(cmd);
        if let Some(e) = child.stderr.take() {
            let _ = spawn_prefixer(e, host.clone());
        }
        let desc = format!("ssh tunnel to {host}");
        transport::connect_tunnel(ours, child, desc, &self.ticket, role).map_err(|e| Error::Host {
            host: host.clone(),
            message: format!("through ssh: {e}"),
            code: e.exit_code(),
        })
    }
}
