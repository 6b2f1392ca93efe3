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
//!
//! Measured, each as a copy would do it: the walk (no links followed; at most 6 s, else
//! `walk_complete: false`); one random 4 MiB block of each of 16 files picked by bytes, read
//! `O_DIRECT` on `--streams` threads (`read_cached`: the share already cached), and 256
//! small files read whole (`small`); the destination's durable write rate and cost per file
//! (`dest`); each codec on the sample; the network (`count`, over the copy's route). The
//! model (`model`) takes the codec finishing soonest, a costlier one only when 2% sooner;
//! it does not model metadata and links, a re-copy or set-up. A far DST's end stops 30 s
//! after `Ready` whatever happens. Far and local sources mixed, and far sources with
//! `--to`, are refused (exit 2).

use std::fs::{self, File};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustix::fs::OFlags;

use crate::codec::{Compression, Encoder};
use crate::pagecache;
use crate::plan::beneath::{Root, Within};
use crate::plan::meta::Meta;
use open::open_regular;

pub mod count;
pub mod dest;
mod disks;
pub mod model;
mod open;
mod small;

pub use count::FarMeasure;
pub use dest::{existing_dir, file_cost, open_dir, write_rate, SAMPLE_BLOCK};
pub use disks::share_disk;
pub use model::{choose, Choice, Job};

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
    /// The sample blocks read (kept where they were read: a far source sends none).
    pub blocks: Vec<Vec<u8>>,
    /// How many blocks were sampled.
    pub sampled: usize,
    /// Bytes read per second from the sample (with `O_DIRECT`: from the disk).
    pub read_rate: Option<f64>,
    /// Whether the reads bypassed the page cache (`O_DIRECT`).
    pub direct: bool,
    /// Share of the sample's pages that were in the page cache before.
    pub cached: f64,
    /// Devices the sampled files are on.
    pub devices: Vec<u64>,
    /// Of the files, those the sender reads whole and packs (at most [`small::MAX`]).
    pub small_files: u64,
    /// Their data bytes.
    pub small_bytes: u64,
    /// Wall seconds per small file, read whole as the sender's workers read them.
    pub small_read: Option<f64>,
    /// Seconds the walk took.
    pub walk_secs: f64,
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
    /// Making many small files durable at the destination.
    Files,
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
            Bottleneck::Files => "files",
        }
    }
}

/// Walks `paths` (not following symlinks) for the files and bytes to copy, then reads
/// [`SAMPLES`] blocks spread over those bytes with `threads` readers.
pub fn sample_sources(paths: &[PathBuf], threads: usize) -> io::Result<Sources> {
    let mut w = Walk {
        started: Instant::now(),
        rng: Rng::new(),
        picks: vec![None; SAMPLES],
        small: Vec::new(),
        src: Sources {
            complete: true,
            ..Sources::default()
        },
    };
    for p in paths {
        let meta = fs::symlink_metadata(p)?;
        let at = match (meta.is_dir(), meta.is_file()) {
            (true, _) => Within {
                root: Arc::new(Root::held(p, &Meta::lstat(p)?)?),
                rel: PathBuf::new(),
            },
            // A file is opened beneath the directory holding it.
            (_, true) => Within::new(&Arc::new(Root::of(p, &Meta::lstat(p)?)?), p)?,
            // A symlink or a special file given as a source: nothing to sample.
            _ => continue,
        };
        w.visit(&at, &meta);
    }
    w.src.walk_secs = w.started.elapsed().as_secs_f64();
    let mut picks: Vec<(Within, u64)> = Vec::new();
    for (file, size) in w.picks.iter().flatten() {
        let blocks = size.div_ceil(SAMPLE_BLOCK).max(1);
        let at = w.rng.below(blocks) * SAMPLE_BLOCK;
        let same = |p: &Within| Arc::ptr_eq(&p.root, &file.root) && p.rel == file.rel;
        if !picks.iter().any(|(p, o)| same(p) && *o == at) {
            picks.push((file.clone(), at));
        }
    }
    let mut src = w.src;
    read_samples(&mut src, &picks, threads.max(1));
    src.small_read = small::read_cost(&w.small, threads.max(1));
    Ok(src)
}

struct Walk {
    started: Instant,
    rng: Rng,
    /// One weighted reservoir of one file per sample: each file replaces a slot with the
    /// probability of its share of the bytes so far, so samples fall evenly over bytes.
    picks: Vec<Option<(Within, u64)>>,
    /// A uniform sample of the small files (by count), with their sizes.
    small: Vec<(Within, u64)>,
    src: Sources,
}

impl Walk {
    /// Counts what `at` (which `meta`, an lstat, describes) holds. Directories are listed
    /// through a descriptor opened beneath the source root, following no symlink, so a
    /// directory swapped for a symlink during the walk leads nowhere outside the source.
    fn visit(&mut self, at: &Within, meta: &fs::Metadata) {
        if self.started.elapsed() > WALK_LIMIT {
            self.src.complete = false;
            return;
        }
        if meta.is_file() {
            let data = meta.len().min(meta.blocks() * 512);
            self.src.files += 1;
            self.src.bytes += data;
            if meta.len() <= small::MAX {
                self.src.small_files += 1;
                self.src.small_bytes += data;
                // Reservoir sampling over the count: each small file so far equally likely.
                let entry = (at.clone(), meta.len());
                if self.small.len() < small::SAMPLES {
                    self.small.push(entry);
                } else {
                    let at = self.rng.below(self.src.small_files) as usize;
                    if let Some(slot) = self.small.get_mut(at) {
                        *slot = entry;
                    }
                }
            }
            if data > 0 {
                if !self.src.devices.contains(&meta.dev()) {
                    self.src.devices.push(meta.dev());
                }
                for slot in 0..self.picks.len() {
                    if self.rng.unit() * (self.src.bytes as f64) < data as f64 {
                        self.picks[slot] = Some((at.clone(), meta.len()));
                    }
                }
            }
        } else if meta.is_dir() {
            let Ok(dir) = at.open(OFlags::RDONLY | OFlags::DIRECTORY) else {
                return;
            };
            // The listing reads the directory this descriptor holds, whatever its name
            // leads to by now; each entry is lstat'ed in it.
            let Ok(rd) = fs::read_dir(format!("/proc/self/fd/{}", dir.as_raw_fd())) else {
                return;
            };
            for e in rd.flatten() {
                if let Ok(m) = e.metadata() {
                    let next = Within {
                        root: Arc::clone(&at.root),
                        rel: at.rel.join(e.file_name()),
                    };
                    self.visit(&next, &m);
                }
            }
        }
    }
}

/// Reads the picked blocks, `threads` at a time, bypassing the page cache where the file
/// system allows (`O_DIRECT`), else dropping what the reads brought in.
fn read_samples(src: &mut Sources, picks: &[(Within, u64)], threads: usize) {
    let started = Instant::now();
    let chunks: Vec<&[(Within, u64)]> =
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
    src.sampled = all.len();
    src.blocks = all
        .into_iter()
        .map(|(b, _, _)| b)
        .filter(|b| !b.is_empty())
        .collect();
}

/// One sample block: its bytes, whether read with `O_DIRECT`, and the share of its pages
/// cached before.
fn read_one(at: &Within, offset: u64) -> Option<(Vec<u8>, bool, f64)> {
    let plain = open_regular(at, false)?;
    let size = plain.metadata().ok()?.len();
    let len = SAMPLE_BLOCK.min(size.saturating_sub(offset)) as usize;
    let cached = pagecache::cached_share(&plain, offset, len as u64);
    if let Some(f) = open_regular(at, true) {
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
                                let (c, packed) = enc.encode(b, &mut out);
                                sent += match c {
                                    crate::protocol::Codec::Raw => b.len(),
                                    _ => packed.len(),
                                };
                                let _ = crate::codec::unit_hash(&[7; 32], [&[], &[]], b);
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

    /// Issue 37, finding 8: `haul probe` as root read samples by path, with `O_NOFOLLOW`
    /// on the last name only: a directory of the source swapped for a symlink after the
    /// walk made it read the file of that name outside the source, and a device node
    /// moved in was opened. Now a sample is opened beneath its source root and only when
    /// it is a regular file.
    #[test]
    fn a_sample_is_read_only_beneath_its_source_and_only_from_a_regular_file() {
        let t = tempfile::tempdir().unwrap();
        let (src, outside) = (t.path().join("src"), t.path().join("outside"));
        fs::create_dir_all(src.join("sub")).unwrap();
        fs::create_dir_all(&outside).unwrap();
        fs::write(src.join("sub/f"), vec![1u8; 8192]).unwrap();
        fs::write(outside.join("f"), vec![9u8; 8192]).unwrap();
        let root = Arc::new(Root::held(&src, &Meta::lstat(&src).unwrap()).unwrap());
        let at = Within {
            root,
            rel: "sub/f".into(),
        };
        let (bytes, _, _) = read_one(&at, 0).expect("the file in the source");
        assert!(bytes.len() == 8192 && bytes.iter().all(|&b| b == 1));
        // The directory on the way becomes a symlink to outside the source.
        fs::rename(src.join("sub"), src.join("old")).unwrap();
        std::os::unix::fs::symlink(&outside, src.join("sub")).unwrap();
        assert!(
            read_one(&at, 0).is_none(),
            "read through a swapped directory"
        );
        // The name itself becomes a FIFO, then a symlink to a file outside.
        fs::remove_file(src.join("sub")).unwrap();
        fs::create_dir(src.join("sub")).unwrap();
        let made = std::process::Command::new("mkfifo")
            .arg(src.join("sub/f"))
            .status()
            .unwrap();
        assert!(made.success());
        assert!(read_one(&at, 0).is_none(), "a FIFO opened");
        fs::remove_file(src.join("sub/f")).unwrap();
        std::os::unix::fs::symlink(outside.join("f"), src.join("sub/f")).unwrap();
        assert!(read_one(&at, 0).is_none(), "a symlink followed");
        // The walk counts old/f and samples nothing from outside.
        let s = sample_sources(std::slice::from_ref(&src), 1).unwrap();
        assert_eq!(s.files, 1, "{s:?}");
        assert!(s.blocks.iter().flatten().all(|&b| b == 1), "read outside");
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
