//! The frame envelope, plus [`FrameReader`], the one adapter that turns a byte stream into
//! frames.
//!
//! Every frame starts with an 8-byte header: `kind u8, flags u8 (0), reserved u16 (0),
//! len u32` (little-endian), then `len` bytes of payload, bounded by the kind before a byte
//! of it is read. What a payload means is not decoded here: a data payload is `data`'s, a
//! control payload is `msg`'s.

use std::io::{self, Read};

use super::limits::{MAX_CONTROL_LEN, MAX_DATA_LEN};
use super::ProtocolError;

/// Bytes in a frame header.
pub const FRAME_HEADER_LEN: usize = 8;

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
    /// Parses and bounds-checks a header.
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

    /// The header's 8 bytes.
    pub fn encode(kind: FrameKind, len: usize) -> [u8; FRAME_HEADER_LEN] {
        let mut b = [0u8; FRAME_HEADER_LEN];
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

/// Decodes one frame from the front of `buf`: `Ok(None)` when more bytes are needed,
/// otherwise the frame and how many bytes it used.
pub fn decode_frame(buf: &[u8]) -> Result<Option<(Frame<'_>, usize)>, ProtocolError> {
    let Some(head) = buf.first_chunk::<FRAME_HEADER_LEN>() else {
        return Ok(None);
    };
    let h = FrameHeader::parse(head)?;
    let total = FRAME_HEADER_LEN + h.len;
    if buf.len() < total {
        return Ok(None);
    }
    let frame = Frame {
        kind: h.kind,
        payload: &buf[FRAME_HEADER_LEN..total],
    };
    Ok(Some((frame, total)))
}

/// Appends a whole frame (header and payload) to `out`.
pub fn encode_frame(out: &mut Vec<u8>, kind: FrameKind, payload: &[u8]) {
    out.extend_from_slice(&FrameHeader::encode(kind, payload.len()));
    out.extend_from_slice(payload);
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

/// Turns a byte stream into frames. It keeps partial frames across read timeouts, so a
/// caller may poll a stream with a timeout without losing bytes.
#[derive(Default)]
pub struct FrameReader {
    buf: Vec<u8>,
    start: usize,
    end: usize,
    consumed: usize,
}

const READ_CHUNK: usize = 256 << 10;

impl FrameReader {
    /// An empty reader.
    pub fn new() -> FrameReader {
        FrameReader::default()
    }

    /// Reads until one whole frame is buffered and returns it; `Ok(None)` on a clean end
    /// of stream between frames. The frame borrows the reader until the next call.
    pub fn read_frame<R: Read>(&mut self, r: &mut R) -> Result<Option<Frame<'_>>, ReadError> {
        self.start += std::mem::take(&mut self.consumed);
        loop {
            let avail = &self.buf[self.start..self.end];
            // Borrow check: decode only to learn the size, then re-slice below.
            let need = match decode_frame(avail)? {
                Some((_, used)) => {
                    self.consumed = used;
                    let (frame, _) = decode_frame(&self.buf[self.start..self.end])?
                        .ok_or(ReadError::Truncated)?;
                    return Ok(Some(frame));
                }
                None => match avail.first_chunk::<FRAME_HEADER_LEN>() {
                    Some(h) => FRAME_HEADER_LEN + FrameHeader::parse(h)?.len,
                    None => FRAME_HEADER_LEN,
                },
            };
            self.make_room(need);
            let n = loop {
                match r.read(&mut self.buf[self.end..]) {
                    Ok(n) => break n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(e.into()),
                }
            };
            if n == 0 {
                return if self.start == self.end {
                    Ok(None)
                } else {
                    Err(ReadError::Truncated)
                };
            }
            self.end += n;
        }
    }

    /// Ensures the buffer can hold `need` bytes from `start`, with read-ahead room.
    fn make_room(&mut self, need: usize) {
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
        let want = need.max(READ_CHUNK);
        if self.buf.len() - self.start < want {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if self.buf.len() < want {
            self.buf.resize(want, 0);
        }
        if self.end == self.buf.len() {
            // A full frame is buffered is impossible here (decode said incomplete), so
            // `need > end`; the resize above made room.
            self.buf.resize(self.buf.len() + READ_CHUNK, 0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn oversized_header_rejected_before_allocation() {
        let h = FrameHeader::encode(FrameKind::Control, MAX_CONTROL_LEN + 1);
        assert!(matches!(
            decode_frame(&h),
            Err(ProtocolError::TooLong { .. })
        ));
        let mut r = FrameReader::new();
        let mut src: &[u8] = &h;
        assert!(matches!(
            r.read_frame(&mut src),
            Err(ReadError::Protocol(_))
        ));
    }

    /// A reader that hands out bytes a few at a time and times out in between.
    struct Trickle {
        data: Vec<u8>,
        pos: usize,
        step: usize,
        tick: bool,
    }

    impl Read for Trickle {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            self.tick = !self.tick;
            if self.tick {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            let n = self.step.min(buf.len()).min(self.data.len() - self.pos);
            buf[..n].copy_from_slice(&self.data[self.pos..self.pos + n]);
            self.pos += n;
            Ok(n)
        }
    }

    #[test]
    fn reader_survives_timeouts_mid_frame() {
        let mut stream = Vec::new();
        for i in 0..50u8 {
            encode_frame(&mut stream, FrameKind::Control, &vec![i; i as usize * 100]);
        }
        encode_frame(&mut stream, FrameKind::End, &[]);
        let mut t = Trickle {
            data: stream,
            pos: 0,
            step: 37,
            tick: false,
        };
        let mut r = FrameReader::new();
        let mut got = Vec::new();
        loop {
            match r.read_frame(&mut t) {
                Ok(Some(f)) => got.push((f.kind, f.payload.to_vec())),
                Ok(None) => break,
                Err(e) if e.is_timeout() => continue,
                Err(e) => panic!("{e}"),
            }
        }
        assert_eq!(got.len(), 51);
        for (i, (kind, p)) in got.iter().take(50).enumerate() {
            assert_eq!(*kind, FrameKind::Control);
            assert_eq!(p, &vec![i as u8; i * 100]);
        }
        assert_eq!(got[50].0, FrameKind::End);
    }

    #[test]
    fn truncated_stream_is_an_error() {
        let mut stream = Vec::new();
        encode_frame(&mut stream, FrameKind::Control, b"hello");
        stream.pop();
        let mut src: &[u8] = &stream;
        assert!(matches!(
            FrameReader::new().read_frame(&mut src),
            Err(ReadError::Truncated)
        ));
    }

    proptest! {
        #[test]
        fn control_frames_split_anywhere(payloads in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..300), 1..10), step in 1usize..64) {
            let mut stream = Vec::new();
            for p in &payloads {
                encode_frame(&mut stream, FrameKind::Control, p);
            }
            let mut t = Trickle { data: stream, pos: 0, step, tick: false };
            let mut r = FrameReader::new();
            let mut got = Vec::new();
            loop {
                match r.read_frame(&mut t) {
                    Ok(Some(f)) => got.push(f.payload.to_vec()),
                    Ok(None) => break,
                    Err(e) if e.is_timeout() => continue,
                    Err(e) => panic!("{e}"),
                }
            }
            prop_assert_eq!(got, payloads);
        }
    }
}
