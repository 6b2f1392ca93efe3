//! What both roles of the far end share: the one writer of instruction lines on stdout,
//! listening where the local side can reach us (and on loopback for `ssh -W`), and
//! handing accepted connections out by role.

use std::io::{self, Write};
use std::net::{IpAddr, SocketAddr};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use crossbeam_channel::{Receiver, RecvTimeoutError};

use crate::error::Result;
use crate::session::lost;
use crate::transport::{self, Accepted, Conn, Listener, Role, Ticket};

pub(super) const ACCEPT_WAIT: Duration = Duration::from_secs(90);

/// Stdout, one whole line at a time.
#[derive(Default)]
pub(super) struct Out(Mutex<()>);

impl Out {
    pub(super) fn line(&self, s: &str) {
        let _g = self.0.lock();
        let mut o = io::stdout().lock();
        let _ = writeln!(o, "{s}");
        let _ = o.flush();
    }

    /// `Ready` with the ticket and port this far end listens with.
    pub(super) fn ready(&self, ticket: &Ticket, port: u16, single_file: bool) {
        self.line(&crate::remote::wire::encode(
            &crate::remote::wire::Reply::Ready {
                ticket: Some(ticket.encode()),
                port: Some(port),
                single_file,
                rename: None,
            },
        ));
    }
}

pub(super) fn path_of(bytes: &[u8]) -> PathBuf {
    PathBuf::from(std::ffi::OsStr::from_bytes(bytes))
}

/// Listens and makes the ticket. Binds only the address the ssh client reached us at (and
/// 127.0.0.1, for `ssh -W` tunnels) when it can, so the port is not open on every network
/// this host is on; otherwise, or with `advertise` (which may be no address of this host),
/// binds every address. The ticket lists that address first (the one most likely to work
/// from there), or only `advertise` when given. `everywhere`: the dialer is another far
/// host (remote to remote), which may know this host by another address: bind them all.
pub(super) fn listen(
    advertise: Option<IpAddr>,
    everywhere: bool,
) -> Result<(Listener, Ticket, u16)> {
    let ssh_ip = ssh_server_ip();
    if everywhere {
        let listener = Listener::bind(None)?;
        return Ok(ticket_for(listener, advertise, ssh_ip));
    }
    listen_at(advertise, ssh_ip)
}

pub(super) fn listen_at(
    advertise: Option<IpAddr>,
    ssh_ip: Option<IpAddr>,
) -> Result<(Listener, Ticket, u16)> {
    let specific = match (advertise, ssh_ip) {
        (None, Some(ip)) => Listener::bind_with_loopback(ip).ok(),
        _ => None,
    };
    let listener = match specific {
        Some(l) => l,
        None => Listener::bind(None)?,
    };
    Ok(ticket_for(listener, advertise, ssh_ip))
}

/// The ticket of `listener`: only `advertise` when given, else its addresses with the one
/// ssh reached us at first.
pub(super) fn ticket_for(
    listener: Listener,
    advertise: Option<IpAddr>,
    ssh_ip: Option<IpAddr>,
) -> (Listener, Ticket, u16) {
    let port = listener.local_addr().port();
    let mut ticket = listener.ticket();
    if let Some(ip) = advertise {
        ticket.addrs = vec![SocketAddr::new(ip, port)];
    } else if let Some(ip) = ssh_ip {
        let a = SocketAddr::new(ip, port);
        ticket.addrs.retain(|x| *x != a);
        ticket.addrs.insert(0, a);
        ticket.addrs.truncate(transport::MAX_TICKET_ADDRS);
    }
    (listener, ticket, port)
}

/// This host's address as the ssh client saw it (`SSH_CONNECTION`'s third word).
pub(super) fn ssh_server_ip() -> Option<IpAddr> {
    let v = std::env::var("SSH_CONNECTION").ok()?;
    let ip: IpAddr = v.split_whitespace().nth(2)?.parse().ok()?;
    Some(ip.to_canonical())
}

/// Accepted connections handed out by role, in the order `send` asks for them.
pub(super) struct AcceptPool(Mutex<Pool>);

struct Pool {
    rx: Receiver<Accepted>,
    stash: Vec<Accepted>,
    /// Connections of each role (control, data) still to come, when the dialer dials
    /// each once and never again (a pull's local receiver).
    left: Option<(usize, usize)>,
}

impl AcceptPool {
    /// Hands out the connections `rx` accepts, by role.
    pub(super) fn new(rx: Receiver<Accepted>) -> AcceptPool {
        AcceptPool(Mutex::new(Pool {
            rx,
            stash: Vec::new(),
            left: None,
        }))
    }

    /// The same for a dialer that opens one control and `streams` data connections, once:
    /// asking for more (re-dialing a receiver that dropped) fails at once rather than
    /// waiting for a connection that never comes, so that a fan-out's sender goes on with
    /// the next receiver without delay.
    pub(super) fn once(rx: Receiver<Accepted>, streams: usize) -> AcceptPool {
        let pool = AcceptPool::new(rx);
        if let Ok(mut p) = pool.0.lock() {
            p.left = Some((1, streams));
        }
        pool
    }

    /// The next accepted connection of `role` (a sender's `dial`).
    pub(super) fn take(&self, role: Role) -> Result<Conn> {
        let mut pool = self
            .0
            .lock()
            .map_err(|_| crate::error::Error::io("accepting", io::Error::other("poisoned")))?;
        if let Some((control, data)) = &mut pool.left {
            let left = match role {
                Role::Control => control,
                _ => data,
            };
            if *left == 0 {
                return Err(lost(io::Error::new(
                    io::ErrorKind::ConnectionAborted,
                    "the receiver's connection dropped, and it does not dial again",
                )));
            }
            *left -= 1;
        }
        if let Some(i) = pool.stash.iter().position(|a| a.role == role) {
            return Ok(pool.stash.swap_remove(i).conn);
        }
        loop {
            match pool.rx.recv_timeout(ACCEPT_WAIT) {
                Ok(a) if a.role == role => return Ok(a.conn),
                Ok(a) => pool.stash.push(a),
                Err(RecvTimeoutError::Timeout) | Err(RecvTimeoutError::Disconnected) => {
                    return Err(lost(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!(
                            "the receiver did not connect within {} s",
                            ACCEPT_WAIT.as_secs()
                        ),
                    )))
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpStream;

    fn reachable(ip: [u8; 4], port: u16) -> bool {
        TcpStream::connect(SocketAddr::from((ip, port))).is_ok()
    }

    #[test]
    fn listens_only_where_ssh_reached_us_and_on_loopback() {
        let (_l, ticket, port) = listen_at(None, Some([127, 0, 0, 2].into())).unwrap();
        assert_eq!(ticket.addrs, vec![SocketAddr::from(([127, 0, 0, 2], port))]);
        assert!(reachable([127, 0, 0, 2], port));
        assert!(
            reachable([127, 0, 0, 1], port),
            "ssh -W 127.0.0.1:PORT must work"
        );
        assert!(!reachable([127, 0, 0, 3], port), "bound to every address");
    }

    #[test]
    fn falls_back_to_every_address() {
        // 203.0.113.254 (TEST-NET-3) is no address of this host: it cannot be bound.
        let (l, ticket, _) = listen_at(None, Some([203, 0, 113, 254].into())).unwrap();
        assert!(l.local_addr().ip().is_unspecified());
        assert_eq!(ticket.addrs[0].ip(), IpAddr::from([203, 0, 113, 254]));
        let (l, ticket, _) =
            listen_at(Some([10, 9, 8, 7].into()), Some([127, 0, 0, 2].into())).unwrap();
        assert!(l.local_addr().ip().is_unspecified());
        assert_eq!(ticket.addrs.len(), 1);
    }
}
