//! Connections carried by a helper process instead of a direct TCP connection: the helper
//! (e.g. `ssh -W 127.0.0.1:PORT host`) gets one end of a socket pair as its stdin and stdout
//! and forwards the bytes to the listener; we keep the other end.
//!
//! A socket pair rather than two pipes keeps every `Conn` behaviour the drivers rely on:
//! read timeouts, half-close (`shutdown(Write)` reaches the helper as end of input) and one
//! file descriptor for both directions. The listener cannot tell a tunnelled connection from
//! a direct one: the secret handshake runs end to end, so a tunnel proves the secret like any
//! other connection.
//!
//! No TLS inside a tunnel: the helper (ssh) already encrypts, and the handshake and the
//! keyed block hashes still authenticate the peer and the data.
//!
//! Not here: which helper to run (the caller spawns it), deciding when to tunnel, or the
//! `Conn` around a tunnel (`dial::connect_tunnel`).

use std::io;
use std::os::unix::net::UnixStream;
use std::process::Child;
use std::time::{Duration, Instant};

use super::auth;
use super::ticket::{random32, Ticket};
use super::{Role, TransportError};

/// How long the helper may take to reach the listener and finish the secret handshake
/// (it may have to set up its own connection first).
const TUNNEL_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a closed tunnel's helper may take to flush and exit before it is killed.
const REAP_GRACE: Duration = Duration::from_secs(30);

/// Our end of a socket pair whose other end is a helper process's stdin and stdout.
pub struct Tunnel {
    pub(super) sock: UnixStream,
    child: Option<Child>,
    desc: String,
}

impl Tunnel {
    /// What the tunnel leads to, for messages ("via ssh to db2").
    pub fn desc(&self) -> &str {
        &self.desc
    }
}

impl Drop for Tunnel {
    /// Closes our end (the helper sees end of input and flushes what it holds), then reaps
    /// the helper in the background, killing it if it lingers.
    fn drop(&mut self) {
        let _ = self.sock.shutdown(std::net::Shutdown::Both);
        let Some(mut child) = self.child.take() else {
            return;
        };
        let reaper = std::thread::Builder::new()
            .name("haul-reap".into())
            .spawn(move || {
                let deadline = Instant::now() + REAP_GRACE;
                while Instant::now() < deadline {
                    match child.try_wait() {
                        Ok(Some(_)) | Err(_) => return,
                        Ok(None) => std::thread::sleep(Duration::from_millis(50)),
                    }
                }
                let _ = child.kill();
                let _ = child.wait();
            });
        // Without a thread the helper is left to exit on its own: it reads end of input.
        drop(reaper);
    }
}

/// Runs the secret handshake as the dialer of `role` through `child` (which holds the
/// other end of `sock` as its stdin and stdout) to the listener of `ticket`; `desc` names
/// the route in messages. The helper is reaped when the tunnel is dropped, and killed at
/// once if the handshake fails. `dial::connect_tunnel` wraps the result (and the link key)
/// in a `Conn`.
pub(super) fn open(
    sock: UnixStream,
    child: Child,
    desc: String,
    ticket: &Ticket,
    role: Role,
) -> Result<(Tunnel, [u8; 32]), TransportError> {
    let mut tunnel = Tunnel {
        sock,
        child: Some(child),
        desc,
    };
    let r = handshake(&mut tunnel, ticket, role);
    if r.is_err() {
        if let Some(mut c) = tunnel.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
    let link = r?;
    Ok((tunnel, link))
}

fn handshake(t: &mut Tunnel, ticket: &Ticket, role: Role) -> Result<[u8; 32], TransportError> {
    let setup = |e: io::Error| TransportError::Io(e);
    t.sock
        .set_read_timeout(Some(TUNNEL_HANDSHAKE_TIMEOUT))
        .map_err(setup)?;
    t.sock
        .set_write_timeout(Some(TUNNEL_HANDSHAKE_TIMEOUT))
        .map_err(setup)?;
    let nonce_c = random32().map_err(setup)?;
    let link = match auth::dial(&mut t.sock, ticket.secret.conn_key(), role, nonce_c) {
        Ok(link) => link,
        // The helper closed at once: it could not reach the listener.
        Err(TransportError::Handshake(m)) | Err(TransportError::Tls(m)) => {
            return Err(TransportError::Handshake(format!(
                "{m} (through {}: the tunnel did not reach the listener)",
                t.desc
            )))
        }
        Err(e) => return Err(e),
    };
    t.sock.set_read_timeout(None).map_err(setup)?;
    t.sock.set_write_timeout(None).map_err(setup)?;
    Ok(link)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::{connect_tunnel, Listener};
    use std::io::{Read, Write};
    use std::process::{Command, Stdio};

    /// Threads play the helper (forwarding between the socket pair and TCP); `true` is the
    /// child process the tunnel reaps.
    #[test]
    fn tunnel_authenticates_and_moves_bytes() {
        let listener = Listener::bind(Some("127.0.0.1:0".parse().unwrap())).unwrap();
        let ticket = listener.ticket();
        let port = listener.local_addr().port();
        let (_h, accepted) = listener.spawn_acceptor();
        let (ours, theirs) = UnixStream::pair().unwrap();
        // The "helper": forwards between the socket pair and a TCP connection.
        let tcp = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        let (mut a_r, mut a_w) = (theirs.try_clone().unwrap(), theirs);
        let (mut t_r, mut t_w) = (tcp.try_clone().unwrap(), tcp);
        std::thread::spawn(move || {
            let _ = std::io::copy(&mut a_r, &mut t_w);
            let _ = t_w.shutdown(std::net::Shutdown::Write);
        });
        std::thread::spawn(move || {
            let _ = std::io::copy(&mut t_r, &mut a_w);
        });
        let child = Command::new("true").stdin(Stdio::null()).spawn().unwrap();
        let mut conn = connect_tunnel(ours, child, "test".into(), &ticket, Role::Data).unwrap();
        let mut got = accepted.recv().unwrap();
        assert_eq!(got.role, Role::Data);
        conn.write_all(b"hello").unwrap();
        conn.shutdown_write().unwrap();
        let mut buf = Vec::new();
        got.conn.read_to_end(&mut buf).unwrap();
        assert_eq!(buf, b"hello");
        assert!(!conn.is_encrypted());
        assert_eq!(conn.peer_desc(), "test");
    }
}
