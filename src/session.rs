//! The control-stream conversation both ends of a transfer share: a [`Channel`] writes and
//! reads control messages on one connection, sealed with that connection's link key, and
//! says what a broken connection is (a transport error, which the sender answers by
//! re-dialing and the receiver by waiting for a new one).
//!
//! A frame that fails verification (edited, dropped or reordered on the way) is a broken
//! connection too, never a message: [`is_forged`] tells it apart so the receiver can count
//! such failures. The order of the messages (Start, Entries/Need pairs, Forget, Finish,
//! Done or Error) is `protocol`'s; which side says what is `send`'s and `receive`'s. Not
//! here: framing and tags (protocol), connecting (transport), retries (send).
//! [`Successors`]: the receivers after one side of a chain fan-out, which the sender and
//! the relays both go on with when the nearest fails.

use std::io::{self, Write};
use std::time::Duration;

use crate::error::{Error, Result};
use crate::protocol::{Control, FrameKind, FrameReader, Opener, ProtocolError, ReadError, Sealer};
use crate::transport::{Conn, TransportError};

pub mod stream;
mod successors;
pub mod watch;
pub use successors::{check_not_self, Successors};

/// How long to wait before re-dial `n` of a dropped connection: at once, then 0.25 s,
/// doubling to 4 s (the sender's data and control connections, a relay's next hop).
pub fn backoff(n: u32) -> Duration {
    match n {
        0 => Duration::ZERO,
        n => Duration::from_millis(250u64 << (n - 1).min(4)),
    }
}

/// Maps a stream failure to a transport error (a lost connection, exit 5).
pub fn lost(e: io::Error) -> Error {
    Error::Transport(TransportError::Io(e))
}

/// A frame that failed verification: handled like a lost connection (exit 5 if it is the
/// last straw), recognisable with [`is_forged`].
pub fn forged(e: ProtocolError) -> Error {
    lost(io::Error::new(io::ErrorKind::InvalidData, e))
}

/// True when `e` is a connection that delivered bytes that failed verification: a frame
/// tag, control MAC or (under TLS) a record that did not authenticate.
pub fn is_forged(e: &Error) -> bool {
    matches!(e, Error::Transport(TransportError::Io(x)) if x.kind() == io::ErrorKind::InvalidData)
}

/// True when `e` is only a read that timed out (nothing arrived in time).
pub fn is_tick(e: &Error) -> bool {
    matches!(e, Error::Transport(TransportError::Io(x))
        if matches!(x.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut))
}

/// Tags frames we write on `conn`.
pub fn sealer(conn: &Conn) -> Sealer {
    Sealer::new(conn.link_key(), conn.is_dialer())
}

/// Reads and checks frames arriving on `conn`.
pub fn frame_reader(conn: &Conn) -> FrameReader {
    FrameReader::new(Opener::new(conn.link_key(), conn.is_dialer()))
}

/// One control connection, with the state of its frame tags in both directions.
pub struct Channel {
    conn: Conn,
    reader: FrameReader,
    sealer: Sealer,
}

impl Channel {
    /// A channel on a fresh connection (nothing read or written on it yet).
    pub fn new(conn: Conn) -> Channel {
        Channel {
            reader: frame_reader(&conn),
            sealer: sealer(&conn),
            conn,
        }
    }

    /// Writes one control message.
    pub fn write(&mut self, msg: &Control) -> Result<()> {
        let mut buf = Vec::new();
        msg.encode(&mut self.sealer, &mut buf)?;
        self.conn.write_all(&buf).map_err(lost)?;
        self.conn.flush().map_err(lost)
    }

    /// Reads one control message; `timeout` None blocks. A peer that closes the stream is
    /// reported as gone; a frame that fails verification as [`forged`].
    pub fn read(&mut self, timeout: Option<Duration>) -> Result<Control> {
        self.conn.set_read_timeout(timeout).map_err(lost)?;
        match self.reader.read_frame(&mut self.conn) {
            Ok(Some(f)) if f.kind == FrameKind::Control => Ok(Control::decode(f.payload)?),
            Ok(Some(_)) => Err(ProtocolError::Unexpected(
                "non-control frame on the control stream".into(),
            )
            .into()),
            Ok(None) | Err(ReadError::Truncated) => Err(lost(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the peer closed the connection",
            ))),
            Err(ReadError::Io(e)) => Err(lost(e)),
            Err(ReadError::Protocol(p @ ProtocolError::Forged(_))) => Err(forged(p)),
            Err(ReadError::Protocol(p)) => Err(p.into()),
        }
    }

    /// Shuts down our direction; the peer reads end-of-stream after what we wrote.
    pub fn shutdown_write(&mut self) -> io::Result<()> {
        self.conn.shutdown_write()
    }

    /// Drops the connection at once (both directions), e.g. after a frame failed
    /// verification: the peer's next read or write fails and it re-dials.
    pub fn abort(&mut self) {
        self.conn.abort();
    }

    /// The connection, for messages (its peer).
    pub fn conn(&self) -> &Conn {
        &self.conn
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{Summary, SyncOptions};

    #[test]
    fn messages_pass_and_a_flipped_bit_is_a_forged_connection() {
        let (a, b) = Conn::pair().unwrap();
        let (mut a, mut b) = (Channel::new(a), Channel::new(b));
        let start = Control::Start {
            streams: 2,
            block_size: 1 << 20,
            options: SyncOptions::default(),
        };
        a.write(&start).unwrap();
        assert_eq!(b.read(None).unwrap(), start);
        b.write(&Control::Done(Summary::default())).unwrap();
        assert_eq!(a.read(None).unwrap(), Control::Done(Summary::default()));

        // The same message replayed as raw bytes is refused: its sequence number is used.
        let mut replay = Vec::new();
        start.encode(&mut sealer(&a.conn), &mut replay).unwrap();
        a.conn.write_all(&replay).unwrap();
        let e = b.read(None).unwrap_err();
        assert!(is_forged(&e), "{e}");
    }
}
