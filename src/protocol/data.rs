//! The data unit: the header of a [`FrameKind::Data`] payload, which says how the body is
//! compressed and where its raw bytes belong.
//!
//! A data payload is:
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
//!
//! Not here: the frame envelope (`frame`), compressing or hashing the body (the drivers do).

use super::frame::{FrameHeader, FrameKind};
use super::limits::{DATA_FIXED_LEN, MAX_BLOCK, MAX_SEGMENTS, SEGMENT_LEN};
use super::ProtocolError;

/// Bit in a segment's length word marking a KEEP segment.
const KEEP_BIT: u32 = 1 << 31;

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{decode_frame, FrameReader};
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

    }
}
