//! The frame envelope: kinds, the header, a frame, and why reading one failed (the reader
//! is `reader`'s).
//!
//! Every frame starts with a 24-byte header: `kind u8, flags u8 (0), reserved u16 (0),
//! len u32` (little-endian), then a 16-byte tag (see `seal`), then `len` bytes of payload.
//! The reader checks the tag, then bounds the length by the kind, before a byte of the
//! payload is read. What a payload means is not decoded here: a data payload is `data`'s,
//! a control payload is `msg`'s (after `seal` checked and removed its MAC).

use std::io;

use super::limits::{FRAME_TAG_LEN, MAX_CONTROL_LEN, MAX_DATA_LEN};
use super::ProtocolError;

/// Bytes of a frame header before its tag: kind, flags, reserved, length.
pub const FRAME_PREFIX_LEN: usize = 8;
/// Bytes in a frame header, tag included.
pub const FRAME_HEADER_LEN: usize = FRAME_PREFIX_LEN + FRAME_TAG_LEN;

/// What a frame carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameKind {
    /// A postcard-encoded [`super::Control`] message.
    Control = 1,
    /// A data unit.
    Data = 2,
    /// The end of a data stream: nothing more follows on it.
    End = 3,
}

impl FrameKind {
    fn from_u8(b: u8) -> Result<FrameKind, ProtocolError> {
        match b {
            1 => Ok(FrameKind::Control),
            2 => Ok(FrameKind::Data),
            3 => Ok(FrameKind::End),
            other => Err(ProtocolError::UnknownFrame(other)),
        }
    }

    fn max_len(self) -> usize {
        match self {
            FrameKind::Control => MAX_CONTROL_LEN,
            FrameKind::Data => MAX_DATA_LEN,
            FrameKind::End => 0,
        }
    }
}

/// A parsed frame header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameHeader {
    /// The frame's kind.
    pub kind: FrameKind,
    /// Payload length, already checked against the kind's bound.
    pub len: usize,
}

impl FrameHeader {
    /// Parses and bounds-checks a header (its tag is `seal`'s to check).
    pub fn parse(b: &[u8; FRAME_HEADER_LEN]) -> Result<FrameHeader, ProtocolError> {
        let kind = FrameKind::from_u8(b[0])?;
        if b[1] != 0 || b[2] != 0 || b[3] != 0 {
            return Err(ProtocolError::Reserved);
        }
        let len = u32::from_le_bytes([b[4], b[5], b[6], b[7]]) as usize;
        if len > kind.max_len() {
            return Err(ProtocolError::TooLong {
                what: "frame",
                len: len as u64,
                max: kind.max_len() as u64,
            });
        }
        Ok(FrameHeader { kind, len })
    }

    /// The header's first 8 bytes (`seal` appends the tag).
    pub fn encode(kind: FrameKind, len: usize) -> [u8; FRAME_PREFIX_LEN] {
        let mut b = [0u8; FRAME_PREFIX_LEN];
        b[0] = kind as u8;
        b[4..8].copy_from_slice(&(len as u32).to_le_bytes());
        b
    }
}

/// One frame, borrowing its payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Frame<'a> {
    /// The frame's kind.
    pub kind: FrameKind,
    /// The payload (length already bounded).
    pub payload: &'a [u8],
}

/// Why [`FrameReader::read_frame`] returned no frame.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The stream failed, or a read timeout fired (see [`ReadError::is_timeout`]);
    /// after a timeout the partial frame is kept and reading may continue.
    #[error(transparent)]
    Io(#[from] io::Error),
    /// The bytes are not a valid frame.
    #[error(transparent)]
    Protocol(#[from] ProtocolError),
    /// The stream ended in the middle of a frame.
    #[error("connection closed in the middle of a frame")]
    Truncated,
}

impl ReadError {
    /// True when a read timeout fired; nothing is lost and the call may be repeated.
    pub fn is_timeout(&self) -> bool {
        matches!(self, ReadError::Io(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut))
    }
}
