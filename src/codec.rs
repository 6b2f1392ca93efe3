//! Per-unit compression on the way out, and decompression plus verification on the way in.
//!
//! The only way to obtain a [`VerifiedUnit`] from bytes is [`Decoder::decode`], which
//! checks the keyed BLAKE3 hash of the unit's header (codec, lengths, every segment's file,
//! offset, length and KEEP bit) and raw bytes; the store only writes `VerifiedUnit`s, so
//! there is no path from the network to the disk that skips verification. The other way
//! is [`VerifiedUnit::in_process`], for a local copy's units that never left memory.
//!
//! With [`Compression::Auto`] each stream's [`Encoder`] picks every unit's codec with the
//! controller in [`tune`] from what it measured (the frame carries the codec per unit, so
//! the receiver needs no notice of a change). Stream blocks (pipe mode) are authenticated
//! through their BLAKE3 subtree hash instead of their bytes ([`tree`]), so each byte of a
//! stream is hashed once per side.
//!
//! One output buffer per stream serves both codecs (`Encoder::compress`) and only grows:
//! a buffer made to measure per call faults in fresh pages at each switch of codec, which
//! the adaptive codec would time as that codec's cost.

use std::time::Duration;

use crate::protocol::{Codec, DataHeader};

mod clock;
mod mode;
pub mod tree;
pub mod tune;

pub use mode::Compression;

/// Hashes a unit with the transfer's block key: the header bytes it covers (everything
/// but the hash, see `protocol::hashed_parts`), then the raw bytes. Both sides compute it.
pub fn unit_hash(key: &[u8; 32], header: [&[u8]; 2], raw: &[u8]) -> [u8; 32] {
    let mut h = blake3::Hasher::new_keyed(key);
    h.update(header[0]).update(header[1]).update(raw);
    *h.finalize().as_bytes()
}

/// `--checksum`'s hash of a whole file's first `len` bytes, read with `pread` (the file's
/// offset is left alone): the sender's walk takes it of the source, the receiver of its
/// own file of the same size, and equal hashes mean the content is the same. Keyed, and
/// apart from the other hashes by its prefix, so the wire shows nothing of the content.
pub fn content_hash(key: &[u8; 32], file: &std::fs::File, len: u64) -> std::io::Result<[u8; 32]> {
    content_hash_with(key, file, len, &mut |_| {})
}

/// [`content_hash`], calling `read` with the length of each piece read (what tells a long
/// hash from a read that waits on the file system).
pub fn content_hash_with(
    key: &[u8; 32],
    file: &std::fs::File,
    len: u64,
    read: &mut dyn FnMut(usize),
) -> std::io::Result<[u8; 32]> {
    use std::os::unix::fs::FileExt;
    let mut h = blake3::Hasher::new_keyed(key);
    h.update(b"haul --checksum\0");
    let mut buf = vec![0u8; 1 << 20];
    let mut pos = 0u64;
    while pos < len {
        let want = ((len - pos) as usize).min(buf.len());
        let n = file.read_at(&mut buf[..want], pos)?;
        if n == 0 {
            return Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof));
        }
        h.update(&buf[..n]);
        read(n);
        pos += n as u64;
    }
    Ok(*h.finalize().as_bytes())
}

/// The hash both sides compute for one piece of a delta: the receiver of its old
/// version, the sender of the new, and equal hashes mean the piece stays (KEEP).
pub fn piece_hash(key: &[u8; 32], piece: &[u8]) -> [u8; 16] {
    let h = blake3::keyed_hash(key, piece);
    let mut out = [0u8; 16];
    out.copy_from_slice(&h.as_bytes()[..16]);
    out
}

/// Compresses units for one stream, reusing its buffers and zstd contexts.
///
/// A unit that saves less than 3% is sent raw (not worth the receiver's decompression).
/// With a fixed codec, after two such units in a row the encoder stops trying for a while:
/// it sends the next 1, 2, 4 … up to 32 units raw before probing again, so an
/// incompressible stream (media, encrypted or already compressed backups) costs almost no
/// CPU, while a compressible one is noticed again within 32 units. With `Auto`, the
/// controller in [`tune`] makes that choice and every other from its measurements; the
/// caller reports each unit's write time with [`Encoder::wrote`].
pub struct Encoder {
    mode: Compression,
    /// zstd contexts by level, made when first used.
    zstd: Vec<(i32, zstd::bulk::Compressor<'static>)>,
    /// Consecutive units that did not compress (fixed codecs).
    misses: u32,
    /// Units still to send raw without trying (fixed codecs).
    skip: u32,
    tuner: Option<tune::Tuner>,
    /// The last unit's lengths and compression times, until its write time is known.
    pending: Option<Pending>,
    /// Scratch space for probes, kept like a unit's output buffer (see
    /// [`Encoder::compress`]).
    scratch: Vec<u8>,
    /// The level (in `tune::LADDER`) of the last unit, with `Auto`.
    last: Option<usize>,
    /// Times a compression had to grow its output buffer or make a zstd context first.
    /// With `Auto` both happen before the clock starts ([`Encoder::ready`]): timed, the
    /// first unit of a stream (4 MiB zero-filled and faulted in: 1.8 ns per byte against
    /// lz4's 0.3) and the first probe of each zstd level read as that level's cost, and
    /// the first sample of a level is all its running mean knows.
    grew: u32,
    /// Levels whose first probe compressed the slice once untimed (see `Encoder::probe`).
    warmed: u32,
}

/// What the adaptive codec learns from one unit before its write: raw and wire lengths,
/// the compression's thread CPU time and wall time.
#[derive(Debug, Clone, Copy)]
struct Pending {
    raw: usize,
    wire: usize,
    cpu: Duration,
    wall: Duration,
}

/// Longest run of units sent raw without probing.
const MAX_SKIP: u32 = 32;

impl Encoder {
    /// An encoder for the chosen mode, for one of `streams` parallel streams.
    pub fn new(mode: Compression, streams: usize) -> Encoder {
        Encoder {
            mode,
            zstd: Vec::new(),
            misses: 0,
            skip: 0,
            tuner: (mode == Compression::Auto).then(|| tune::Tuner::new(streams)),
            pending: None,
            scratch: Vec::new(),
            last: None,
            grew: 0,
            warmed: 0,
        }
    }

    /// The codec the encoder uses now: the fixed one, or the controller's current choice.
    pub fn current(&self) -> Compression {
        match &self.tuner {
            Some(t) => tune::LADDER[t.current()],
            None => self.mode,
        }
    }

    /// Compresses `raw` into `out` and returns the codec used and the compressed bytes
    /// (the start of `out`). When compression is off, paused, unavailable, or does not
    /// make the unit at least 3% smaller, returns `Codec::Raw` (and no bytes) and the
    /// caller sends `raw` itself. `out` is the stream's to keep: its length and capacity
    /// only ever grow (see [`Encoder::compress`]).
    pub fn encode<'o>(&mut self, raw: &[u8], out: &'o mut Vec<u8>) -> (Codec, &'o [u8]) {
        self.pending = None;
        self.last = None;
        if raw.len() < 64 || self.mode == Compression::None {
            return (Codec::Raw, &[]);
        }
        if let Some(t) = self.tuner.as_mut() {
            let level = t.current();
            self.last = Some(level);
            if let Some(probe) = t.probe_due() {
                self.probe(level, probe, raw);
            }
            self.ready(tune::LADDER[level], raw.len(), out);
            let (wall, started) = (std::time::Instant::now(), clock::thread_cpu());
            let (codec, n) = self.compress(tune::LADDER[level], raw, out);
            let wire = if codec == Codec::Raw { raw.len() } else { n };
            self.pending = Some(Pending {
                raw: raw.len(),
                wire,
                cpu: clock::thread_cpu().saturating_sub(started),
                wall: wall.elapsed(),
            });
            return (codec, &out[..n]);
        }
        if self.skip > 0 {
            self.skip -= 1;
            return (Codec::Raw, &[]);
        }
        let (codec, n) = self.compress(self.mode, raw, out);
        if codec == Codec::Raw {
            self.misses += 1;
            if self.misses >= 2 {
                self.skip = (1u32 << (self.misses - 2).min(5)).min(MAX_SKIP);
            }
        } else {
            self.misses = 0;
        }
        (codec, &out[..n])
    }

    /// Whether the controller runs (`Auto`), so wants [`Encoder::wrote`]'s link samples.
    pub fn adapts(&self) -> bool {
        self.tuner.is_some()
    }

    /// With `Auto`, the level (index in `tune::LADDER`) the last unit was compressed at.
    pub fn last_level(&self) -> Option<usize> {
        self.last
    }

    /// Tells the controller how long the last encoded unit took to write (including
    /// pacing) and TCP's delivery sample after it, if the connection has one; without
    /// `Auto`, or for a unit too small to teach anything, does nothing.
    pub fn wrote(&mut self, write: Duration, link: Option<tune::LinkSample>) {
        if let (Some(t), Some(p)) = (self.tuner.as_mut(), self.pending) {
            t.observe_wall(p.raw, p.cpu, p.wall);
            t.observe(p.raw, p.wire, p.cpu, write, link);
        }
        self.pending = None;
    }

    /// Compresses the start of `raw` with another level `probe` and with the
    /// current `level`, and tells the controller (see `tune`, *Exploration*).
    fn probe(&mut self, level: usize, probe: usize, raw: &[u8]) {
        let slice = &raw[..raw.len().min(tune::PROBE_SLICE)];
        let mut scratch = std::mem::take(&mut self.scratch);
        // A zstd context's first compression makes its tables (a level 6 one timed 33 ms
        // on a 512 KiB slice against 3 ms after: the first sample, all the level's mean
        // knew, kept zstd:6 out of reach for the rest of a run), so a level's first probe
        // compresses the slice once untimed.
        if self.ready(tune::LADDER[probe], slice.len(), &mut scratch) {
            self.compress(tune::LADDER[probe], slice, &mut scratch);
            self.warmed += 1;
        }
        self.ready(tune::LADDER[level], slice.len(), &mut scratch);
        let started = clock::thread_cpu();
        let out = Some(self.compress(tune::LADDER[probe], slice, &mut scratch).1)
            .filter(|&n| n > 0)
            .unwrap_or(slice.len());
        let cpu = clock::thread_cpu().saturating_sub(started);
        let current_out = Some(self.compress(tune::LADDER[level], slice, &mut scratch).1)
            .filter(|&n| n > 0)
            .unwrap_or(slice.len());
        self.scratch = scratch;
        if let Some(t) = self.tuner.as_mut() {
            t.observe_probe(tune::Probe {
                level: probe,
                raw: slice.len(),
                out,
                cpu,
                current_out,
            });
        }
    }

    /// Makes what compressing `len` bytes with `mode` into `out` needs (the buffer's room,
    /// the zstd context), so that timing the compression times only compressing; whether
    /// anything had to be made.
    fn ready(&mut self, mode: Compression, len: usize, out: &mut Vec<u8>) -> bool {
        let bound = lz4_flex::block::get_maximum_output_size(len);
        let grow = out.len() < bound;
        if grow {
            out.resize(bound, 0);
        }
        let mut made = false;
        if let Compression::Zstd(level) = mode {
            made = !self.zstd.iter().any(|(l, _)| *l == level);
            let _ = self.zstd_at(level);
        }
        grow || made
    }

    /// Compresses `raw` with `mode` into the start of `out`; returns the codec and the
    /// compressed length, or `Codec::Raw` (and 0) when it does not shrink by 3%.
    ///
    /// Both kinds write into `out`'s initialized bytes, which only grow (to lz4's bound,
    /// zero-filled once). Made to measure per call, lz4 zero-filled 4 MiB at every unit
    /// and each switch of kind re-allocated it (fresh pages faulted in), which the
    /// adaptive codec timed as lz4's cost (see the module comment).
    fn compress(&mut self, mode: Compression, raw: &[u8], out: &mut Vec<u8>) -> (Codec, usize) {
        let worth = raw.len() - raw.len() / 33;
        let bound = lz4_flex::block::get_maximum_output_size(raw.len());
        if self.ready(mode, raw.len(), out) {
            self.grew += 1;
        }
        let (n, codec) = match mode {
            Compression::None | Compression::Auto => (None, Codec::Raw),
            Compression::Lz4 => (
                lz4_flex::block::compress_into(raw, &mut out[..bound]).ok(),
                Codec::Lz4,
            ),
            Compression::Zstd(level) => {
                // Room only for a worthwhile result: zstd gives up early when the output
                // cannot fit, which is exactly the "does not shrink enough" case.
                let n = self
                    .zstd_at(level)
                    .and_then(|z| z.compress_to_buffer(raw, &mut out[..worth]).ok());
                (n, Codec::Zstd)
            }
        };
        match n {
            Some(n) if n < worth => (codec, n),
            _ => (Codec::Raw, 0),
        }
    }

    /// This stream's zstd context for `level` (none if zstd cannot make one).
    fn zstd_at(&mut self, level: i32) -> Option<&mut zstd::bulk::Compressor<'static>> {
        let at = match self.zstd.iter().position(|(l, _)| *l == level) {
            Some(at) => at,
            None => {
                let z = zstd::bulk::Compressor::new(level).ok()?;
                self.zstd.push((level, z));
                self.zstd.len() - 1
            }
        };
        self.zstd.get_mut(at).map(|(_, z)| z)
    }
}

/// Why a received unit was rejected.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum VerifyError {
    /// The body did not decompress to exactly `raw_len` bytes.
    #[error("unit does not decompress to its declared size")]
    Decompress,
    /// The hash of the raw bytes does not match.
    #[error("hash mismatch")]
    HashMismatch,
}

/// Raw bytes whose keyed hash matched: the only thing the store will write.
pub struct VerifiedUnit<'a> {
    bytes: &'a [u8],
}

impl<'a> VerifiedUnit<'a> {
    /// The bytes of a unit handed over in this process (a local copy's lane): they are the
    /// buffer the sender read and never left memory, so there is nothing to verify. A
    /// lane's unit can only be made by a lane, never decoded from peer bytes.
    pub fn in_process(unit: &'a crate::transport::lane::Unit) -> VerifiedUnit<'a> {
        VerifiedUnit {
            bytes: unit.bytes(),
        }
    }

    /// The verified raw bytes.
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }
}

/// Where [`Decoder::decode`] places a decompressed unit: at an address that is a multiple
/// of this (the alignment the store's direct writes need, `store::direct::ALIGN`).
pub const PAGE: usize = 4096;

/// Where in `buf` `len` bytes decoded into it start so that their memory is [`PAGE`]-
/// aligned for a direct write (`store::direct`: a file written takes them as they are
/// instead of copying them into an aligned buffer first). Makes room first, so they never
/// move: a reused buffer keeps its place and its old bytes (none zero-filled again).
pub fn aligned_start(buf: &mut Vec<u8>, len: usize) -> usize {
    let room = len + PAGE;
    if buf.capacity() < room {
        buf.reserve(room - buf.len());
    }
    buf.as_ptr().align_offset(PAGE)
}

/// Decompresses and verifies units for one stream, reusing its buffer.
pub struct Decoder {
    key: [u8; 32],
    buf: Vec<u8>,
    zstd: Option<zstd::bulk::Decompressor<'static>>,
}

impl Decoder {
    /// A decoder checking hashes with the transfer's block key.
    pub fn new(key: [u8; 32]) -> Decoder {
        Decoder {
            key,
            buf: Vec::new(),
            zstd: None,
        }
    }

    /// Decompresses `h`'s body (if needed) and verifies header and bytes against `h.hash`.
    pub fn decode<'a>(&'a mut self, h: &DataHeader<'a>) -> Result<VerifiedUnit<'a>, VerifyError> {
        let raw_len = h.raw_len as usize;
        let bytes: &'a [u8] = match h.codec {
            Codec::Raw => h.body,
            _ => {
                // Decompressed where a page starts, so that an `O_DIRECT` write takes the
                // unit as it lies instead of copying it into an aligned buffer first.
                let at = aligned_start(&mut self.buf, raw_len);
                decompress(&mut self.zstd, h, &mut self.buf, at)?;
                &self.buf[at..at + raw_len]
            }
        };
        if unit_hash(&self.key, h.hashed(), bytes) != h.hash {
            return Err(VerifyError::HashMismatch);
        }
        Ok(VerifiedUnit { bytes })
    }

    /// Verifies raw (uncompressed) stream block `h`, the stream's bytes at `offset`, where
    /// it lies (its body); returns its chaining value. See [`Decoder::decode_stream_into`].
    pub fn verify_stream_raw(
        &self,
        h: &DataHeader<'_>,
        offset: u64,
    ) -> Result<tree::BlockCv, VerifyError> {
        let raw_len = h.raw_len as usize;
        if h.codec != Codec::Raw || h.body.len() != raw_len || !tree::fits(offset, raw_len) {
            return Err(VerifyError::Decompress);
        }
        let cv = tree::block_cv(offset, h.body);
        if tree::stream_unit_hash(&self.key, h.hashed(), &cv) != h.hash {
            return Err(VerifyError::HashMismatch);
        }
        Ok(cv)
    }

    /// Decodes stream block `h`, the stream's bytes at `offset`, into `out` (decompressing
    /// straight into it) and verifies it against `h.hash` through its BLAKE3 chaining value
    /// ([`tree::stream_unit_hash`]), which it returns for the stream's hash. A block that
    /// is empty, or does not fit a subtree at `offset`, cannot be authentic. On an error
    /// `out` holds nothing the caller may use.
    pub fn decode_stream_into(
        &mut self,
        h: &DataHeader<'_>,
        offset: u64,
        out: &mut Vec<u8>,
    ) -> Result<tree::BlockCv, VerifyError> {
        self.decode_stream_at(h, offset, out, 0)
    }

    /// [`Decoder::decode_stream_into`], the block landing at `out[at..]` (`out` ends up
    /// `at` + the block's length long; what lies before `at` is left as it was): a
    /// receiver puts it where its buffer's memory is aligned for a direct write.
    pub fn decode_stream_at(
        &mut self,
        h: &DataHeader<'_>,
        offset: u64,
        out: &mut Vec<u8>,
        at: usize,
    ) -> Result<tree::BlockCv, VerifyError> {
        let raw_len = h.raw_len as usize;
        if !tree::fits(offset, raw_len) {
            return Err(VerifyError::Decompress);
        }
        match h.codec {
            Codec::Raw => {
                if h.body.len() != raw_len {
                    return Err(VerifyError::Decompress);
                }
                out.resize(at, 0);
                out.extend_from_slice(h.body);
            }
            _ => decompress(&mut self.zstd, h, out, at)?,
        }
        let cv = tree::block_cv(offset, &out[at..]);
        if tree::stream_unit_hash(&self.key, h.hashed(), &cv) != h.hash {
            return Err(VerifyError::HashMismatch);
        }
        Ok(cv)
    }
}

/// Decompresses compressed unit `h` into `out[at..]`, `out` ending up exactly `at` +
/// `raw_len` bytes long. `out` is not cleared first: a reused buffer's old bytes are
/// overwritten, not zeroed and then overwritten. The zstd context is made on first use
/// and kept.
fn decompress(
    zstd: &mut Option<zstd::bulk::Decompressor<'static>>,
    h: &DataHeader<'_>,
    out: &mut Vec<u8>,
    at: usize,
) -> Result<(), VerifyError> {
    let raw_len = h.raw_len as usize;
    out.resize(at + raw_len, 0);
    let out = &mut out[at..];
    let n = match h.codec {
        Codec::Raw => return Err(VerifyError::Decompress),
        Codec::Lz4 => lz4_flex::block::decompress_into(h.body, out).ok(),
        Codec::Zstd => {
            if zstd.is_none() {
                *zstd = Some(zstd::bulk::Decompressor::new().map_err(|_| VerifyError::Decompress)?);
            }
            let z = zstd.as_mut().ok_or(VerifyError::Decompress)?;
            z.decompress_to_buffer(h.body, out).ok()
        }
    };
    match n {
        Some(n) if n == raw_len => Ok(()),
        _ => Err(VerifyError::Decompress),
    }
}

/// Units sent per level of [`tune::LADDER`], by the level's name, cheapest first: a
/// report's `codec_units` (`progress` prints them and knows no codec).
pub fn named_levels(mix: impl IntoIterator<Item = u64>) -> Vec<(String, u64)> {
    tune::LADDER
        .iter()
        .map(|c| c.to_string())
        .zip(mix)
        .collect()
}

#[cfg(test)]
mod tests;
