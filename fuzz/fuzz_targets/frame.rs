//! Frame layer (protocol v2, every frame authenticated), two ways:
//!
//! 1. The raw input through `FrameReader` with an `Opener` for a fixed link key, read in
//!    fuzzer-chosen chunk sizes: exercises header-tag and control-MAC rejection, partial
//!    headers and timeouts (a random tag almost never verifies).
//! 2. The input as a list of `(kind, len, payload)` records that this target seals with a
//!    `Sealer` for the same key, then reads back through a fresh `FrameReader`: so the
//!    parsers *behind* authentication get fuzzed — `FrameHeader` bounds, the control MAC
//!    split, `DataHeader::parse` (and the segment table) on every data payload, and the
//!    codec's decompress-and-verify step (the target recomputes the keyed unit hash of
//!    each decompressible unit, as an honest sender would, unless a flag says not to).
#![no_main]

use std::cell::RefCell;
use std::io::{self, Read};

use haul::codec::{unit_hash, Decoder};
use haul::protocol::{Codec, DataHeader, FrameKind, FrameReader, Opener, Sealer, DATA_FIXED_LEN};
use libfuzzer_sys::fuzz_target;

/// The connection's link key (both ends share it).
const LINK: [u8; 32] = [0x4c; 32];
/// The transfer's block key (data unit hashes).
const BLOCK_KEY: [u8; 32] = [0x6b; 32];

/// Hands out the bytes in chunks whose sizes come from the input itself, so partial
/// headers and payloads split across reads are exercised.
struct Chunked<'a> {
    data: &'a [u8],
    sizes: &'a [u8],
    i: usize,
}

impl Read for Chunked<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let want = match self.sizes.get(self.i % self.sizes.len().max(1)) {
            Some(&0) => {
                self.i += 1;
                return Err(io::Error::new(io::ErrorKind::WouldBlock, "tick"));
            }
            Some(&s) => usize::from(s),
            None => buf.len(),
        };
        self.i += 1;
        let n = want.min(buf.len()).min(self.data.len());
        buf[..n].copy_from_slice(&self.data[..n]);
        self.data = &self.data[n..];
        Ok(n)
    }
}

thread_local! {
    /// One decoder for the whole run, as a receiver keeps one per stream.
    static DEC: RefCell<Decoder> = RefCell::new(Decoder::new(BLOCK_KEY));
}

fn check_data(payload: &[u8]) {
    if let Ok(h) = DataHeader::parse(payload) {
        let mut sum = 0u64;
        for s in h.segments() {
            assert!(s.len > 0);
            if !s.keep {
                sum += u64::from(s.len);
            }
        }
        assert_eq!(sum, u64::from(h.raw_len), "segments must add up to raw_len");
        assert!(h.body.len() <= h.raw_len as usize);
        DEC.with_borrow_mut(|dec| {
            if let Ok(v) = dec.decode(&h) {
                assert_eq!(v.bytes().len(), h.raw_len as usize);
            }
        });
    }
}

/// Reads every frame from `stream` (chunked by `sizes`) with a reader for `LINK`;
/// returns the frames' kinds and payloads in order.
fn read_all(stream: &[u8], sizes: &[u8]) -> Vec<(FrameKind, Vec<u8>)> {
    let mut r = Chunked {
        data: stream,
        sizes,
        i: 0,
    };
    let mut reader = FrameReader::new(Opener::new(LINK, false));
    let mut out = Vec::new();
    // A timeout tick must lose nothing: with any non-zero read size every tick is
    // followed by progress, so keep polling; with only ticks, give up after 64.
    let progress = sizes.iter().any(|&s| s != 0);
    let mut ticks = 0;
    loop {
        match reader.read_frame(&mut r) {
            Ok(Some(f)) => {
                if f.kind == FrameKind::Data {
                    check_data(f.payload);
                }
                out.push((f.kind, f.payload.to_vec()));
            }
            Ok(None) => break,
            Err(e) if e.is_timeout() && (progress || ticks < 64) => ticks += 1,
            Err(_) => break,
        }
    }
    out
}

/// The keyed unit hash an honest sender would put in `payload`, if it decompresses.
fn fix_hash(payload: &mut [u8]) {
    let Ok(h) = DataHeader::parse(payload) else {
        return;
    };
    let raw_len = h.raw_len as usize;
    let raw: Option<Vec<u8>> = match h.codec {
        Codec::Raw => Some(h.body.to_vec()),
        Codec::Lz4 => lz4_flex::block::decompress(h.body, raw_len)
            .ok()
            .filter(|r| r.len() == raw_len),
        Codec::Zstd => zstd::bulk::decompress(h.body, raw_len)
            .ok()
            .filter(|r| r.len() == raw_len),
    };
    if let Some(raw) = raw {
        let hash = unit_hash(&BLOCK_KEY, h.hashed(), &raw);
        payload[12..DATA_FIXED_LEN].copy_from_slice(&hash);
    }
}

fuzz_target!(|data: &[u8]| {
    // The first byte: low 3 bits pick how many leading bytes are read sizes (0 = a
    // timeout tick, which must lose nothing); bit 3 turns off the unit hash fix-up; bit 4
    // flips one bit of the sealed stream (chosen by the next byte).
    let Some((&mode, tail)) = data.split_first() else {
        return;
    };
    let (sizes, body) = tail.split_at(usize::from(mode & 7).min(tail.len()));

    // 1. Raw bytes: almost all rejected at the first header tag.
    read_all(body, sizes);

    // 2. Records `kind u8, len u16 LE, payload`, sealed by an honest writer.
    let (flip, mut rest) = match body.split_first() {
        Some((&f, r)) if mode & 0x10 != 0 => (Some(f), r),
        _ => (None, body),
    };
    let mut sealer = Sealer::new(LINK, true);
    let mut stream = Vec::new();
    let mut sent = Vec::new();
    while rest.len() >= 3 {
        let kind = match rest[0] % 3 {
            0 => FrameKind::Control,
            1 => FrameKind::Data,
            _ => FrameKind::End,
        };
        let len = usize::from(u16::from_le_bytes([rest[1], rest[2]])).min(rest.len() - 3);
        let mut payload = rest[3..3 + len].to_vec();
        rest = &rest[3 + len..];
        match kind {
            FrameKind::Control => sealer.control(&payload, &mut stream),
            FrameKind::Data => {
                if mode & 8 == 0 {
                    fix_hash(&mut payload);
                }
                stream.extend_from_slice(&sealer.header(kind, payload.len()));
                stream.extend_from_slice(&payload);
            }
            FrameKind::End => {
                // An End frame carries nothing; a non-empty one must be refused.
                stream.extend_from_slice(&sealer.header(kind, payload.len()));
                stream.extend_from_slice(&payload);
            }
        }
        sent.push((kind, payload));
    }
    if let Some(f) = flip {
        if !stream.is_empty() {
            let bit = usize::from(f) * 8 + usize::from(mode >> 5);
            let at = bit % (stream.len() * 8);
            stream[at / 8] ^= 1 << (at % 8);
        }
    }
    let got = read_all(&stream, sizes);
    // What an honest writer sealed comes back unchanged, up to the first frame the
    // protocol refuses (a non-empty End) or the flipped bit. A flipped bit in a data
    // payload passes the frame layer (the unit hash catches it, see `check_data`); one
    // anywhere else must not.
    assert!(got.len() <= sent.len());
    for (i, (g, s)) in got.iter().zip(&sent).enumerate() {
        assert_eq!(g.0, s.0, "frame {i}: kind altered yet accepted");
        if flip.is_none() || g.0 != FrameKind::Data {
            assert_eq!(g.1, s.1, "frame {i}: payload altered yet accepted");
        }
    }
    // (Unless the read sizes are all ticks: then the reader gives up after 64.)
    if flip.is_none() && (sizes.is_empty() || sizes.iter().any(|&s| s != 0)) {
        let ok = sent
            .iter()
            .take_while(|(k, p)| *k != FrameKind::End || p.is_empty())
            .count();
        assert!(got.len() >= ok, "an honest frame was refused");
    }

    // 3. The payload bytes directly as a data payload.
    check_data(body);
});
