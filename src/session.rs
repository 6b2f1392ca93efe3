//! The control-stream conversation both ends of a transfer share: writing and reading one
//! control message on a connection, and what a broken connection is (a transport error,
//! which the sender answers by re-dialing and the receiver by waiting for a new one).
//!
//! The order of the messages (Start, Entries/Need pairs, Forget, Finish, Done or Error)
//! is `protocol`'s; which side says what is `send`'s and `receive`'s. Not here: framing
//! (protocol), connecting (transport), retries (send).

use std::io::{self, Write};
use std::time::Duration;

use crate::error::{Error, Result};
use crate::protocol::{Control, FrameKind, FrameReader, ProtocolError, ReadError};
use crate::transport::{Conn, TransportError};

/// Maps a stream failure to a transport error (a lost connection, exit 5).
pub fn lost(e: io::Error) -> Error {
    Error::Transport(TransportError::Io(e))
}

/// Writes one control message.
pub fn write_msg(conn: &mut Conn, msg: &Control) -> Result<()> {
    let mut buf = Vec::new();
    msg.encode(&mut buf)?;
    conn.write_all(&buf).map_err(lost)?;
    conn.flush().map_err(lost)
}

/// Reads one control message; `timeout` None blocks. A peer that closes the stream is
/// reported as gone.
pub fn read_msg(
    conn: &mut Conn,
    reader: &mut FrameReader,
    timeout: Option<Duration>,
) -> Result<Control> {
    conn.set_read_timeout(timeout).map_err(lost)?;
    match reader.read_frame(conn) {
        Ok(Some(f)) if f.kind == FrameKind::Control => Ok(Control::decode(f.payload)?),
        Ok(Some(_)) => {
            Err(ProtocolError::Unexpected("non-control frame on the control stream".into()).into())
        }
        Ok(None) | Err(ReadError::Truncated) => Err(lost(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "the peer closed the connection",
        ))),
        Err(ReadError::Io(e)) => Err(lost(e)),
        Err(ReadError::Protocol(p)) => Err(p.into()),
    }
}
