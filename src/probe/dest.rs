//! What a probe measures at the destination, without leaving anything there: the durable
//! write rate (an anonymous file written for about two seconds, then `fdatasync`ed) and
//! what each small file costs (create, write, fsync, close). Everything acts on the
//! directory's descriptor, never on a path that could change meanwhile.
//!
//! Shared by every side that measures a destination: `haul probe` for a local DST, the far
//! end of a `host:DST` probe (`remote::serve::probe`) and a waiting `haul recv`
//! (`receive::probe`). Not here: the network, the sources, the choice.

use std::fs::File;
use std::io;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use rustix::fs::{AtFlags, Mode, OFlags};

use crate::pagecache;
use crate::store::direct;

/// Size of one sample block (haul's default block size).
pub const SAMPLE_BLOCK: u64 = 4 << 20;
/// The write test stops after this long...
const WRITE_TIME: Duration = Duration::from_secs(2);
/// ...or this many bytes, and never takes more than a twentieth of the free space.
const WRITE_MAX: u64 = 1 << 30;
/// Files the write test writes at once (a copy's streams write as many units at once).
const WRITERS: usize = 4;
/// Threads measuring the cost per file: the store finishes files on 8, each making as
/// many small files durable at once as a finisher may (`store::small_batch`).
const FILE_THREADS: usize = 8;
/// The cost per file is measured for this long (each thread finishes its batch).
const FILE_TIME: Duration = Duration::from_secs(1);

/// What a destination measured.
#[derive(Debug, Clone, Copy)]
pub struct DestRates {
    /// Durable bytes per second.
    pub write_rate: f64,
    /// Seconds each small file adds, if that could be measured.
    pub per_file: Option<f64>,
}

/// One block of pseudo-random bytes, [`SAMPLE_BLOCK`] long: content a disk and a codec
/// cannot shortcut (what a far end writes, and what the streams of a probe carry).
pub fn random_block() -> Vec<u8> {
    let mut block = vec![0u8; SAMPLE_BLOCK as usize];
    blake3::Hasher::new().finalize_xof().fill(&mut block);
    block
}

/// Measures a destination that has none of the sources' data at hand: the write rate with
/// [`random_block`] written over and over, then the cost per file.
pub fn measure(dir: BorrowedFd<'_>) -> io::Result<DestRates> {
    let write_rate = write_rate(dir, &[random_block()])?;
    let per_file = file_cost(dir, FILE_THREADS).ok();
    Ok(DestRates {
        write_rate,
        per_file,
    })
}

/// Durable write rate in `dir`: [`WRITERS`] anonymous files (`O_TMPFILE`; where the file
/// system has none, named ones unlinked at once) written with `data` for about two seconds
/// at once, then `fdatasync`ed. Nothing remains in `dir` afterwards. Written as the store
/// writes: several files at once (a copy's streams), a large file's units (a whole
/// [`SAMPLE_BLOCK`]) with `O_DIRECT` where the file system takes it (`store::direct`),
/// smaller pieces (small files) through the page cache. On the test machine's virtual
/// disk one thread writing 4 MiB blocks through the page cache measured 605-670 MB/s
/// where copies of a 4 GiB file wrote it at 900 MB/s and more.
pub fn write_rate(dir: BorrowedFd<'_>, data: &[Vec<u8>]) -> io::Result<f64> {
    let files = (0..WRITERS)
        .map(|_| temp_file(dir))
        .collect::<io::Result<Vec<File>>>()?;
    let Some(first) = files.first() else {
        return Err(io::Error::other("no file to measure with"));
    };
    let dev = std::os::unix::fs::MetadataExt::dev(&first.metadata()?);
    let free = rustix::fs::fstatvfs(first)
        .map(|s| s.f_bavail.saturating_mul(s.f_frsize))
        .unwrap_or(0);
    let max = WRITE_MAX.min(free / 20);
    let fallback = vec![0x5au8; SAMPLE_BLOCK as usize];
    let refused = direct::Refused::default();
    let (written, next) = (AtomicU64::new(0), AtomicUsize::new(0));
    let started = Instant::now();
    let write = |f: &File| -> io::Result<()> {
        let mut bounce = direct::Bounce::default();
        let mut at = 0u64;
        while written.load(Ordering::Relaxed) < max && started.elapsed() < WRITE_TIME {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let block = data.get(i % data.len().max(1)).unwrap_or(&fallback);
            let block = if block.is_empty() { &fallback } else { block };
            let buffered = |d: &[u8], o: u64| f.write_all_at(d, o);
            if block.len() as u64 >= SAMPLE_BLOCK {
                let straight = |d: &[u8], o: u64| direct::write_direct(f, d, o, &mut bounce);
                direct::write_parts(dev, block, at, &refused, straight, &buffered)?;
            } else {
                buffered(block, at)?;
            }
            at += block.len() as u64;
            written.fetch_add(block.len() as u64, Ordering::Relaxed);
        }
        f.sync_data()
    };
    std::thread::scope(|s| {
        let writers: Vec<_> = files.iter().map(|f| s.spawn(move || write(f))).collect();
        writers.into_iter().try_for_each(|h| {
            h.join()
                .unwrap_or_else(|_| Err(io::Error::other("a write test thread panicked")))
        })
    })?;
    let secs = started.elapsed().as_secs_f64();
    for f in &files {
        pagecache::drop_all(f);
    }
    let written = written.into_inner();
    if written == 0 {
        return Err(io::Error::other("too little free space to measure"));
    }
    Ok(written as f64 / secs)
}

/// Seconds each file adds at the destination beyond its bytes, measured as the store
/// makes many small files durable (`store/batch`): `threads` threads at once (its
/// finishers) each make batches of `store::small_batch` anonymous files (each written
/// 4 KiB, then one `syncfs` for the batch, then closed) one after another for
/// [`FILE_TIME`], each at its own pace. In the store the receiving workers create and write the files while
/// the finishers wait in `syncfs`, so a finisher's cycle is its `syncfs`: the cost per
/// file is 1 / Σ (files ÷ seconds in `syncfs`) over the threads. Nothing remains. One
/// `syncfs` before, not timed, writes what other processes left dirty: a copy pays that
/// once, not per batch. (Each file `fdatasync`ed on its own cost 10-20 times more here,
/// which predicted a tree of 20,000 small files at ten times the time it took; timing
/// the creation as well predicted twice the time.)
pub fn file_cost(dir: BorrowedFd<'_>, threads: usize) -> io::Result<f64> {
    rustix::fs::syncfs(dir)?;
    let per_batch = crate::store::small_batch(threads.max(1));
    let started = Instant::now();
    let results: Vec<io::Result<(usize, f64)>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads.max(1))
            .map(|_| {
                s.spawn(move || {
                    let (mut files, mut syncing) = (0, 0.0);
                    while files == 0 || started.elapsed() < FILE_TIME {
                        let mut batch = Vec::with_capacity(per_batch);
                        for _ in 0..per_batch {
                            let f = temp_file(dir)?;
                            f.write_all_at(&[0x5a; 4096], 0)?;
                            batch.push(f);
                        }
                        let sync = Instant::now();
                        rustix::fs::syncfs(dir)?;
                        syncing += sync.elapsed().as_secs_f64();
                        files += batch.len();
                    }
                    Ok((files, syncing))
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(io::Error::other("panicked")))
            })
            .collect()
    });
    let rate: f64 = results
        .into_iter()
        .map(|r| r.map(|(files, secs)| files as f64 / secs.max(1e-6)))
        .sum::<io::Result<f64>>()?;
    Ok(1.0 / rate.max(1.0))
}

/// The destination if it is a directory, else the nearest existing directory above it
/// (where `copy` would create it).
pub fn existing_dir(dest: &Path) -> PathBuf {
    let mut d = dest.to_path_buf();
    loop {
        if d.is_dir() {
            return d;
        }
        if !d.pop() || d.as_os_str().is_empty() {
            return PathBuf::from(".");
        }
    }
}

/// Opens `dir` (a directory the user named) for the measurements.
pub fn open_dir(dir: &Path) -> io::Result<OwnedFd> {
    Ok(rustix::fs::open(
        dir,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?)
}

/// An anonymous file in `dir`; where the file system has no `O_TMPFILE`, a file with an
/// unguessable name, created exclusively without following links and unlinked at once.
fn temp_file(dir: BorrowedFd<'_>) -> io::Result<File> {
    let mode = Mode::from_raw_mode(0o600);
    let anon = rustix::fs::openat(
        dir,
        ".",
        OFlags::RDWR | OFlags::TMPFILE | OFlags::CLOEXEC,
        mode,
    );
    match anon {
        Ok(fd) => Ok(File::from(fd)),
        Err(e)
            if [
                rustix::io::Errno::OPNOTSUPP,
                rustix::io::Errno::ISDIR,
                rustix::io::Errno::INVAL,
            ]
            .contains(&e) =>
        {
            let mut r = [0u8; 8];
            getrandom::fill(&mut r).map_err(|e| io::Error::other(e.to_string()))?;
            let name = format!(".haul-probe-{:016x}", u64::from_le_bytes(r));
            let fd = rustix::fs::openat(
                dir,
                name.as_str(),
                OFlags::RDWR | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                mode,
            )?;
            rustix::fs::unlinkat(dir, name.as_str(), AtFlags::empty())?;
            Ok(File::from(fd))
        }
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn a_destination_is_measured_and_left_as_it_was() {
        let out = tempfile::tempdir().unwrap();
        std::fs::write(out.path().join("kept"), b"x").unwrap();
        let dir = open_dir(out.path()).unwrap();
        let m = measure(dir.as_fd()).unwrap();
        assert!(m.write_rate > 0.0 && m.per_file.is_some_and(|s| s > 0.0));
        let names: Vec<_> = std::fs::read_dir(out.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["kept"]);
    }
}
