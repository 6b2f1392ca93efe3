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
//! files (many segments); `hash` is keyed BLAKE3 over the header without the hash (codec,
//! reserved, nseg, raw_len, then every segment) followed by the concatenated raw bytes, so
//! neither the bytes nor where they go can be changed unnoticed ([`hashed_parts`]).
//! A compressed body is only ever sent when it is smaller than the raw bytes, so
//! `body.len() <= raw_len` always, which bounds every frame.
//!
//! Not here: the frame envelope (`frame`), compressing or hashing the body (the drivers do).

use super::limits::{DATA_FIXED_LEN, MAX_BLOCK, MAX_SEGMENTS, SEGMENT_LEN};
use super::ProtocolError;

/// Bit in a segment's length word marking a KEEP segment.
const KEEP_BIT: u32 = 1 << 31;
/// Where the hash sits in a data payload (after codec, reserved, nseg and raw_len).
const HASH_AT: usize = 12;

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
    /// Keyed BLAKE3 of the header (without the hash) and the raw bytes.
    pub hash: [u8; 32],
    fixed: &'a [u8],
    segments: &'a [u8],
    /// The (possibly compressed) bytes.
    pub body: &'a [u8],
}

impl<'a> DataHeader<'a> {
    /// Parses a data payload and checks that its lengths agree.
    pub fn parse(p: &'a [u8]) -> Result<DataHeader<'a>, ProtocolError> {
        let nseg = p
            .get(4..8)
            .and_then(|b| b.try_into().ok())
            .map_or(0, u32::from_le_bytes) as usize;
        let head = DATA_FIXED_LEN.saturating_add(nseg.saturating_mul(SEGMENT_LEN));
        let (head, body) = p.split_at(head.min(p.len()));
        DataHeader::parse_parts(head, body)
    }

    /// Parses a data header held apart from its body (`encode_data_header`'s output, as a
    /// local copy hands it over with the raw bytes) and checks that the lengths agree.
    pub fn parse_parts(head: &'a [u8], body: &'a [u8]) -> Result<DataHeader<'a>, ProtocolError> {
        let p = head;
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
        if p.len() != seg_end {
            return Err(ProtocolError::Malformed("segment table"));
        }
        let h = DataHeader {
            codec,
            raw_len,
            hash,
            fixed: &p[..HASH_AT],
            segments: &p[DATA_FIXED_LEN..seg_end],
            body,
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

    /// The header bytes the unit hash covers, in order (see [`hashed_parts`]).
    pub fn hashed(&self) -> [&'a [u8]; 2] {
        [self.fixed, self.segments]
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

/// Where a data payload's body starts when its header lists `segments` segments.
pub const fn body_at(segments: usize) -> usize {
    DATA_FIXED_LEN + segments * SEGMENT_LEN
}

/// Writes a data payload's header (everything but the body) into `out`, which is cleared
/// first, with the hash zeroed: the sender computes the unit hash over [`hashed_parts`] and
/// the raw bytes and stores it with [`set_hash`]. The frame header is `seal`'s.
pub fn encode_data_header(out: &mut Vec<u8>, codec: Codec, raw_len: u32, segments: &[Segment]) {
    out.clear();
    out.push(codec as u8);
    out.extend_from_slice(&[0, 0, 0]);
    out.extend_from_slice(&(segments.len() as u32).to_le_bytes());
    out.extend_from_slice(&raw_len.to_le_bytes());
    out.extend_from_slice(&[0u8; 32]);
    for s in segments {
        out.extend_from_slice(&s.file.to_le_bytes());
        out.extend_from_slice(&s.offset.to_le_bytes());
        let len = if s.keep { s.len | KEEP_BIT } else { s.len };
        out.extend_from_slice(&len.to_le_bytes());
    }
}

/// The bytes of an encoded data header that its unit hash covers: everything but the hash.
pub fn hashed_parts(hdr: &[u8]) -> [&[u8]; 2] {
    [
        hdr.get(..HASH_AT).unwrap_or_default(),
        hdr.get(DATA_FIXED_LEN..).unwrap_or_default(),
    ]
}

/// Stores the unit hash in an encoded data header.
pub fn set_hash(hdr: &mut [u8], hash: &[u8; 32]) {
    if let Some(slot) = hdr.get_mut(HASH_AT..DATA_FIXED_LEN) {
        slot.copy_from_slice(hash);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A data payload (header and body) with the hash set to 7s.
    fn payload(codec: Codec, segs: &[Segment], body: &[u8], raw_len: u32) -> Vec<u8> {
        let mut out = Vec::new();
        encode_data_header(&mut out, codec, raw_len, segs);
        set_hash(&mut out, &[7u8; 32]);
        out.extend_from_slice(body);
        out
    }

    fn seg(file: u64, offset: u64, len: u32) -> Segment {
        Segment {
            file,
            offset,
            len,
            keep: false,
        }
    }

    #[test]
    fn data_round_trip() {
        let segs = [seg(1, 0, 3), seg(9, 4096, 2)];
        let bytes = payload(Codec::Raw, &segs, b"abcde", 5);
        let h = DataHeader::parse(&bytes).unwrap();
        assert_eq!(h.body, b"abcde");
        assert_eq!(h.hash, [7u8; 32]);
        assert_eq!(h.segments().collect::<Vec<_>>(), segs);
        // Both sides see the same hashed bytes: all of the header but the hash.
        let hdr = &bytes[..bytes.len() - 5];
        assert_eq!(h.hashed(), hashed_parts(hdr));
        assert_eq!(
            hashed_parts(hdr)[0].len() + 32 + hashed_parts(hdr)[1].len(),
            hdr.len()
        );
    }

    #[test]
    fn rejects_inconsistent_lengths() {
        let s = [seg(1, 0, 4)];
        // Raw body shorter than raw_len.
        assert!(DataHeader::parse(&payload(Codec::Raw, &s, b"abc", 4)).is_err());
        // Compressed body not smaller than raw.
        assert!(DataHeader::parse(&payload(Codec::Zstd, &s, b"abcd", 4)).is_err());
        // Segments do not add up.
        assert!(DataHeader::parse(&payload(Codec::Raw, &s, b"abcde", 5)).is_err());
    }

    proptest! {
        #[test]
        fn any_bytes_decode_or_error(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = DataHeader::parse(&bytes);
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
            let bytes = payload(codec, &segs, &body, raw);
            let h = DataHeader::parse(&bytes).unwrap();
            prop_assert_eq!(h.codec, codec);
            prop_assert_eq!(h.raw_len, raw);
            prop_assert_eq!(h.body, &body[..]);
            prop_assert_eq!(h.segments().collect::<Vec<_>>(), segs);
        }

        /// A header held apart from its body parses as the whole payload does, wherever
        /// the two are split.
        #[test]
        fn parts_parse_as_the_whole(bytes in proptest::collection::vec(any::<u8>(), 0..512), at in 0usize..512) {
            let at = at.min(bytes.len());
            let (head, body) = bytes.split_at(at);
            if let Ok(h) = DataHeader::parse_parts(head, body) {
                prop_assert_eq!(DataHeader::parse(&bytes), Ok(h));
            }
        }
    }

    #[test]
    fn header_apart_from_its_body() {
        let s = [Segment {
            file: 7,
            offset: 0,
            len: 5,
            keep: false,
        }];
        let mut head = Vec::new();
        encode_data_header(&mut head, Codec::Raw, 5, &s);
        let h = DataHeader::parse_parts(&head, b"abcde").unwrap();
        assert_eq!(h.segments().collect::<Vec<_>>(), s);
        assert_eq!(h.body, b"abcde");
        assert!(DataHeader::parse_parts(&head, b"abcd").is_err());
        // The head must be exactly the header: a byte more is not a longer table.
        head.push(0);
        assert!(DataHeader::parse_parts(&head, b"abcde").is_err());
    }
}
