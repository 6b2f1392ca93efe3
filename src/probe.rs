//! `haul probe`: measures, in a few seconds and without changing the destination, what
//! bounds a copy: the source's read rate, the destination's durable write rate, each
//! codec's rate and ratio on a sample of the actual data, and (given a link) the network
//! rate; then picks the setting that keeps up best and predicts the whole job's time.
//!
//! Every number is measured here on this run; nothing is taken from a table. The
//! destination's measurements are in `dest` and the network's in `count` (the far side
//! runs them too); the caller passes the link's rate to [`choose`]. It does not look at
//! what the destination already holds (a re-copy that skips unchanged files is faster
//! than predicted).

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::codec::{Compression, Encoder};
use crate::pagecache;

pub mod count;
pub mod dest;

pub use count::FarMeasure;
pub use dest::{existing_dir, file_cost, open_dir, write_rate, SAMPLE_BLOCK};

/// Sample blocks read from the sources, spread over their bytes.
pub const SAMPLES: usize = 16;
/// The walk stops counting after this long (the total is then a lower bound).
const WALK_LIMIT: Duration = Duration::from_secs(6);
/// The codecs compared, as `--compress` spells them.
pub const CODECS: [Compression; 4] = [
    Compression::None,
    Compression::Lz4,
    Compression::Zstd(1),
    Compression::Zstd(3),
];

/// What the walk found and the sample read from it.
#[derive(Debug, Default)]
pub struct Sources {
    /// Regular files.
    pub files: u64,
    /// Their data bytes (holes not counted).
    pub bytes: u64,
    /// The walk finished within its time (otherwise `files` and `bytes` are lower bounds).
    pub complete: bool,
    /// The sample blocks read.
    pub blocks: Vec<Vec<u8>>,
    /// Bytes read per second from the sample (with `O_DIRECT`: from the disk).
    pub read_rate: Option<f64>,
    /// Whether the reads bypassed the page cache (`O_DIRECT`).
    pub direct: bool,
    /// Share of the sample's pages that were in the page cache before.
    pub cached: f64,
    /// Devices the sampled files are on.
    pub devices: Vec<u64>,
}

/// One codec's measurement on the sample (with BLAKE3, as a stream worker does both).
#[derive(Debug, Clone, Copy)]
pub struct CodecRate {
    /// The codec.
    pub codec: Compression,
    /// Raw bytes per second through compression and hashing, all cores together.
    pub rate: f64,
    /// Raw bytes per byte sent (≥ 1).
    pub ratio: f64,
}

/// What bounds the copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bottleneck {
    /// Reading the sources.
    Read,
    /// Writing at the destination.
    Write,
    /// Reading and writing, on one device that does both in turn.
    Disk,
    /// The network.
    Network,
    /// Compression and hashing.
    Cpu,
}

impl Bottleneck {
    /// The name `--json` prints.
    pub fn name(self) -> &'static str {
        match self {
            Bottleneck::Read => "read",
            Bottleneck::Write => "write",
            Bottleneck::Disk => "disk",
            Bottleneck::Network => "network",
            Bottleneck::Cpu => "cpu",
        }
    }
}

/// The setting picked and what it predicts.
#[derive(Debug, Clone, Copy)]
pub struct Choice {
    /// The codec.
    pub codec: Compression,
    /// Source bytes per second the copy would move.
    pub rate: f64,
    /// What holds it there.
    pub bottleneck: Bottleneck,
}

/// Walks `paths` (not following symlinks) for the files and bytes to copy, then reads
/// [`SAMPLES`] blocks spread over those bytes with `threads` readers.
pub fn sample_sources(paths: &[PathBuf], threads: usize) -> io::Result<Sources> {
    let mut w = Walk {
        started: Instant::now(),
        rng: Rng::new(),
        picks: vec![None; SAMPLES],
        src: Sources {
            complete: true,
            ..Sources::default()
        },
    };
    for p in paths {
        let meta = fs::symlink_metadata(p)?;
        w.visit(p, &meta);
    }
    let mut picks: Vec<(PathBuf, u64)> = Vec::new();
    for (path, size) in w.picks.iter().flatten() {
        let blocks = size.div_ceil(SAMPLE_BLOCK).max(1);
        let at = w.rng.below(blocks) * SAMPLE_BLOCK;
        if !picks.iter().any(|(p, o)| p == path && *o == at) {
            picks.push((path.clone(), at));
        }
    }
    let mut src = w.src;
    read_samples(&mut src, &picks, threads.max(1));
    Ok(src)
}

struct Walk {
    started: Instant,
    rng: Rng,
    /// One weighted reservoir of one file per sample: each file replaces a slot with the
    /// probability of its share of the bytes so far, so samples fall evenly over bytes.
    picks: Vec<Option<(PathBuf, u64)>>,
    src: Sources,
}

impl Walk {
    fn visit(&mut self, path: &Path, meta: &fs::Metadata) {
        if self.started.elapsed() > WALK_LIMIT {
            self.src.complete = false;
            return;
        }
        if meta.is_file() {
            let data = meta.len().min(meta.blocks() * 512);
            self.src.files += 1;
            self.src.bytes += data;
            if data > 0 {
                if !self.src.devices.contains(&meta.dev()) {
                    self.src.devices.push(meta.dev());
                }
                for slot in 0..self.picks.len() {
                    if self.rng.unit() * (self.src.bytes as f64) < data as f64 {
                        self.picks[slot] = Some((path.to_path_buf(), meta.len()));
                    }
                }
            }
        } else if meta.is_dir() {
            let Ok(rd) = fs::read_dir(path) else { return };
            for e in rd.flatten() {
                if let Ok(m) = e.metadata() {
                    self.visit(&e.path(), &m);
                }
            }
        }
    }
}

/// Reads the picked blocks, `threads` at a time, bypassing the page cache where the file
/// system allows (`O_DIRECT`), else dropping what the reads brought in.
fn read_samples(src: &mut Sources, picks: &[(PathBuf, u64)], threads: usize) {
    let started = Instant::now();
    let chunks: Vec<&[(PathBuf, u64)]> =
        picks.chunks(picks.len().div_ceil(threads).max(1)).collect();
    let results: Vec<Vec<(Vec<u8>, bool, f64)>> = std::thread::scope(|s| {
        let hs: Vec<_> = chunks
            .iter()
            .map(|c| s.spawn(move || c.iter().filter_map(|(p, o)| read_one(p, *o)).collect()))
            .collect();
        hs.into_iter().filter_map(|h| h.join().ok()).collect()
    });
    let secs = started.elapsed().as_secs_f64();
    let all: Vec<(Vec<u8>, bool, f64)> = results.into_iter().flatten().collect();
    let bytes: usize = all.iter().map(|(b, _, _)| b.len()).sum();
    if bytes > 0 && secs > 0.0 {
        src.read_rate = Some(bytes as f64 / secs);
    }
    src.direct = !all.is_empty() && all.iter().all(|(_, d, _)| *d);
    let weight: f64 = all.iter().map(|(b, _, _)| b.len() as f64).sum();
    if weight > 0.0 {
        src.cached = all.iter().map(|(b, _, c)| b.len() as f64 * c).sum::<f64>() / weight;
    }
    src.blocks = all
        .into_iter()
        .map(|(b, _, _)| b)
        .filter(|b| !b.is_empty())
        .collect();
}

/// One sample block: its bytes, whether read with `O_DIRECT`, and the share of its pages
/// cached before.
fn read_one(path: &Path, offset: u64) -> Option<(Vec<u8>, bool, f64)> {
    let plain = crate::plan::walk::open_source(path).ok()?;
    let size = plain.metadata().ok()?.len();
    let len = SAMPLE_BLOCK.min(size.saturating_sub(offset)) as usize;
    let cached = pagecache::cached_share(&plain, offset, len as u64);
    let direct = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_DIRECT)
        .open(path);
    if let Ok(f) = direct {
        // O_DIRECT wants an aligned buffer and length: read whole 4 KiB pages.
        let mut buf = vec![0u8; SAMPLE_BLOCK as usize + 4096];
        let skip = buf.as_ptr().align_offset(4096);
        let want = len.div_ceil(4096) * 4096;
        let got = read_full(&f, &mut buf[skip..skip + want], offset);
        if let Ok(n) = got {
            buf.copy_within(skip..skip + n.min(len), 0);
            buf.truncate(n.min(len));
            return Some((buf, true, cached));
        }
    }
    let mut reader = pagecache::Reader::new(false);
    reader.before(&plain, offset, len as u64, size);
    let mut buf = vec![0u8; len];
    let got = read_full(&plain, &mut buf, offset);
    reader.after(&plain);
    let n = got.ok()?;
    buf.truncate(n);
    Some((buf, false, cached))
}

/// Reads until `buf` is full or the file ends.
fn read_full(f: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match f.read_at(&mut buf[n..], offset + n as u64) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// Each codec's rate (with hashing, on `threads` threads) and ratio on the sample.
pub fn codec_rates(blocks: &[Vec<u8>], threads: usize) -> Vec<CodecRate> {
    let total: usize = blocks.iter().map(Vec::len).sum();
    CODECS
        .iter()
        .map(|&codec| {
            let started = Instant::now();
            let sent: usize = std::thread::scope(|s| {
                let hs: Vec<_> = (0..threads.max(1))
                    .map(|t| {
                        s.spawn(move || {
                            let mut out = Vec::new();
                            let mut sent = 0usize;
                            for b in blocks.iter().skip(t).step_by(threads.max(1)) {
                                // A fresh encoder: no skipping learnt from other blocks.
                                let mut enc = Encoder::new(codec, 1);
                                let c = enc.encode(b, &mut out);
                                let _ = crate::codec::unit_hash(&[7; 32], [&[], &[]], b);
                                sent += match c {
                                    crate::protocol::Codec::Raw => b.len(),
                                    _ => out.len(),
                                };
                            }
                            sent
                        })
                    })
                    .collect();
                hs.into_iter().filter_map(|h| h.join().ok()).sum()
            });
            let secs = started.elapsed().as_secs_f64().max(1e-9);
            CodecRate {
                codec,
                rate: total as f64 / secs,
                ratio: if sent == 0 {
                    1.0
                } else {
                    total as f64 / sent as f64
                },
            }
        })
        .collect()
}

/// The codec that moves the most source bytes per second: for each, the least of the
/// read rate, the write rate, its own rate and (across a network) the link's rate times
/// its ratio. A local copy (`network` `None`) sends nothing compressed, so only `none`,
/// and both ends hash every byte on the same cores: half the measured rate. When the
/// source and the destination share a device (`same_device`), it reads and writes in
/// turn: 1 / (1/read + 1/write). Of codecs within 2% of each other the cheapest is taken.
pub fn choose(
    read: Option<f64>,
    write: Option<f64>,
    network: Option<f64>,
    same_device: bool,
    codecs: &[CodecRate],
) -> Option<Choice> {
    let disk = match (read, write) {
        (Some(r), Some(w)) if same_device => Some(1.0 / (1.0 / r + 1.0 / w)),
        _ => None,
    };
    let shared = if network.is_none() { 2.0 } else { 1.0 };
    codecs
        .iter()
        .filter(|c| network.is_some() || c.codec == Compression::None)
        .map(|c| {
            let mut best = Choice {
                codec: c.codec,
                rate: c.rate / shared,
                bottleneck: Bottleneck::Cpu,
            };
            let limits = [
                (read, Bottleneck::Read),
                (write, Bottleneck::Write),
                (network.map(|n| n * c.ratio), Bottleneck::Network),
                (disk, Bottleneck::Disk),
            ];
            for (r, b) in limits {
                if let Some(r) = r.filter(|r| *r < best.rate) {
                    best.rate = r;
                    best.bottleneck = b;
                }
            }
            best
        })
        // The codecs come cheapest first: a costlier one must move 2% more to be taken.
        .fold(None, |best: Option<Choice>, c| match best {
            Some(b) if c.rate <= b.rate * 1.02 => Some(b),
            _ => Some(c),
        })
}

/// A small xorshift generator seeded from the system: for picking samples, nothing secret.
struct Rng(u64);

impl Rng {
    fn new() -> Rng {
        let mut b = [0u8; 8];
        let _ = getrandom::fill(&mut b);
        Rng(u64::from_le_bytes(b) | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in [0, n).
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rate(codec: Compression, rate: f64, ratio: f64) -> CodecRate {
        CodecRate { codec, rate, ratio }
    }

    #[test]
    fn the_slowest_stage_decides_and_a_slow_link_wants_compression() {
        let codecs = [
            rate(Compression::None, 3000e6, 1.0),
            rate(Compression::Lz4, 900e6, 2.0),
            rate(Compression::Zstd(1), 400e6, 3.0),
            rate(Compression::Zstd(3), 150e6, 3.3),
        ];
        // 100 Mbit/s: the best ratio wins (12.5 MB/s × 3.3).
        let c = choose(Some(500e6), Some(400e6), Some(12.5e6), false, &codecs).unwrap();
        assert_eq!(c.codec, Compression::Zstd(3));
        assert_eq!(c.bottleneck, Bottleneck::Network);
        // 10 Gbit/s: the disk decides, and compressing gains nothing.
        let c = choose(Some(500e6), Some(400e6), Some(1250e6), false, &codecs).unwrap();
        assert_eq!(
            (c.codec, c.bottleneck),
            (Compression::None, Bottleneck::Write)
        );
        assert!((c.rate - 400e6).abs() < 1.0);
        // Locally nothing is compressed.
        let c = choose(Some(500e6), Some(900e6), None, false, &codecs).unwrap();
        assert_eq!(
            (c.codec, c.bottleneck),
            (Compression::None, Bottleneck::Read)
        );
        // One disk reading and writing in turn: 1/(1/500 + 1/900) ≈ 321 MB/s.
        let c = choose(Some(500e6), Some(900e6), None, true, &codecs).unwrap();
        assert_eq!(c.bottleneck, Bottleneck::Disk);
        assert!((c.rate - 321.4e6).abs() < 0.1e6, "{}", c.rate);
    }

    #[test]
    fn sources_are_sampled_and_the_write_test_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a");
        fs::write(&a, vec![3u8; (SAMPLE_BLOCK * 2 + 5) as usize]).unwrap();
        fs::write(dir.path().join("b"), b"small").unwrap();
        let s = sample_sources(&[dir.path().to_path_buf()], 2).unwrap();
        assert_eq!((s.files, s.complete), (2, true));
        assert!(s.bytes >= SAMPLE_BLOCK * 2 + 10);
        assert!(!s.blocks.is_empty() && s.read_rate.unwrap() > 0.0);
        let out = tempfile::tempdir().unwrap();
        let dir = open_dir(out.path()).unwrap();
        use std::os::fd::AsFd;
        assert!(write_rate(dir.as_fd(), &s.blocks).unwrap() > 0.0);
        assert!(file_cost(dir.as_fd(), 3).unwrap() > 0.0);
        assert_eq!(fs::read_dir(out.path()).unwrap().count(), 0);
        let rates = codec_rates(&s.blocks, 2);
        assert_eq!(rates.len(), CODECS.len());
        // Runs of one byte compress well; none sends them as they are.
        assert!(rates[0].ratio == 1.0 && rates[1].ratio > 10.0 && rates[2].ratio > 10.0);
    }
}
