//! What every part of the store shares: the [`Store`] struct and its fields, the state of
//! a regular file in progress ([`FileState`], [`JournalState`]), a data stream's
//! [`WriterCache`], and the small helpers all parts use (options, error recording, the
//! file table's simple queries, the received-range table).
//!
//! It deliberately holds no behaviour of its own: nothing here creates, writes or removes
//! files in the destination (that is `partial`, `resume`, `other`, `mirror` and the facade
//! in `mod.rs`), and it uses nothing else in the store but `fsops` and `dirs`.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::File;
use std::io;
use std::ops::Bound;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::Instant;

use crossbeam_channel::{Receiver, Sender};

use super::dirs::OpenDir;
use super::fsops;
use crate::error::{Error, Result};
use crate::progress::Counters;
use crate::protocol::{Accept, Chown, Entry, Item, ProtocolError, SafeRelPath, SyncOptions};

/// A file whose last byte is written, with an open descriptor, ready to finish.
pub(super) type Completed = (Arc<FileState>, File);

/// The destination tree of one transfer.
pub struct Store {
    pub(super) root: OwnedFd,
    pub(super) root_path: PathBuf,
    pub(super) block_size: AtomicU64,
    pub(super) as_root: bool,
    pub(super) files: Mutex<HashMap<u64, Arc<FileState>>>,
    /// Directory metadata and fsyncs owed at the end (kept on disk; see `dirlog`).
    pub(super) dirs: Mutex<super::dirlog::DirLog>,
    pub(super) hardlinks: Mutex<Vec<(SafeRelPath, SafeRelPath)>>,
    pub(super) finish_tx: Mutex<Option<Sender<Completed>>>,
    pub(super) finish_rx: Mutex<Option<Receiver<Completed>>>,
    pub(super) finishers: Mutex<Vec<JoinHandle<()>>>,
    /// `write_unit` calls under way, and set once the transfer stops: `save_progress`
    /// waits for the first to reach 0 after setting the second.
    pub(super) writing: AtomicUsize,
    pub(super) closing: AtomicBool,
    pub(super) error: Arc<Mutex<Option<Error>>>,
    pub(super) other: AtomicU64,
    pub(super) skipped: AtomicU64,
    /// A device or FIFO was skipped (refused, or a device as non-root): a hardlink whose
    /// target is missing then names one of them and is skipped too (`make_hardlink`).
    pub(super) specials_skipped: AtomicBool,
    pub(super) unchanged_files: AtomicU64,
    pub(super) unchanged_bytes: AtomicU64,
    pub(super) deleted: AtomicU64,
    /// Ids of the manifest that no longer wait for data (completed, forgotten, or never
    /// needed), as ranges of ids: late or repeated data for them is ignored. Files in
    /// progress are the only gaps, so this stays small however many files pass.
    pub(super) settled: Mutex<Received>,
    /// Files whose every byte arrived since the driver last took them (for
    /// `Control::Arrived`); bounded by the files the sender keeps in flight.
    pub(super) arrived: Mutex<Vec<u64>>,
    /// Every path in the manifest as a key (`mirror::seen_key`; kept only for --delete).
    pub(super) seen: Mutex<HashSet<u128>>,
    /// --delete keeps what these rules exclude (the sender's, `Control::Protect`).
    pub(super) protect: Mutex<crate::protocol::Filter>,
    /// -K: directories reached through a symlink kept at the destination, opened once.
    pub(super) dirlinks: Mutex<HashMap<SafeRelPath, Arc<OwnedFd>>>,
    /// Directories opened once for the files in them (bounded; see `dirs`).
    pub(super) dir_cache: super::dirs::DirCache,
    /// -K: symlinks this run made (never kept as a directory: the sender chose them).
    pub(super) made_links: Mutex<HashSet<SafeRelPath>>,
    pub(super) options: Mutex<(SyncOptions, [u8; 32])>,
    /// What this receiver keeps of the sender's metadata (its own choice).
    pub(super) accept: Mutex<Accept>,
    /// `--chown`, resolved on this host.
    pub(super) chown: Mutex<Chown>,
    /// How small files are created and named: anonymous files linked with
    /// [`fsops::Linker::EmptyPath`] (0) or [`fsops::Linker::ProcFd`] (1), or named
    /// partial files renamed into place (2) where neither works.
    pub(super) linker: AtomicU8,
    /// The receiver's private journal key, loaded when first needed; `None` when it cannot
    /// be made or read safely (then nothing is resumed or journaled this run).
    pub(super) journal_key: OnceLock<Option<[u8; 32]>>,
    /// Disjoint received ranges held for all files in progress (bounded).
    pub(super) ranges: AtomicU64,
    /// Progress counters.
    pub stats: Arc<Counters>,
    /// Items are collected for `-v`/`-i` (see `report`).
    pub(super) collect: AtomicBool,
    /// What changed, since the driver last took them.
    pub(super) items: Mutex<Vec<Item>>,
    /// Bytes of files sent that were not sent (delta pieces, resumed ranges).
    pub(super) matched: AtomicU64,
    /// Files whose extended attributes could not all be set, and the first of them.
    pub(super) xattr_failed: AtomicU64,
    pub(super) xattr_first: Mutex<Option<String>>,
    /// A dry run's root that does not exist: everything beneath it would be new.
    pub(super) absent: bool,
    /// The root was created by this run (so it counts as new, not as changed).
    pub(super) fresh: bool,
    /// The directories this run created to make the root, deepest first: a dry run
    /// announced after they were made removes them again ([`Store::configure`]).
    pub(super) made: Mutex<Vec<std::path::PathBuf>>,
    /// `--keep-cache`: written pages stay in the page cache.
    pub(super) keep_cache: AtomicBool,
    /// Devices whose file system refused `O_DIRECT` (written buffered from then on).
    pub(super) refused_direct: super::direct::Refused,
    /// Directories `--ignore-existing` left out: nothing beneath them is made (`rules`).
    pub(super) ruled_dirs: Mutex<Vec<Vec<u8>>>,
    /// When the store opened (seconds, nanoseconds; the kernel's coarse real-time clock,
    /// which stamps inode times): what is older was not written by this run.
    pub(super) opened: (i64, i64),
}

/// A data stream's open partial file, kept between units of the same file.
#[derive(Default)]
pub struct WriterCache {
    /// The file id, the partial file and its device.
    pub(super) open: Option<(u64, Arc<File>, u64)>,
    /// This stream's aligned buffer for direct writes of unaligned unit bytes.
    pub(super) bounce: super::direct::Bounce,
}

/// Disjoint, merged byte ranges, `start -> end`.
pub(super) type Received = BTreeMap<u64, u64>;

/// A regular file in progress.
pub(super) struct FileState {
    pub(super) entry: Entry,
    pub(super) path: SafeRelPath,
    pub(super) size: u64,
    /// Raw bytes (or KEEP ranges) still to arrive.
    pub(super) remaining: AtomicU64,
    /// Ranges received so far (sorted, merged): duplicates after a reconnect are
    /// recognised, and what is missing can be asked for again.
    pub(super) received: Mutex<Received>,
    /// Created at manifest time (large or sparse); otherwise its single unit creates it.
    pub(super) precreated: bool,
    /// Written in place under its final name (`--inplace` delta): no rename at the end.
    pub(super) inplace: bool,
    /// Durable-range journal (partial files larger than a block).
    pub(super) journal: Option<Mutex<JournalState>>,
    /// Written to an anonymous file (`O_TMPFILE`) that is linked in when finished.
    pub(super) anonymous: AtomicBool,
    /// Dense and new: `fallocate`d when its first data arrives (never at manifest time,
    /// so a manifest alone takes no disk space).
    pub(super) preallocate: AtomicBool,
    /// Device and inode of the named file written to, when made at manifest time: it is
    /// opened again by name for each stream, and must still be that file.
    pub(super) work_id: Option<(u64, u64)>,
}

/// An open resume journal and the records not yet appended to it (they wait until the
/// data they describe is durable).
pub(super) struct JournalState {
    pub(super) file: File,
    pub(super) pending: Vec<(u64, u32)>,
    pub(super) pending_bytes: u64,
    pub(super) last_flush: Instant,
}

impl FileState {
    /// The name written to, in the file's directory.
    pub(super) fn work_name(&self) -> Result<(SafeRelPath, Vec<u8>)> {
        let (parent, name) = self
            .path
            .split_last()
            .ok_or(ProtocolError::Malformed("file at the root path"))?;
        let work = if self.inplace {
            name.to_vec()
        } else {
            fsops::partial_name(name)
        };
        Ok((parent, work))
    }
}

impl Store {
    /// The sync options the sender announced (defaults until [`Store::configure`]).
    pub(super) fn options(&self) -> SyncOptions {
        self.options.lock().map(|g| g.0).unwrap_or_default()
    }

    /// What this receiver keeps of the sender's metadata.
    pub(super) fn chown(&self) -> Chown {
        self.chown.lock().map(|c| *c).unwrap_or_default()
    }

    /// Which owner fields this receiver sets: both as root, the group alone when a user
    /// gave `--chown :GROUP` (a group of its own), else neither.
    pub(super) fn owners(&self) -> fsops::Owners {
        match (self.as_root, self.chown().gid) {
            (true, _) => fsops::Owners::Both,
            (false, Some(_)) => fsops::Owners::Group,
            (false, None) => fsops::Owners::Neither,
        }
    }

    /// The extended-attribute namespaces this receiver takes and manages: all of them
    /// only as root keeping the sender's owners (see `protocol::Accept::apply`).
    pub(super) fn namespaces(&self) -> super::xattr::Namespaces {
        let a = self.accept();
        match self.as_root && a.owner && self.chown().uid.is_none() {
            true => super::xattr::Namespaces::All,
            false => super::xattr::Namespaces::Unprivileged,
        }
    }

    pub(super) fn accept(&self) -> Accept {
        self.accept.lock().map(|g| g.clone()).unwrap_or_default()
    }

    /// The block key the sender announced, for delta piece hashes.
    pub(super) fn key(&self) -> [u8; 32] {
        self.options.lock().map(|g| g.1).unwrap_or_default()
    }

    /// The destination path of file `id`, for messages.
    pub fn describe(&self, id: u64) -> String {
        self.files
            .lock()
            .ok()
            .and_then(|m| m.get(&id).map(|s| s.path.display()))
            .unwrap_or_else(|| format!("file #{id}"))
    }

    /// The first error a background finisher hit, if any.
    pub fn take_error(&self) -> Option<Error> {
        self.error.lock().ok().and_then(|mut g| g.take())
    }

    /// Lets the finishers finish every file queued so far, then stops them (no file can
    /// be queued after this).
    pub(super) fn drain_finishers(&self) {
        if let Ok(mut g) = self.finish_tx.lock() {
            g.take();
        }
        let handles = self
            .finishers
            .lock()
            .map(|mut h| std::mem::take(&mut *h))
            .unwrap_or_default();
        for h in handles {
            let _ = h.join();
        }
    }

    /// Records a background error; only the first is kept.
    pub(super) fn fail(&self, e: Error) {
        if let Ok(mut g) = self.error.lock() {
            g.get_or_insert(e);
        }
    }

    /// Runs `f` on `path` resolved from where it starts: the root, or, with -K, the
    /// directory a kept symlink on its way leads to (the longest such prefix) and the
    /// rest of the path below it. Everything below is still resolved without symlinks.
    pub(super) fn at<T>(
        &self,
        path: &SafeRelPath,
        f: impl FnOnce(&OwnedFd, &SafeRelPath) -> io::Result<T>,
    ) -> io::Result<T> {
        let links = match self.dirlinks.lock() {
            Ok(l) if !l.is_empty() => l,
            _ => return f(&self.root, path),
        };
        let bytes = path.as_bytes();
        let ends = (0..bytes.len())
            .filter(|&i| bytes[i] == b'/')
            .chain(std::iter::once(bytes.len()));
        let found = ends.collect::<Vec<_>>().into_iter().rev().find_map(|end| {
            let prefix = SafeRelPath::parse(&bytes[..end]).ok()?;
            let fd = links.get(&prefix)?;
            let rest = SafeRelPath::parse(bytes.get(end + 1..).unwrap_or_default()).ok()?;
            Some((Arc::clone(fd), rest))
        });
        drop(links);
        match found {
            Some((fd, rest)) => f(&fd, &rest),
            None => f(&self.root, path),
        }
    }

    /// The directory `path` beneath the root, resolved once as [`Store::at`] does and
    /// then reused (see `dirs`).
    pub(super) fn dir(&self, path: &SafeRelPath) -> io::Result<Arc<OpenDir>> {
        let made = path.is_root() && self.fresh;
        self.dir_cache
            .get(path, made, |p| self.at(p, fsops::open_dir))
    }

    /// Notes that this run has just made the (empty) directory `path`.
    pub(super) fn made_dir(&self, path: &SafeRelPath) -> io::Result<()> {
        self.dir_cache
            .open(path, true, |p| self.at(p, fsops::open_dir))
            .map(drop)
    }

    /// A destination error naming `path` beneath the root.
    pub(super) fn dest_err(&self, path: &SafeRelPath, e: io::Error) -> Error {
        Error::destination(self.root_path.join(path.as_path()), e)
    }

    /// Completed, forgotten or never needed: late or repeated data for it is ignored.
    pub(super) fn is_settled(&self, id: u64) -> bool {
        self.settled
            .lock()
            .map(|f| f.range(..=id).next_back().is_some_and(|(_, &end)| end > id))
            .unwrap_or(false)
    }

    /// Marks `id` settled (see [`Store::is_settled`]).
    pub(super) fn settle(&self, id: u64) {
        if let Ok(mut f) = self.settled.lock() {
            add_range(&mut f, id, id.saturating_add(1));
        }
    }

    /// The files whose every byte arrived since the last call (see `Control::Arrived`).
    pub fn take_arrived(&self) -> Vec<u64> {
        self.arrived
            .lock()
            .map(|mut a| std::mem::take(&mut *a))
            .unwrap_or_default()
    }

    /// How many files still wait for data.
    pub fn incomplete(&self) -> usize {
        self.files.lock().map(|m| m.len()).unwrap_or(0)
    }
}

/// Adds `[a, b)` to `ranges` (disjoint, merged), merging it with the ranges it overlaps or
/// touches; returns how many of its bytes were new. O(log n) plus the ranges merged.
pub(super) fn add_range(ranges: &mut Received, a: u64, b: u64) -> u64 {
    if a >= b {
        return 0;
    }
    let (mut lo, mut hi, mut covered) = (a, b, 0);
    if let Some((&s, &e)) = ranges.range(..=a).next_back() {
        if e >= a {
            covered += e.min(b) - a;
            (lo, hi) = (s, hi.max(e));
            ranges.remove(&s);
        }
    }
    let after: Vec<(u64, u64)> = ranges
        .range((Bound::Excluded(a), Bound::Included(b)))
        .map(|(&s, &e)| (s, e))
        .collect();
    for (s, e) in after {
        covered += e.min(b) - s;
        hi = hi.max(e);
        ranges.remove(&s);
    }
    ranges.insert(lo, hi);
    (b - a) - covered
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn add_range_counts_only_new_bytes() {
        let mut r = Received::new();
        assert_eq!(add_range(&mut r, 0, 10), 10);
        assert_eq!(add_range(&mut r, 20, 30), 10);
        assert_eq!(add_range(&mut r, 5, 25), 10);
        assert_eq!(
            r.iter().map(|(&a, &b)| (a, b)).collect::<Vec<_>>(),
            [(0, 30)]
        );
        assert_eq!(add_range(&mut r, 0, 30), 0);
        let v: Vec<(u64, u64)> = r.iter().map(|(&a, &b)| (a, b)).collect();
        assert_eq!(super::super::journal::missing(40, &v), [(30, 40)]);
        assert_eq!(add_range(&mut r, 30, 30), 0);
        assert_eq!(add_range(&mut r, 30, 40), 10);
        assert_eq!(add_range(&mut r, 50, 60), 10);
        assert_eq!(add_range(&mut r, 45, 65), 10);
        assert_eq!(
            r.iter().map(|(&a, &b)| (a, b)).collect::<Vec<_>>(),
            [(0, 40), (45, 65)]
        );
    }

    /// Checks `add_range` against a byte map on many small overlapping ranges.
    #[test]
    fn add_range_agrees_with_a_byte_map() {
        let mut r = Received::new();
        let mut bytes = vec![false; 4096];
        let mut x = 12345u64;
        for _ in 0..20_000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let a = (x >> 33) % 4000;
            let b = a + (x >> 13) % 60;
            let fresh = bytes[a as usize..b as usize]
                .iter()
                .filter(|v| !**v)
                .count() as u64;
            bytes[a as usize..b as usize]
                .iter_mut()
                .for_each(|v| *v = true);
            assert_eq!(add_range(&mut r, a, b), fresh);
        }
        let mut runs = Vec::new();
        let mut i = 0;
        while i < bytes.len() {
            if bytes[i] {
                let s = i;
                while i < bytes.len() && bytes[i] {
                    i += 1;
                }
                runs.push((s as u64, i as u64));
            }
            i += 1;
        }
        assert_eq!(r.iter().map(|(&a, &b)| (a, b)).collect::<Vec<_>>(), runs);
    }
}
