//! The partial-file life cycle of a regular file, once it is decided what to ask for:
//! creating and opening the file written to (a named `.haul-<hash>.part` file or an
//! anonymous `O_TMPFILE` one), writing verified units into it, journaling the ranges that
//! are durable, and finishing it (fsync, metadata, rename or link into place) — or
//! discarding it.
//!
//! A named partial file (a file larger than one block, or sparse) is
//! `.haul-<hex of 8 bytes of BLAKE3(name)>.part` in the file's own directory: deterministic
//! and never longer than NAME_MAX, so a later run finds it; mode 0600, `O_EXCL`,
//! `ftruncate`d to its size. A small file (dense, at most one block, so it arrives in one
//! unit) is written to an anonymous `O_TMPFILE` file and linked in with
//! `linkat(AT_EMPTY_PATH)`, else through `/proc/self/fd/N`, else written as a named partial
//! file and renamed; a name already taken is linked beside it and renamed over it.
//!
//! A dense partial file is created sparse when its manifest entry arrives and reserved
//! (`fallocate`) only when its first data arrives: a manifest alone costs an inode per
//! file, never disk space, so a sender cannot fill the disk with promises. A sender can
//! still have a file's whole size reserved by sending one unit of it.
//!
//! It deliberately does not decide what to ask the sender for (quick check, resume,
//! delta: that is `resume`, which builds on the helpers here, never the other way round)
//! and does not touch anything but regular files.

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rustix::fs::{FallocateFlags, Mode, OFlags};

use super::direct;
use super::fsops;
use super::journal;
use super::state::{add_range, FileState, JournalState, Store, WriterCache};
use crate::codec::VerifiedUnit;
use crate::error::{Error, Result};
use crate::pagecache;
use crate::protocol::{Entry, ProtocolError, Segment, Want, WantKind};

/// Journal records are written after at most this many bytes...
const JOURNAL_BYTES: u64 = 64 << 20;
/// ...or this long, whichever comes first (each costs one fdatasync of the partial file).
const JOURNAL_EVERY: Duration = Duration::from_secs(1);
/// Most disjoint received ranges one file may have. A real file's segments merge as they
/// arrive (one range per data extent of a sparse file, plus units in flight); a sender
/// scattering single bytes with gaps would otherwise grow the table without bound.
const MAX_RANGES: usize = 1 << 20;
/// Most disjoint received ranges all files in progress may have together (each costs
/// some 40 bytes).
const MAX_TOTAL_RANGES: u64 = 1 << 21;

impl Store {
    /// Creates the partial file afresh (`O_EXCL`, after removing whatever had its name) at
    /// its full size, sparse: it takes no disk space until data arrives.
    pub(super) fn create_work_file(
        &self,
        pfd: &std::os::fd::OwnedFd,
        name: &[u8],
        size: u64,
    ) -> io::Result<File> {
        let f = fsops::create_new(pfd, name, OFlags::RDWR)?;
        f.set_len(size)?;
        Ok(f)
    }

    /// Writes one verified unit's segments. Completed files go to the finishers.
    pub fn write_unit(
        &self,
        unit: &VerifiedUnit<'_>,
        segments: impl Iterator<Item = Segment>,
        cache: &mut WriterCache,
    ) -> Result<()> {
        let _writing = self.enter_write()?;
        let bytes = unit.bytes();
        let mut pos = 0usize;
        for seg in segments {
            let len = seg.len as usize;
            let data = if seg.keep {
                &[][..]
            } else {
                let d = bytes
                    .get(pos..pos + len)
                    .ok_or(ProtocolError::Malformed("segments exceed unit"))?;
                pos += len;
                d
            };
            let found = self
                .files
                .lock()
                .ok()
                .and_then(|m| m.get(&seg.file).cloned());
            let Some(state) = found else {
                if self.is_settled(seg.file) {
                    continue;
                }
                return Err(ProtocolError::Malformed("data for an unknown file").into());
            };
            let end = seg.offset + u64::from(seg.len);
            if end > state.size {
                return Err(ProtocolError::Malformed("data beyond the end of its file").into());
            }
            if !state.precreated && (seg.keep || seg.offset != 0 || end != state.size) {
                return Err(ProtocolError::Malformed("small file split across units").into());
            }
            let fresh = match state.received.lock() {
                Ok(mut r) => {
                    let before = r.len() as u64;
                    let fresh = add_range(&mut r, seg.offset, end);
                    let after = r.len() as u64;
                    let total = self.count_ranges(before, after);
                    if r.len() > MAX_RANGES || total > MAX_TOTAL_RANGES {
                        return Err(
                            ProtocolError::Malformed("data scattered in too many pieces").into(),
                        );
                    }
                    fresh
                }
                Err(_) => return Err(Error::io("range table", io::Error::other("poisoned"))),
            };
            if fresh == 0 {
                // A duplicate: re-sent after a connection dropped, but it had arrived.
                continue;
            }
            let (file, dev) = match &cache.open {
                Some((id, f, dev)) if *id == seg.file => (Arc::clone(f), *dev),
                _ => {
                    let f = Arc::new(self.open_work_file(&state)?);
                    // Only a large file's writes go direct and need its device; a small
                    // file (most of a tree's files) is spared the fstat.
                    let dev = match state.precreated {
                        true => f
                            .metadata()
                            .map_err(|x| self.dest_err(&state.path, x))?
                            .dev(),
                        false => 0,
                    };
                    cache.open = Some((seg.file, Arc::clone(&f), dev));
                    (f, dev)
                }
            };
            if state.preallocate.swap(false, Ordering::AcqRel) {
                preallocate(&file, state.size).map_err(|x| self.dest_err(&state.path, x))?;
            }
            if !seg.keep {
                self.write_data(&file, dev, data, seg.offset, state.precreated, cache)
                    .map_err(|x| self.dest_err(&state.path, x))?;
                self.stats
                    .done_bytes
                    .fetch_add(len as u64, Ordering::Relaxed);
            } else {
                self.unchanged_bytes
                    .fetch_add(len as u64, Ordering::Relaxed);
                self.matched.fetch_add(len as u64, Ordering::Relaxed);
            }
            let prev = state
                .remaining
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |r| {
                    r.checked_sub(fresh)
                })
                .map_err(|_| ProtocolError::Malformed("more data than the file declared"))?;
            let complete = prev == fresh;
            if let Some(j) = &state.journal {
                if !complete {
                    self.journal_range(&state, j, &file, seg.offset, seg.len)?;
                }
            }
            if complete {
                // Settled first: a duplicate arriving meanwhile must find it in one of
                // the two tables.
                self.settle(seg.file);
                if let Ok(mut a) = self.arrived.lock() {
                    a.push(seg.file);
                }
                cache.open = None;
                let file = Arc::try_unwrap(file)
                    .or_else(|shared| shared.try_clone())
                    .map_err(|x| self.dest_err(&state.path, x))?;
                fsops::race_point("file complete, not yet queued");
                let queued =
                    self.queue_finish(Arc::clone(&state), file, Some((seg.offset, seg.len)));
                // Out of the table of files waiting for data only once the finishers have
                // it: until then the transfer counts it as incomplete, so it cannot finish
                // (and stop the finishers) with this file on its way to them.
                if let Ok(mut m) = self.files.lock() {
                    m.remove(&seg.file);
                }
                self.forget_ranges(&state);
                queued?;
            }
        }
        Ok(())
    }

    /// Writes one segment's bytes: a large (precreated) file's aligned part with
    /// `O_DIRECT` and the rest buffered and dropped from the page cache (see `direct`),
    /// or, with `--keep-cache`, all buffered with its writeback started. A small file
    /// (one unit, an anonymous file of a batch) is written buffered.
    fn write_data(
        &self,
        file: &File,
        dev: u64,
        data: &[u8],
        offset: u64,
        precreated: bool,
        cache: &mut WriterCache,
    ) -> io::Result<()> {
        if !precreated {
            return file.write_all_at(data, offset);
        }
        if self.keep_cache.load(Ordering::Relaxed) {
            file.write_all_at(data, offset)?;
            start_writeback(file, offset, data.len());
            return Ok(());
        }
        let buffered = |d: &[u8], at: u64| {
            file.write_all_at(d, at)?;
            pagecache::drop_written(file, at, d.len() as u64);
            Ok(())
        };
        let refused = &self.refused_direct;
        direct::write(
            file,
            dev,
            data,
            offset,
            refused,
            &mut cache.bounce,
            &buffered,
        )
    }

    /// Records a written range; every `JOURNAL_BYTES` or `JOURNAL_EVERY`, makes the data
    /// durable and then appends the records (the order that keeps the journal honest).
    fn journal_range(
        &self,
        state: &FileState,
        j: &Mutex<JournalState>,
        file: &File,
        offset: u64,
        len: u32,
    ) -> Result<()> {
        let mut g = j
            .lock()
            .map_err(|_| Error::io("journal", io::Error::other("poisoned")))?;
        g.pending.push((offset, len));
        g.pending_bytes += u64::from(len);
        if g.pending_bytes >= JOURNAL_BYTES || g.last_flush.elapsed() >= JOURNAL_EVERY {
            flush_journal(&mut g, file).map_err(|x| self.dest_err(&state.path, x))?;
        }
        Ok(())
    }

    /// Opens the file `state` is written to: an anonymous file for a small one while the
    /// file system allows it, else its named partial file (created if not precreated).
    pub(super) fn open_work_file(&self, state: &FileState) -> Result<File> {
        let (parent, work) = state.work_name()?;
        let err = |x| self.dest_err(&state.path, x);
        if !state.precreated {
            let dir = self.dir(&parent).map_err(err)?;
            if self.linker.load(Ordering::Relaxed) < 2 {
                match fsops::open_anonymous(&dir.fd) {
                    Ok(fd) => {
                        state.anonymous.store(true, Ordering::Relaxed);
                        return Ok(File::from(fd));
                    }
                    // No O_TMPFILE on this file system: named partial files from now on.
                    Err(x) if unsupported(&x) => self.linker.store(2, Ordering::Relaxed),
                    Err(x) => return Err(err(x)),
                }
            }
            return fsops::create_new(&dir.fd, &work, OFlags::WRONLY).map_err(err);
        }
        // Made at manifest time and opened again by name: it must still be that file (and,
        // unless it is the old version written in place, still ours alone: an inode number
        // can be reused by a file someone else made).
        let flags = OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK;
        let f = self
            .at(&parent, |fd, dir| {
                fsops::open_beneath(fd, &fsops::join(dir, &work), flags, Mode::empty())
            })
            .map(File::from)
            .map_err(err)?;
        let m = f.metadata().map_err(err)?;
        let ours =
            state.inplace || (m.uid() == rustix::process::geteuid().as_raw() && m.nlink() == 1);
        if state.work_id != Some((m.dev(), m.ino())) || !ours {
            return Err(err(fsops::replaced()));
        }
        Ok(f)
    }

    /// Names a finished anonymous file `name` in `pfd`, replacing what has that name.
    fn link_into_place(
        &self,
        file: &File,
        pfd: &OwnedFd,
        name: &[u8],
        entry: &Entry,
    ) -> io::Result<()> {
        loop {
            let current = self.linker.load(Ordering::Relaxed);
            let how = match current {
                0 => fsops::Linker::EmptyPath,
                1 => fsops::Linker::ProcFd,
                _ => break,
            };
            match fsops::link_anonymous(file, pfd, name, how) {
                Ok(()) => return Ok(()),
                Err(x) if x.raw_os_error() == Some(libc::EEXIST) => {
                    // An older version has the name: link beside it and rename over it.
                    let tmp = fsops::partial_name(name);
                    fsops::remove_if_present(pfd, &tmp)?;
                    fsops::link_anonymous(file, pfd, &tmp, how)?;
                    return fsops::rename_file_in(pfd, &tmp, name, file);
                }
                // Not allowed (no CAP_DAC_READ_SEARCH) or no /proc: try the next way.
                Err(x) if matches!(x.raw_os_error(), Some(libc::ENOENT | libc::EPERM)) => {
                    let _ = self.linker.compare_exchange(
                        current,
                        current + 1,
                        Ordering::Relaxed,
                        Ordering::Relaxed,
                    );
                }
                Err(x) => return Err(x),
            }
        }
        // Neither way links here: copy into a named partial file and rename that.
        let tmp = fsops::partial_name(name);
        let named = fsops::create_new(pfd, &tmp, OFlags::WRONLY)?;
        copy_range(file, &named, file.metadata()?.len())?;
        fsops::apply_meta_fd(&named, entry, self.owners(), self.namespaces())?;
        named.sync_all()?;
        fsops::rename_file_in(pfd, &tmp, name, &named)
    }

    /// fsync, metadata and rename of one complete file (runs on a finisher thread).
    pub(super) fn finalize_file(&self, state: &FileState, file: File) -> Result<()> {
        self.seal_meta(state, &file)?;
        file.sync_all().map_err(|x| self.dest_err(&state.path, x))?;
        self.publish(state, file)
    }

    /// Applies a complete file's metadata (owner, xattrs, mode, mtime) on its descriptor.
    pub(super) fn seal_meta(&self, state: &FileState, file: &File) -> Result<()> {
        let done = fsops::apply_meta_fd(file, &state.entry, self.owners(), self.namespaces())
            .map_err(|x| self.dest_err(&state.path, x))?;
        self.note_xattrs(&state.path, done);
        Ok(())
    }

    /// Names a complete file whose data and metadata are durable: links or renames it
    /// into place and removes its journal.
    pub(super) fn publish(&self, state: &FileState, file: File) -> Result<()> {
        let err = |x| self.dest_err(&state.path, x);
        if !self.keep_cache.load(Ordering::Relaxed) {
            pagecache::drop_all(&file);
        }
        let (parent, name) = state
            .path
            .split_last()
            .ok_or(ProtocolError::Malformed("file at the root path"))?;
        let dir = self.dir(&parent).map_err(err)?;
        let pfd = &dir.fd;
        if state.anonymous.load(Ordering::Relaxed) {
            self.link_into_place(&file, pfd, name, &state.entry)
                .map_err(err)?;
        } else if !state.inplace {
            fsops::rename_file_in(pfd, &fsops::partial_name(name), name, &file).map_err(err)?;
        }
        if state.journal.is_some() {
            fsops::remove_if_present(pfd, &fsops::journal_name(name)).map_err(err)?;
        }
        self.stats.done_files.fetch_add(1, Ordering::Relaxed);
        if let crate::protocol::EntryKind::File { size, .. } = state.entry.kind {
            self.stats.done_size.fetch_add(size, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Data for these files is not wanted here (a relay in a chain fan-out passes it on to
    /// the next receiver) and is ignored when it arrives; files this store waits for stay.
    pub fn ignore(&self, ids: impl IntoIterator<Item = u64>) {
        let (Ok(files), Ok(mut settled)) = (self.files.lock(), self.settled.lock()) else {
            return;
        };
        for id in ids.into_iter().filter(|id| !files.contains_key(id)) {
            add_range(&mut settled, id, id.saturating_add(1));
        }
    }

    /// Drops files the sender could not read (or that changed while read): their
    /// partial files are removed and data still in flight for them is ignored.
    pub fn discard(&self, ids: &[u64]) -> Result<()> {
        for id in ids {
            self.settle(*id);
            let state = self.files.lock().ok().and_then(|mut m| m.remove(id));
            let Some(state) = state else { continue };
            self.forget_ranges(&state);
            if state.inplace {
                continue;
            }
            if let Some((parent, name)) = state.path.split_last() {
                if let Ok(pfd) = self.at(&parent, fsops::open_dir) {
                    let _ = fsops::remove_if_present(&pfd, &fsops::partial_name(name));
                    let _ = fsops::remove_if_present(&pfd, &fsops::journal_name(name));
                }
            }
        }
        Ok(())
    }

    /// What is still missing of every incomplete file (asked for again after data was
    /// lost with a dropped connection).
    pub fn missing(&self) -> Vec<Want> {
        let states: Vec<Arc<FileState>> = self
            .files
            .lock()
            .map(|m| m.values().cloned().collect())
            .unwrap_or_default();
        let mut out = Vec::new();
        for s in states {
            let have: Vec<(u64, u64)> = s
                .received
                .lock()
                .map(|r| r.iter().map(|(&a, &b)| (a, b)).collect())
                .unwrap_or_default();
            out.push(Want {
                id: s.entry.id,
                what: WantKind::Ranges(journal::missing(s.size, &have)),
            });
        }
        out
    }

    /// Moves the count of ranges held from `before` to `after` (for one file's change)
    /// and returns the new total.
    pub(super) fn count_ranges(&self, before: u64, after: u64) -> u64 {
        let update = self
            .ranges
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
                Some((v + after).saturating_sub(before))
            });
        let old = update.unwrap_or_else(|v| v);
        (old + after).saturating_sub(before)
    }

    /// Takes a file that left the table out of the count of ranges held.
    fn forget_ranges(&self, state: &FileState) {
        let n = state.received.lock().map(|r| r.len() as u64).unwrap_or(0);
        self.count_ranges(n, 0);
    }
}

/// Whether an `O_TMPFILE` open failed because the file system (or kernel) lacks it.
fn unsupported(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EOPNOTSUPP | libc::EISDIR | libc::EINVAL)
    )
}

/// Reserves a dense file's whole size at once (one contiguous allocation where the file
/// system can, and a full disk is found at the first unit rather than the last).
fn preallocate(file: &File, size: u64) -> io::Result<()> {
    match rustix::fs::fallocate(file, FallocateFlags::empty(), 0, size) {
        Ok(()) | Err(rustix::io::Errno::OPNOTSUPP) => Ok(()),
        Err(x) => Err(x.into()),
    }
}

/// Makes the data written so far durable, then appends the pending records to the journal
/// (never the other way round: no record may claim bytes that are not on disk).
pub(super) fn flush_journal(g: &mut JournalState, file: &File) -> io::Result<()> {
    file.sync_data()?;
    let pending = std::mem::take(&mut g.pending);
    journal::append(&mut g.file, &pending)?;
    g.pending_bytes = 0;
    g.last_flush = Instant::now();
    Ok(())
}

/// Copies the first `len` bytes of `from` into `to` (copy_file_range: a reflink or an
/// in-kernel copy where the file system offers one).
pub(super) fn copy_range(from: &File, to: &File, len: u64) -> io::Result<()> {
    let (mut off_in, mut off_out) = (0u64, 0u64);
    while off_in < len {
        let chunk = ((len - off_in) as usize).min(1 << 30);
        let n = rustix::fs::copy_file_range(
            from.as_fd(),
            Some(&mut off_in),
            to.as_fd(),
            Some(&mut off_out),
            chunk,
        )?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "file shrank while copying",
            ));
        }
    }
    Ok(())
}

/// Starts writeback of a just-written range without waiting for it, so the data is
/// mostly on disk by the time the file's single fsync comes (wdt does the same). Without
/// it, a large file's whole dirty page cache is flushed in one long fsync at the end.
fn start_writeback(file: &File, offset: u64, len: usize) {
    pagecache::sync_range(file, offset, len as u64, libc::SYNC_FILE_RANGE_WRITE);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::SafeRelPath;

    fn entry() -> Entry {
        Entry {
            id: 1,
            path: b"f".to_vec(),
            kind: crate::protocol::EntryKind::File {
                size: 5,
                data_bytes: 5,
            },
            mode: 0o640,
            mtime_sec: 1_700_000_000,
            mtime_nsec: 7,
            uid: 0,
            gid: 0,
            xattrs: None,
            checksum: None,
        }
    }

    /// Writes `data` to an anonymous file in the store's root and links it in as `name`
    /// with linker state `how` (0, 1 or 2: the copy fallback).
    fn link_with(dir: &std::path::Path, how: u8, name: &[u8], data: &[u8]) -> Store {
        let store = Store::open(dir).unwrap();
        let fd = fsops::open_anonymous(&store.root).unwrap();
        let f = File::from(fd);
        f.write_all_at(data, 0).unwrap();
        store.linker.store(how, Ordering::Relaxed);
        let pfd = fsops::open_dir(&store.root, &SafeRelPath::root()).unwrap();
        store.link_into_place(&f, &pfd, name, &entry()).unwrap();
        store
    }

    #[test]
    fn anonymous_files_are_linked_each_way_and_replace_an_older_version() {
        let dir = tempfile::tempdir().unwrap();
        for how in 0..3u8 {
            let name = format!("f{how}");
            std::fs::write(dir.path().join(&name), b"older version").unwrap();
            link_with(dir.path(), how, name.as_bytes(), b"hello");
            assert_eq!(std::fs::read(dir.path().join(&name)).unwrap(), b"hello");
            link_with(dir.path(), how, format!("new{how}").as_bytes(), b"fresh");
            assert_eq!(
                std::fs::read(dir.path().join(format!("new{how}"))).unwrap(),
                b"fresh"
            );
        }
        // Only the final names: no partial or temporary names left behind.
        let mut names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(names, ["f0", "f1", "f2", "new0", "new1", "new2"]);
    }

    #[test]
    fn copy_fallback_applies_the_entry_metadata() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        link_with(dir.path(), 2, b"f", b"hello");
        let m = std::fs::metadata(dir.path().join("f")).unwrap();
        assert_eq!(m.mode() & 0o7777, 0o640);
        assert_eq!((m.mtime(), m.mtime_nsec()), (1_700_000_000, 7));
    }
}
