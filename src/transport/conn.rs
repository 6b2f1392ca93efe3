//! [`Conn`]: one connected, authenticated byte stream, plain TCP, TLS, a local socketpair or
//! a tunnel through a helper process (ssh).
//!
//! A `Conn` only moves bytes: framing lives in `protocol`. Writes go straight through (rustls
//! encrypts into its own buffer and writes with `writev`), so callers should hand over large
//! buffers, and `write_vectored` reaches the socket as one `writev` on plain streams.
//!
//! Not here: connecting, authenticating, splitting one stream between threads (a TLS stream
//! is one state machine; use separate connections for concurrent directions).

use std::fmt;
use std::io::{self, IoSlice, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use rustls::{ClientConnection, ServerConnection, StreamOwned};

use super::tls::TlsSocket;
use super::tunnel::Tunnel;

/// A connected, authenticated byte stream. `Read + Write + Send`.
pub enum Conn {
    /// Unencrypted TCP (`--no-encrypt`), authenticated by the secret handshake.
    Plain(TcpStream),
    /// TLS 1.3, the dialing side.
    Tls(Box<StreamOwned<ClientConnection, TlsSocket>>),
    /// TLS 1.3, the listening side.
    TlsServer(Box<StreamOwned<ServerConnection, TlsSocket>>),
    /// One end of an in-process socketpair (local copy): no TLS, no authentication.
    Unix(UnixStream),
    /// Carried by a helper process (ssh), authenticated end to end; see `tunnel`.
    Tunnel(Box<Tunnel>),
}

impl Conn {
    /// An in-process connected pair (socketpair), no TLS, no authentication: used for local
    /// disk-to-disk copy.
    pub fn pair() -> io::Result<(Conn, Conn)> {
        let (a, b) = UnixStream::pair()?;
        Ok((Conn::Unix(a), Conn::Unix(b)))
    }

    /// Shuts down the write side; the peer reads end-of-stream after everything written so
    /// far. TLS sends close_notify first, so the peer can tell a clean end from a cut.
    pub fn shutdown_write(&mut self) -> io::Result<()> {
        match self {
            Conn::Plain(s) => s.shutdown(Shutdown::Write),
            Conn::Tls(s) => {
                s.conn.send_close_notify();
                s.flush()?;
                s.sock.tcp().shutdown(Shutdown::Write)
            }
            Conn::TlsServer(s) => {
                s.conn.send_close_notify();
                s.flush()?;
                s.sock.tcp().shutdown(Shutdown::Write)
            }
            Conn::Unix(s) => s.shutdown(Shutdown::Write),
            Conn::Tunnel(t) => t.sock.shutdown(Shutdown::Write),
        }
    }

    /// Sets (`Some`) or clears (`None`) a read timeout on the underlying socket. A timed-out
    /// read fails with `WouldBlock` or `TimedOut`. `Some(Duration::ZERO)` is an error.
    pub fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        match self {
            Conn::Plain(s) => s.set_read_timeout(t),
            Conn::Tls(s) => s.sock.tcp().set_read_timeout(t),
            Conn::TlsServer(s) => s.sock.tcp().set_read_timeout(t),
            Conn::Unix(s) => s.set_read_timeout(t),
            Conn::Tunnel(x) => x.sock.set_read_timeout(t),
        }
    }

    /// Sets (`Some`) or clears (`None`) a write timeout on the underlying socket.
    pub fn set_write_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        match self {
            Conn::Plain(s) => s.set_write_timeout(t),
            Conn::Tls(s) => s.sock.tcp().set_write_timeout(t),
            Conn::TlsServer(s) => s.sock.tcp().set_write_timeout(t),
            Conn::Unix(s) => s.set_write_timeout(t),
            Conn::Tunnel(x) => x.sock.set_write_timeout(t),
        }
    }

    /// The peer's TCP address; `None` for a local socketpair.
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        match self {
            Conn::Plain(s) => s.peer_addr().ok(),
            Conn::Tls(s) => s.sock.tcp().peer_addr().ok(),
            Conn::TlsServer(s) => s.sock.tcp().peer_addr().ok(),
            Conn::Unix(_) | Conn::Tunnel(_) => None,
        }
    }

    /// The peer for messages: "198.18.0.1:40000", "[2001:db8::1]:40000" or "local".
    pub fn peer_desc(&self) -> String {
        match self {
            Conn::Unix(_) => "local".to_string(),
            Conn::Tunnel(t) => t.desc().to_string(),
            _ => match self.peer_addr() {
                Some(a) => a.to_string(),
                None => "unknown peer".to_string(),
            },
        }
    }

    /// Whether bytes on this stream are encrypted.
    pub fn is_encrypted(&self) -> bool {
        matches!(self, Conn::Tls(_) | Conn::TlsServer(_))
    }
}

impl Read for Conn {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Conn::Plain(s) => s.read(buf),
            Conn::Tls(s) => s.read(buf),
            Conn::TlsServer(s) => s.read(buf),
            Conn::Unix(s) => s.read(buf),
            Conn::Tunnel(t) => t.sock.read(buf),
        }
    }
}

impl Write for Conn {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        // rustls would wait for incoming data on an empty write (nothing to send, so its
        // I/O loop reads); an empty write must return at once.
        if buf.is_empty() {
            return Ok(0);
        }
        match self {
            Conn::Plain(s) => s.write(buf),
            Conn::Tls(s) => s.write(buf),
            Conn::TlsServer(s) => s.write(buf),
            Conn::Unix(s) => s.write(buf),
            Conn::Tunnel(t) => t.sock.write(buf),
        }
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        if bufs.iter().all(|b| b.is_empty()) {
            return Ok(0);
        }
        match self {
            Conn::Plain(s) => s.write_vectored(bufs),
            Conn::Tls(s) => s.write_vectored(bufs),
            Conn::TlsServer(s) => s.write_vectored(bufs),
            Conn::Unix(s) => s.write_vectored(bufs),
            Conn::Tunnel(t) => t.sock.write_vectored(bufs),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Conn::Plain(s) => s.flush(),
            Conn::Tls(s) => s.flush(),
            Conn::TlsServer(s) => s.flush(),
            Conn::Unix(s) => s.flush(),
            Conn::Tunnel(t) => t.sock.flush(),
        }
    }
}

impl fmt::Debug for Conn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self {
            Conn::Plain(_) => "Plain",
            Conn::Tls(_) => "Tls",
            Conn::TlsServer(_) => "TlsServer",
            Conn::Unix(_) => "Unix",
            Conn::Tunnel(_) => "Tunnel",
        };
        write!(f, "Conn::{kind}({})", self.peer_desc())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pair_moves_bytes_both_ways_and_shuts_down() {
        let (mut a, mut b) = Conn::pair().unwrap();
        assert_eq!(a.peer_desc(), "local");
        assert!(!a.is_encrypted());
        assert_eq!(a.write(&[]).unwrap(), 0);
        a.write_all(b"ping").unwrap();
        a.shutdown_write().unwrap();
        let mut got = Vec::new();
        b.read_to_end(&mut got).unwrap();
        assert_eq!(got, b"ping");
        b.write_all(b"pong").unwrap();
        let mut buf = [0u8; 4];
        a.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"pong");
    }

    #[test]
    fn read_timeout_applies() {
        let (a, _b) = Conn::pair().unwrap();
        a.set_read_timeout(Some(Duration::from_millis(20))).unwrap();
        let mut a = a;
        let err = a.read(&mut [0u8; 1]).unwrap_err();
        assert!(matches!(
            err.kind(),
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
        ));
        a.set_read_timeout(None).unwrap();
    }
}
