//! What a small file costs the sender to read: a uniform sample of the small files (by
//! count, picked during the walk) read whole the way the stream workers read the files
//! they pack (`send::worker`: open without following links, stat, read, stat, through
//! `pagecache::Reader`, which drops what the read brought in), on as many threads as
//! the copy has streams. Buffered reads, as the real ones: reading tiny files with
//! `O_DIRECT`, as the block sample does, measured the device's latency per request and
//! predicted trees of small files at twice the time they took.

use std::os::unix::fs::FileExt;
use std::time::Instant;

use crate::pagecache;
use crate::plan::beneath::Within;

/// Files up to this size are read whole and packed (a quarter of the default block,
/// `plan::queue`).
pub const MAX: u64 = crate::protocol::DEFAULT_BLOCK_SIZE / 4;
/// Small files sampled.
pub const SAMPLES: usize = 256;

/// Wall seconds per file reading `files` whole on `threads` threads; `None` if none could
/// be read.
pub fn read_cost(files: &[(Within, u64)], threads: usize) -> Option<f64> {
    if files.is_empty() {
        return None;
    }
    let started = Instant::now();
    let per = files.len().div_ceil(threads.max(1)).max(1);
    let read: usize = std::thread::scope(|s| {
        let hs: Vec<_> = files
            .chunks(per)
            .map(|c| s.spawn(move || c.iter().filter(|(p, n)| read_whole(p, *n)).count()))
            .collect();
        hs.into_iter().filter_map(|h| h.join().ok()).sum()
    });
    (read > 0).then(|| started.elapsed().as_secs_f64() / read as f64)
}

/// One file read whole, as the sender reads a packed file; whether it could be.
fn read_whole(at: &Within, size: u64) -> bool {
    let Some(f) = super::open::open_regular(at, false) else {
        return false;
    };
    if f.metadata().is_err() {
        return false;
    }
    let mut cache = pagecache::Reader::new(false);
    let mut buf = vec![0u8; size.min(MAX) as usize];
    cache.before(&f, 0, buf.len() as u64, buf.len() as u64);
    let r = f.read_exact_at(&mut buf, 0);
    cache.after(&f);
    r.is_ok() && f.metadata().is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::beneath::Root;

    #[test]
    fn small_files_are_read_whole_and_timed_per_file() {
        let dir = tempfile::tempdir().unwrap();
        let meta = crate::plan::meta::Meta::lstat(dir.path()).unwrap();
        let root = std::sync::Arc::new(Root::held(dir.path(), &meta).unwrap());
        let at = |name: &str| Within {
            root: std::sync::Arc::clone(&root),
            rel: name.into(),
        };
        let mut files = Vec::new();
        for i in 0..10u64 {
            let name = format!("f{i}");
            std::fs::write(dir.path().join(&name), vec![i as u8; 1000 + i as usize]).unwrap();
            files.push((at(&name), 1000 + i));
        }
        let per = read_cost(&files, 3).unwrap();
        assert!(per > 0.0);
        // A file gone since the walk is not counted; none readable: no measure.
        let gone = [(at("gone"), 5)];
        assert!(read_cost(&gone, 2).is_none());
        assert!(read_cost(&[], 2).is_none());
    }
}
