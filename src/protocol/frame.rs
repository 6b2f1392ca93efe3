//! Frame layout and the data-unit header, plus [`FrameReader`], the one adapter that turns
//! a byte stream into frames.
//!
//! Every frame starts with an 8-byte header: `kind u8, flags u8 (0), reserved u16 (0),
//! len u32` (little-endian), then `len` bytes of payload. A data payload is:
//!
//! ```text
//! codec u8 | reserved [u8; 3] = 0 | nseg u32 | raw_len u32 | hash [u8; 32]
//! nseg × (file u64 | offset u64 | len u32)          -- where the raw bytes go, in order
//! body                                              -- raw_len bytes, compressed by codec
//! ```
//!
//! Bit 31 of a segment's `len` is the KEEP flag: the range is already correct at the
//! receiver (delta: the hashes matched) and carries no bytes; it only counts towards the
//! file's completion. A unit may consist of KEEP segments only (`raw_len` 0, empty body).
//!
//! One data unit is either one block of one file (one segment) or a pack of whole small
//! files (many segments); `hash` is keyed BLAKE3 over the concatenated raw bytes.
//! A compressed body is only ever sent when it is smaller than the raw bytes, so
//! `body.len() <= raw_len` always, which bounds every frame.

use std::io::{self, Read};

use super::ProtocolError;

/// Bytes in a frame header.
pub const FRAME_HEADER_LEN: usize = 8;
/// Largest control payload (a manifest batch).
pub const MAX_CONTROL_LEN: usize = 16 << 20;
/// Largest raw size of one data unit.
pub const MAX_BLOCK: usize = 64 << 20;
/// Most segments (files) in one data unit.
pub const MAX_SEGMENTS: usize = 4096;
/// Bytes of the fixed part of a data payload.
pub const DATA_FIXED_LEN: usize = 44;
const SEGMENT_LEN: usize = 20;
/// Bit in a segment's length word marking a KEEP segment.
const KEEP_BIT: u32 = 1 << 31;
/// Largest data payload.
pub const MAX_DATA_LEN: usize = DATA_FIXED_LEN + MAX_SEGMENTS * SEGMENT_LEN + MAX_BLOCK;

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

/// How a data unit's body is compressed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Codec {
    /// The body is the raw bytes.
    Raw = 0,
    /// LZ4 block format.
    Lz4 = 1,
    /// A zstd frame.
    Zstd = 2,
}

impl Codec {
    fn from_u8(b: u8) -> Result<Codec, ProtocolError> {
        match b {
            0 => Ok(Codec::Raw),
            1 => Ok(Codec::Lz4),
            2 => Ok(Codec::Zstd),
            other => Err(ProtocolError::UnknownCodec(other)),
        }
    }
}

/// Where a run of a unit's raw bytes belongs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    /// The file's manifest id.
    pub file: u64,
    /// Byte offset in the file.
    pub offset: u64,
    /// Number of bytes (at most `MAX_BLOCK`).
    pub len: u32,
    /// The receiver already has these bytes; none are carried.
    pub keep: bool,
}

/// A parsed data payload, borrowing the frame. Its lengths are consistent: the segments
/// add up to `raw_len`, and the body is never longer than `raw_len`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DataHeader<'a> {
    /// How the body is compressed.
    pub codec: Codec,
    /// Raw bytes in the unit.
    pub raw_len: u32,
    /// Keyed BLAKE3 of the raw bytes.
    pub hash: [u8; 32],
    segments: &'a [u8],
    /// The (possibly compressed) bytes.
    pub body: &'a [u8],
}

impl<'a> DataHeader<'a> {
    /// Parses a data payload and checks that its lengths agree.
    pub fn parse(p: &'a [u8]) -> Result<DataHeader<'a>, ProtocolError> {
        let Some(fixed) = p.first_chunk::<DATA_FIXED_LEN>() else {
            return Err(ProtocolError::Malformed("data header"));
        };
        let codec = Codec::from_u8(fixed[0])?;
        if fixed[1..4] != [0, 0, 0] {
            return Err(ProtocolError::Reserved);
        }
        let nseg = u32::from_le_bytes([fixed[4], fixed[5], fixed[6], fixed[7]]) as usize;
        let raw_len = u32::from_le_bytes([fixed[8], fixed[9], fixed[10], fixed[11]]);
        let mut hash = [0u8; 32];
        hash.copy_from_slice(&fixed[12..44]);
        if nseg == 0 || nseg > MAX_SEGMENTS {
            return Err(ProtocolError::TooLong {
                what: "segment count",
                len: nseg as u64,
                max: MAX_SEGMENTS as u64,
            });
        }
        if raw_len as usize > MAX_BLOCK {
            return Err(ProtocolError::TooLong {
                what: "unit",
                len: raw_len.into(),
                max: MAX_BLOCK as u64,
            });
        }
        let seg_end = DATA_FIXED_LEN + nseg * SEGMENT_LEN;
        if p.len() < seg_end {
            return Err(ProtocolError::Malformed("segment table"));
        }
        let h = DataHeader {
            codec,
            raw_len,
            hash,
            segments: &p[DATA_FIXED_LEN..seg_end],
            body: &p[seg_end..],
        };
        let mut sum: u64 = 0;
        for s in h.segments() {
            if s.len == 0
                || s.len as usize > MAX_BLOCK
                || s.offset.checked_add(s.len.into()).is_none()
            {
                return Err(ProtocolError::Malformed("segment"));
            }
            if !s.keep {
                sum += u64::from(s.len);
            }
        }
        if sum != u64::from(raw_len) {
            return Err(ProtocolError::Malformed("segment lengths"));
        }
        let body_ok = match codec {
            Codec::Raw => h.body.len() == raw_len as usize,
            _ => h.body.len() < raw_len as usize,
        };
        if !body_ok {
            return Err(ProtocolError::Malformed("body length"));
        }
        Ok(h)
    }

    /// The segments, in the order their bytes appear in the raw unit.
    pub fn segments(&self) -> impl Iterator<Item = Segment> + 'a {
        self.segments.chunks_exact(SEGMENT_LEN).map(|c| {
            let len = u32::from_le_bytes(c[16..20].try_into().unwrap_or_default());
            Segment {
                file: u64::from_le_bytes(c[0..8].try_into().unwrap_or_default()),
                offset: u64::from_le_bytes(c[8..16].try_into().unwrap_or_default()),
                len: len & !KEEP_BIT,
                keep: len & KEEP_BIT != 0,
            }
        })
    }
}

/// Writes the frame header and the data header (everything but the body) into `out`,
/// which is cleared first. The caller writes `out` and then the body.
pub fn encode_data_header(
    out: &mut Vec<u8>,
    codec: Codec,
    raw_len: u32,
    hash: &[u8; 32],
    segments: &[Segment],
    body_len: usize,
) {
    out.clear();
    let payload = DATA_FIXED_LEN + segments.len() * SEGMENT_LEN + body_len;
    out.extend_from_slice(&FrameHeader::encode(FrameKind::Data, payload));
    out.push(codec as u8);
    out.extend_from_slice(&[0, 0, 0]);
    out.extend_from_slice(&(segments.len() as u32).to_le_bytes());
    out.extend_from_slice(&raw_len.to_le_bytes());
    out.extend_from_slice(hash);
    for s in segments {
        out.extend_from_slice(&s.file.to_le_bytes());
        out.extend_from_slice(&s.offset.to_le_bytes());
        let len = if s.keep { s.len | KEEP_BIT } else { s.len };
        out.extend_from_slice(&len.to_le_bytes());
    }
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

    fn data_frame(codec: Codec, segs: &[Segment], body: &[u8], raw_len: u32) -> Vec<u8> {
        let mut out = Vec::new();
        encode_data_header(&mut out, codec, raw_len, &[7u8; 32], segs, body.len());
        out.extend_from_slice(body);
        out
    }

    #[test]
    fn data_round_trip() {
        let segs = [
            Segment {
                file: 1,
                offset: 0,
                len: 3,
                keep: false,
            },
            Segment {
                file: 9,
                offset: 4096,
                len: 2,
                keep: false,
            },
        ];
        let bytes = data_frame(Codec::Raw, &segs, b"abcde", 5);
        let (f, used) = decode_frame(&bytes).unwrap().unwrap();
        assert_eq!(used, bytes.len());
        assert_eq!(f.kind, FrameKind::Data);
        let h = DataHeader::parse(f.payload).unwrap();
        assert_eq!(h.body, b"abcde");
        assert_eq!(h.hash, [7u8; 32]);
        assert_eq!(h.segments().collect::<Vec<_>>(), segs);
    }

    #[test]
    fn incomplete_is_none_not_error() {
        let bytes = data_frame(
            Codec::Raw,
            &[Segment {
                file: 1,
                offset: 0,
                len: 4,
                keep: false,
            }],
            b"abcd",
            4,
        );
        for cut in 0..bytes.len() {
            assert_eq!(decode_frame(&bytes[..cut]), Ok(None), "cut at {cut}");
        }
    }

    #[test]
    fn rejects_inconsistent_lengths() {
        let seg = [Segment {
            file: 1,
            offset: 0,
            len: 4,
            keep: false,
        }];
        // Raw body shorter than raw_len.
        let b = data_frame(Codec::Raw, &seg, b"abc", 4);
        let (f, _) = decode_frame(&b).unwrap().unwrap();
        assert!(DataHeader::parse(f.payload).is_err());
        // Compressed body not smaller than raw.
        let b = data_frame(Codec::Zstd, &seg, b"abcd", 4);
        let (f, _) = decode_frame(&b).unwrap().unwrap();
        assert!(DataHeader::parse(f.payload).is_err());
        // Segments do not add up.
        let b = data_frame(Codec::Raw, &seg, b"abcde", 5);
        let (f, _) = decode_frame(&b).unwrap().unwrap();
        assert!(DataHeader::parse(f.payload).is_err());
    }

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
        fn any_bytes_decode_or_error(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            if let Ok(Some((f, used))) = decode_frame(&bytes) {
                prop_assert!(used <= bytes.len());
                if f.kind == FrameKind::Data {
                    let _ = DataHeader::parse(f.payload);
                }
            }
            let _ = DataHeader::parse(&bytes);
            let mut src: &[u8] = &bytes;
            let mut r = FrameReader::new();
            for _ in 0..bytes.len() + 1 {
                match r.read_frame(&mut src) {
                    Ok(Some(_)) => continue,
                    _ => break,
                }
            }
        }

        #[test]
        fn data_round_trip_any(
            segs in proptest::collection::vec((any::<u64>(), 0u64..(1 << 40), 1u32..5000, any::<bool>()), 1..20),
            codec in 0u8..3,
        ) {
            let segs: Vec<Segment> = segs.into_iter().map(|(file, offset, len, keep)| Segment { file, offset, len, keep }).collect();
            let raw: u32 = segs.iter().filter(|s| !s.keep).map(|s| s.len).sum();
            let codec = Codec::from_u8(codec).unwrap();
            let codec = if raw == 0 { Codec::Raw } else { codec };
            let body = vec![0xA5u8; if codec == Codec::Raw { raw as usize } else { raw as usize - 1 }];
            let bytes = data_frame(codec, &segs, &body, raw);
            let (f, used) = decode_frame(&bytes).unwrap().unwrap();
            prop_assert_eq!(used, bytes.len());
            let h = DataHeader::parse(f.payload).unwrap();
            prop_assert_eq!(h.codec, codec);
            prop_assert_eq!(h.raw_len, raw);
            prop_assert_eq!(h.body, &body[..]);
            prop_assert_eq!(h.segments().collect::<Vec<_>>(), segs);
        }

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
