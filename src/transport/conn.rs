//! [`Conn`]: one connected, authenticated byte stream, plain TCP, TLS, a local socketpair or
//! a tunnel through a helper process (ssh).
//!
//! A `Conn` only moves bytes: framing lives in `protocol`. Writes go straight through (TLS
//! encrypts up to 64 KiB per call into its buffer and writes it with one system call; see
//! `tls_stream`), so callers should hand over large buffers, and `write_vectored` reaches the
//! socket as one `writev` on plain streams (one encrypted write of all the slices on TLS).
//!
//! Not here: connecting, authenticating, splitting a TLS stream or a tunnel between threads
//! (a TLS stream is one state machine; use separate connections for concurrent directions).
//! Only a plain socket can be split, with [`Conn::try_clone`].

use std::fmt;
use std::io::{self, IoSlice, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use rustls::client::UnbufferedClientConnection;
use rustls::server::UnbufferedServerConnection;

use super::gate::{write_all_gated, Gate};
use super::lane::{LaneReceiver, LaneSender};
use super::tls_stream::TlsStream;
use super::tunnel::Tunnel;

/// A connected, authenticated byte stream, and the link key its handshake established.
/// `Read + Write + Send`.
pub struct Conn {
    io: Io,
    link: [u8; 32],
    dialer: bool,
    /// A local copy's data stream: units go here, not through `io`.
    lane: Option<Lane>,
}

/// Which end of a lane a connection carries.
enum Lane {
    Sender(LaneSender),
    Receiver(LaneReceiver),
}

/// What carries a [`Conn`]'s bytes.
pub(super) enum Io {
    /// Unencrypted TCP (`--no-encrypt`), authenticated by the secret handshake.
    Plain(TcpStream),
    /// TLS 1.3, the dialing side.
    Tls(Box<TlsStream<UnbufferedClientConnection>>),
    /// TLS 1.3, the listening side.
    TlsServer(Box<TlsStream<UnbufferedServerConnection>>),
    /// One end of an in-process socketpair (local copy): no TLS, no authentication.
    Unix(UnixStream),
    /// Carried by a helper process (ssh), authenticated end to end; see `tunnel`.
    Tunnel(Box<Tunnel>),
}

impl Conn {
    /// A connection over `io` whose handshake established `link`; `dialer` says which end
    /// we are.
    pub(super) fn new(io: Io, link: [u8; 32], dialer: bool) -> Conn {
        Conn {
            io,
            link,
            dialer,
            lane: None,
        }
    }

    /// An in-process connected pair (socketpair), no TLS, no handshake: used for local
    /// disk-to-disk copy. Both ends share a random link key.
    pub fn pair() -> io::Result<(Conn, Conn)> {
        let (a, b) = UnixStream::pair()?;
        let link = super::ticket::random32()?;
        Ok((
            Conn::new(Io::Unix(a), link, true),
            Conn::new(Io::Unix(b), link, false),
        ))
    }

    /// An in-process pair like [`Conn::pair`] that also carries a [`super::lane`]: the
    /// dialing end sends units, the other receives them (a local copy's data streams).
    pub fn lane_pair() -> io::Result<(Conn, Conn)> {
        let (mut a, mut b) = Conn::pair()?;
        let (tx, rx) = super::lane::pair();
        a.lane = Some(Lane::Sender(tx));
        b.lane = Some(Lane::Receiver(rx));
        Ok((a, b))
    }

    /// Takes the sending end of this connection's lane, if it carries one.
    pub fn take_lane_sender(&mut self) -> Option<LaneSender> {
        match self.lane.take() {
            Some(Lane::Sender(s)) => Some(s),
            other => {
                self.lane = other;
                None
            }
        }
    }

    /// Takes the receiving end of this connection's lane, if it carries one.
    pub fn take_lane_receiver(&mut self) -> Option<LaneReceiver> {
        match self.lane.take() {
            Some(Lane::Receiver(r)) => Some(r),
            other => {
                self.lane = other;
                None
            }
        }
    }

    /// Another handle to the same plain socket (TCP or socketpair), so one thread can read
    /// while another writes; the two share the link key and side but not frame sequence
    /// numbers, so give each direction to one handle only. TLS and tunnelled connections
    /// cannot be split: `ErrorKind::Unsupported`.
    pub fn try_clone(&self) -> io::Result<Conn> {
        let io = match &self.io {
            Io::Plain(s) => Io::Plain(s.try_clone()?),
            Io::Unix(s) => Io::Unix(s.try_clone()?),
            Io::Tls(_) | Io::TlsServer(_) | Io::Tunnel(_) => {
                return Err(io::Error::new(
                    io::ErrorKind::Unsupported,
                    "a TLS or tunnelled connection cannot be split between threads",
                ))
            }
        };
        Ok(Conn::new(io, self.link, self.dialer))
    }

    /// The key of every frame tag and control MAC on this connection, fresh for it and
    /// known only to its two ends (see `handshake`).
    pub fn link_key(&self) -> [u8; 32] {
        self.link
    }

    /// What carries the bytes (for tests that look inside).
    #[cfg(test)]
    pub(super) fn io(&self) -> &Io {
        &self.io
    }

    /// Whether we dialed this connection (so which direction our frames go in).
    pub fn is_dialer(&self) -> bool {
        self.dialer
    }

    /// Shuts down the write side; the peer reads end-of-stream after everything written so
    /// far. TLS sends close_notify first, so the peer can tell a clean end from a cut.
    pub fn shutdown_write(&mut self) -> io::Result<()> {
        match &mut self.io {
            Io::Plain(s) => s.shutdown(Shutdown::Write),
            Io::Tls(s) => s.shutdown_write(),
            Io::TlsServer(s) => s.shutdown_write(),
            Io::Unix(s) => s.shutdown(Shutdown::Write),
            Io::Tunnel(t) => t.sock.shutdown(Shutdown::Write),
        }
    }

    /// Shuts down both directions at once, without a clean TLS end: the peer's reads and
    /// writes fail from now on (used to drop a connection whose bytes failed verification,
    /// so a peer blocked reading learns at once that it must re-dial).
    pub fn abort(&mut self) {
        let _ = match &mut self.io {
            Io::Plain(s) => s.shutdown(Shutdown::Both),
            Io::Tls(s) => s.tcp().shutdown(Shutdown::Both),
            Io::TlsServer(s) => s.tcp().shutdown(Shutdown::Both),
            Io::Unix(s) => s.shutdown(Shutdown::Both),
            Io::Tunnel(t) => t.sock.shutdown(Shutdown::Both),
        };
    }

    /// Sets (`Some`) or clears (`None`) a read timeout on the underlying socket. A timed-out
    /// read fails with `WouldBlock` or `TimedOut`. `Some(Duration::ZERO)` is an error.
    pub fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        match &self.io {
            Io::Plain(s) => s.set_read_timeout(t),
            Io::Tls(s) => s.tcp().set_read_timeout(t),
            Io::TlsServer(s) => s.tcp().set_read_timeout(t),
            Io::Unix(s) => s.set_read_timeout(t),
            Io::Tunnel(x) => x.sock.set_read_timeout(t),
        }
    }

    /// Sets (`Some`) or clears (`None`) a write timeout on the underlying socket.
    pub fn set_write_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        match &self.io {
            Io::Plain(s) => s.set_write_timeout(t),
            Io::Tls(s) => s.tcp().set_write_timeout(t),
            Io::TlsServer(s) => s.tcp().set_write_timeout(t),
            Io::Unix(s) => s.set_write_timeout(t),
            Io::Tunnel(x) => x.sock.set_write_timeout(t),
        }
    }

    /// The peer's TCP address; `None` for a local socketpair.
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        match &self.io {
            Io::Plain(s) => s.peer_addr().ok(),
            Io::Tls(s) => s.tcp().peer_addr().ok(),
            Io::TlsServer(s) => s.tcp().peer_addr().ok(),
            Io::Unix(_) | Io::Tunnel(_) => None,
        }
    }

    /// The TCP socket underneath; `None` for a local pair or a tunnel.
    fn tcp(&self) -> Option<&TcpStream> {
        match &self.io {
            Io::Plain(s) => Some(s),
            Io::Tls(s) => Some(s.tcp()),
            Io::TlsServer(s) => Some(s.tcp()),
            Io::Unix(_) | Io::Tunnel(_) => None,
        }
    }

    /// The congestion control algorithm of the TCP connection (`None`: not TCP).
    pub fn congestion(&self) -> Option<String> {
        self.tcp().and_then(super::congestion::get)
    }

    /// Switches the TCP connection to congestion control `name` (`--cc`); a local pair or
    /// a tunnel has none to set and is left alone.
    pub fn set_congestion(&self, name: &str) -> io::Result<()> {
        match self.tcp() {
            Some(s) => super::congestion::set(s, name),
            None => Ok(()),
        }
    }

    /// TCP's latest delivery-rate sample of this connection (see [`super::sys::delivery`]);
    /// `None` for a local pair, a tunnel, or a kernel that does not say.
    pub fn delivery(&self) -> Option<super::sys::Delivery> {
        super::sys::delivery(self.tcp()?)
    }

    /// The peer for messages: "198.18.0.1:40000", "[2001:db8::1]:40000" or "local".
    pub fn peer_desc(&self) -> String {
        match &self.io {
            Io::Unix(_) => "local".to_string(),
            Io::Tunnel(t) => t.desc().to_string(),
            _ => match self.peer_addr() {
                Some(a) => a.to_string(),
                None => "unknown peer".to_string(),
            },
        }
    }

    /// Writes `head`, then `data`, which the caller gives up: over TLS it is sealed where it
    /// lies and sent without being copied, so on success it holds ciphertext. On failure
    /// none of `data` went out and it is unchanged (the caller may send it again on another
    /// connection); as with `write`, a socket error may instead show on the next call.
    /// With a `gate`, each piece of at most its slice is paid for before it goes.
    pub fn write_all_in_place(
        &mut self,
        head: &[u8],
        data: &mut [u8],
        gate: Option<&Gate<'_>>,
    ) -> io::Result<()> {
        match (&mut self.io, gate) {
            (Io::Tls(s), _) => s.write_in_place(head, data, gate),
            (Io::TlsServer(s), _) => s.write_in_place(head, data, gate),
            (_, None) => {
                self.write_all(head)?;
                self.write_all(data)
            }
            (_, Some(g)) => write_all_gated(self, &[head, data], g),
        }
    }

    /// Writes every part in order, with a `gate` each piece paid for before it goes.
    pub fn write_all_gated(&mut self, parts: &[&[u8]], gate: Option<&Gate<'_>>) -> io::Result<()> {
        match gate {
            None => parts.iter().try_for_each(|p| self.write_all(p)),
            Some(g) => write_all_gated(self, parts, g),
        }
    }

    /// Whether bytes on this stream are encrypted.
    pub fn is_encrypted(&self) -> bool {
        matches!(self.io, Io::Tls(_) | Io::TlsServer(_))
    }
}

impl Read for Conn {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match &mut self.io {
            Io::Plain(s) => s.read(buf),
            Io::Tls(s) => s.read(buf),
            Io::TlsServer(s) => s.read(buf),
            Io::Unix(s) => s.read(buf),
            Io::Tunnel(t) => t.sock.read(buf),
        }
    }
}

impl Write for Conn {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        // An empty write returns at once, whatever carries the bytes.
        if buf.is_empty() {
            return Ok(0);
        }
        match &mut self.io {
            Io::Plain(s) => s.write(buf),
            Io::Tls(s) => s.write(buf),
            Io::TlsServer(s) => s.write(buf),
            Io::Unix(s) => s.write(buf),
            Io::Tunnel(t) => t.sock.write(buf),
        }
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        if bufs.iter().all(|b| b.is_empty()) {
            return Ok(0);
        }
        match &mut self.io {
            Io::Plain(s) => s.write_vectored(bufs),
            Io::Tls(s) => s.write_vectored(bufs),
            Io::TlsServer(s) => s.write_vectored(bufs),
            Io::Unix(s) => s.write_vectored(bufs),
            Io::Tunnel(t) => t.sock.write_vectored(bufs),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match &mut self.io {
            Io::Plain(s) => s.flush(),
            Io::Tls(s) => s.flush(),
            Io::TlsServer(s) => s.flush(),
            Io::Unix(s) => s.flush(),
            Io::Tunnel(t) => t.sock.flush(),
        }
    }
}

impl fmt::Debug for Conn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match &self.io {
            Io::Plain(_) => "Plain",
            Io::Tls(_) => "Tls",
            Io::TlsServer(_) => "TlsServer",
            Io::Unix(_) => "Unix",
            Io::Tunnel(_) => "Tunnel",
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
    fn try_clone_splits_a_plain_stream_between_threads() {
        let (a, mut b) = Conn::pair().unwrap();
        let mut reader = a.try_clone().unwrap();
        assert_eq!(reader.link_key(), a.link_key());
        assert!(reader.is_dialer());
        let echo = std::thread::spawn(move || {
            let mut buf = [0u8; 4];
            b.read_exact(&mut buf).unwrap();
            b.write_all(&buf).unwrap();
        });
        let mut a = a;
        a.write_all(b"ping").unwrap();
        let mut got = [0u8; 4];
        reader.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"ping");
        echo.join().unwrap();

        // Plain TCP splits too.
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let s = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (mut peer, _) = l.accept().unwrap();
        let c = Conn::new(Io::Plain(s), [7; 32], true);
        let mut w = c.try_clone().unwrap();
        assert_eq!(w.link_key(), [7; 32]);
        w.write_all(b"tcp").unwrap();
        w.shutdown_write().unwrap();
        let mut got = Vec::new();
        peer.read_to_end(&mut got).unwrap();
        assert_eq!(got, b"tcp");
        assert_eq!(c.peer_addr(), Some(l.local_addr().unwrap()));
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
