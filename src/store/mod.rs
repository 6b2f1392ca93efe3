//! The destination: turns manifest entries and verified units into files beneath one root,
//! atomically and durably.
//!
//! A regular file is written to a partial file (`.haul-<hash>.part`) in its final
//! directory. When its last byte has been written, a finisher thread applies owner, mode
//! and mtime, fsyncs it and renames it into place; finishers run in parallel so thousands
//! of small files do not pay one fsync round-trip each in sequence. Directory metadata,
//! hardlinks and directory fsyncs happen in [`Store::finish`].
//!
//! Not here: resume journals and delta (a later issue keeps the partial files this
//! module leaves behind on failure, named deterministically for that reason).

mod fsops;

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use crossbeam_channel::{Receiver, Sender};
use rustix::fs::{FallocateFlags, Mode, OFlags};

use crate::codec::VerifiedUnit;
use crate::error::{Error, Result};
use crate::progress::Counters;
use crate::protocol::{Entry, EntryKind, ProtocolError, SafeRelPath, Segment, Summary};

pub use fsops::PARTIAL_PREFIX;

/// How many files may be fsynced and renamed at once.
const FINISHERS: usize = 8;

/// A regular file in progress.
struct FileState {
    entry: Entry,
    path: SafeRelPath,
    size: u64,
    /// Raw bytes still to arrive.
    remaining: AtomicU64,
    /// Created at manifest time (large or sparse); otherwise its single unit creates it.
    precreated: bool,
}

/// A file whose last byte is written, with an open descriptor, ready to finish.
type Completed = (Arc<FileState>, File);

/// The destination tree of one transfer.
pub struct Store {
    root: OwnedFd,
    root_path: PathBuf,
    block_size: AtomicU64,
    as_root: bool,
    files: Mutex<HashMap<u64, Arc<FileState>>>,
    dirs: Mutex<Vec<(SafeRelPath, Entry)>>,
    hardlinks: Mutex<Vec<(SafeRelPath, SafeRelPath)>>,
    touched: Mutex<HashSet<SafeRelPath>>,
    finish_tx: Mutex<Option<Sender<Completed>>>,
    finish_rx: Mutex<Option<Receiver<Completed>>>,
    finishers: Mutex<Vec<JoinHandle<()>>>,
    error: Arc<Mutex<Option<Error>>>,
    other: AtomicU64,
    skipped: AtomicU64,
    /// Progress counters.
    pub stats: Arc<Counters>,
}

/// A data stream's open partial file, kept between units of the same file.
#[derive(Default)]
pub struct WriterCache {
    open: Option<(u64, Arc<File>)>,
}

impl Store {
    /// Opens (creating if needed) the destination root.
    pub fn open(root: &Path) -> Result<Store> {
        let created = !root.exists();
        std::fs::create_dir_all(root).map_err(|e| Error::destination(root, e))?;
        let fd = rustix::fs::open(
            root,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| Error::destination(root, e.into()))?;
        if created {
            if let Some(parent) = root.parent().filter(|p| !p.as_os_str().is_empty()) {
                if let Ok(p) = File::open(parent) {
                    let _ = p.sync_all();
                }
            }
        }
        let (tx, rx) = crossbeam_channel::bounded::<Completed>(1024);
        Ok(Store {
            root: fd,
            root_path: root.to_path_buf(),
            block_size: AtomicU64::new(crate::config::DEFAULT_BLOCK_SIZE),
            as_root: fsops::is_root(),
            files: Mutex::new(HashMap::new()),
            dirs: Mutex::new(Vec::new()),
            hardlinks: Mutex::new(Vec::new()),
            touched: Mutex::new(HashSet::new()),
            finish_tx: Mutex::new(Some(tx)),
            finish_rx: Mutex::new(Some(rx)),
            finishers: Mutex::new(Vec::new()),
            error: Arc::new(Mutex::new(None)),
            other: AtomicU64::new(0),
            skipped: AtomicU64::new(0),
            stats: Arc::new(Counters::default()),
        })
    }

    /// Starts the finisher threads; call once, with the store in an `Arc`.
    pub fn start(self: &Arc<Self>) {
        let Some(rx) = self.finish_rx.lock().ok().and_then(|mut g| g.take()) else {
            return;
        };
        let mut handles = Vec::new();
        for i in 0..FINISHERS {
            let store = Arc::clone(self);
            let rx: Receiver<Completed> = rx.clone();
            let h = std::thread::Builder::new()
                .name(format!("haul-finish-{i}"))
                .spawn(move || {
                    for (state, file) in rx {
                        if let Err(e) = store.finalize_file(&state, file) {
                            store.fail(e);
                        }
                    }
                });
            if let Ok(h) = h {
                handles.push(h);
            }
        }
        if let Ok(mut g) = self.finishers.lock() {
            *g = handles;
        }
    }

    /// Sets the block size the sender announced (files larger than it are precreated).
    pub fn set_block_size(&self, block_size: u64) {
        self.block_size.store(block_size, Ordering::Relaxed);
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

    /// True when a background finisher failed.
    pub fn has_failed(&self) -> bool {
        self.error.lock().map(|g| g.is_some()).unwrap_or(true)
    }

    fn fail(&self, e: Error) {
        if let Ok(mut g) = self.error.lock() {
            g.get_or_insert(e);
        }
    }

    fn dest_err(&self, path: &SafeRelPath, e: io::Error) -> Error {
        Error::destination(self.root_path.join(path.as_path()), e)
    }

    /// Creates what a manifest batch describes and returns the ids of files whose data
    /// is wanted.
    pub fn apply_entries(&self, entries: Vec<Entry>) -> Result<Vec<u64>> {
        let mut need = Vec::new();
        for e in entries {
            let path = SafeRelPath::parse(&e.path).map_err(ProtocolError::from)?;
            if let Some((parent, _)) = path.split_last() {
                if let Ok(mut t) = self.touched.lock() {
                    if !t.contains(&parent) {
                        t.insert(parent);
                    }
                }
            }
            match &e.kind {
                EntryKind::Dir => self.make_dir(path, e)?,
                EntryKind::File { size, data_bytes } => {
                    let (size, data_bytes) = (*size, *data_bytes);
                    if data_bytes > size {
                        return Err(ProtocolError::Malformed("file data exceeds its size").into());
                    }
                    if path.is_root() {
                        return Err(ProtocolError::Malformed("file at the root path").into());
                    }
                    let id = e.id;
                    if self.add_file(e, path, size, data_bytes)? {
                        need.push(id);
                    }
                }
                EntryKind::Symlink { .. } | EntryKind::Fifo | EntryKind::Device { .. } => {
                    self.make_special(&path, &e)?
                }
                EntryKind::Hardlink { target } => {
                    let target = SafeRelPath::parse(target).map_err(ProtocolError::from)?;
                    if path.is_root() || target.is_root() {
                        return Err(ProtocolError::Malformed("hardlink at the root").into());
                    }
                    if let Ok(mut h) = self.hardlinks.lock() {
                        h.push((path, target));
                    }
                }
            }
        }
        Ok(need)
    }

    fn make_dir(&self, path: SafeRelPath, e: Entry) -> Result<()> {
        if let Some((parent, name)) = path.split_last() {
            let pfd = fsops::open_dir(&self.root, &parent).map_err(|x| self.dest_err(&path, x))?;
            fsops::make_dir(&pfd, name).map_err(|x| self.dest_err(&path, x))?;
        }
        if let Ok(mut d) = self.dirs.lock() {
            d.push((path, e));
        }
        self.other.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Registers a regular file; returns whether its data is wanted.
    fn add_file(&self, e: Entry, path: SafeRelPath, size: u64, data_bytes: u64) -> Result<bool> {
        let id = e.id;
        let precreated =
            data_bytes == 0 || data_bytes != size || size > self.block_size.load(Ordering::Relaxed);
        let state = Arc::new(FileState {
            entry: e,
            path,
            size,
            remaining: AtomicU64::new(data_bytes),
            precreated,
        });
        let mut file = None;
        if precreated {
            let f = self.create_partial(&state, true)?;
            f.set_len(size).map_err(|x| self.dest_err(&state.path, x))?;
            if data_bytes == size && size > 0 {
                match rustix::fs::fallocate(&f, FallocateFlags::empty(), 0, size) {
                    Ok(()) | Err(rustix::io::Errno::OPNOTSUPP) => {}
                    Err(x) => return Err(self.dest_err(&state.path, x.into())),
                }
            }
            file = Some(f);
        }
        if data_bytes == 0 {
            // Nothing will arrive: the file (empty, or all holes) is complete now.
            if let Some(f) = file {
                self.queue_finish(state, f)?;
            }
            return Ok(false);
        }
        match self.files.lock() {
            Ok(mut m) => {
                if m.insert(id, state).is_some() {
                    return Err(ProtocolError::Malformed("duplicate file id").into());
                }
            }
            Err(_) => return Err(Error::io("file table", io::Error::other("poisoned"))),
        }
        Ok(true)
    }

    fn create_partial(&self, state: &FileState, truncate: bool) -> Result<File> {
        let (parent, name) = state
            .path
            .split_last()
            .ok_or(ProtocolError::Malformed("file at the root path"))?;
        let partial = fsops::join(&parent, &fsops::partial_name(name));
        let mut flags = OFlags::WRONLY | OFlags::CREATE | OFlags::NOFOLLOW;
        if truncate {
            flags |= OFlags::TRUNC;
        }
        let fd = fsops::open_beneath(&self.root, &partial, flags, Mode::from_raw_mode(0o600))
            .map_err(|x| self.dest_err(&state.path, x))?;
        Ok(fsops::into_file(fd))
    }

    fn queue_finish(&self, state: Arc<FileState>, file: File) -> Result<()> {
        let tx = self.finish_tx.lock().ok().and_then(|g| g.clone());
        match tx {
            Some(tx) => tx
                .send((state, file))
                .map_err(|_| Error::io("finishing files", io::Error::other("finisher stopped"))),
            None => Err(Error::io(
                "finishing files",
                io::Error::other("store closed"),
            )),
        }
    }

    fn make_special(&self, path: &SafeRelPath, e: &Entry) -> Result<()> {
        let (parent, name) = path
            .split_last()
            .ok_or(ProtocolError::Malformed("special file at the root path"))?;
        if let EntryKind::Device { .. } = e.kind {
            if !self.as_root {
                crate::progress::warn(&format!(
                    "skipping device {} (only root can create devices)",
                    path.display()
                ));
                self.skipped.fetch_add(1, Ordering::Relaxed);
                return Ok(());
            }
        }
        let pfd = fsops::open_dir(&self.root, &parent).map_err(|x| self.dest_err(path, x))?;
        let tmp = fsops::temp_name(name);
        fsops::remove_if_present(&pfd, &tmp).map_err(|x| self.dest_err(path, x))?;
        let mode = e.mode & 0o7777;
        let made = match &e.kind {
            EntryKind::Symlink { target } => {
                rustix::fs::symlinkat(target.as_slice(), &pfd, tmp.as_slice())
            }
            EntryKind::Fifo => rustix::fs::mknodat(
                &pfd,
                tmp.as_slice(),
                rustix::fs::FileType::Fifo,
                Mode::from_raw_mode(mode),
                0,
            ),
            EntryKind::Device { block, rdev } => rustix::fs::mknodat(
                &pfd,
                tmp.as_slice(),
                if *block {
                    rustix::fs::FileType::BlockDevice
                } else {
                    rustix::fs::FileType::CharacterDevice
                },
                Mode::from_raw_mode(mode),
                *rdev,
            ),
            _ => return Ok(()),
        };
        made.map_err(|x| self.dest_err(path, x.into()))?;
        let is_link = matches!(e.kind, EntryKind::Symlink { .. });
        fsops::apply_meta_at(&pfd, &tmp, e, self.as_root, is_link)
            .and_then(|()| fsops::rename_in(&pfd, &tmp, name))
            .map_err(|x| self.dest_err(path, x))?;
        self.other.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Writes one verified unit's segments into their partial files. Completed files go to
    /// the finishers.
    pub fn write_unit(
        &self,
        unit: &VerifiedUnit<'_>,
        segments: impl Iterator<Item = Segment>,
        cache: &mut WriterCache,
    ) -> Result<()> {
        let bytes = unit.bytes();
        let mut pos = 0usize;
        for seg in segments {
            let len = seg.len as usize;
            let data = bytes
                .get(pos..pos + len)
                .ok_or(ProtocolError::Malformed("segments exceed unit"))?;
            pos += len;
            let state = self
                .files
                .lock()
                .ok()
                .and_then(|m| m.get(&seg.file).cloned())
                .ok_or(ProtocolError::Malformed(
                    "data for an unknown or finished file",
                ))?;
            let end = seg.offset + u64::from(seg.len);
            if end > state.size {
                return Err(ProtocolError::Malformed("data beyond the end of its file").into());
            }
            if !state.precreated && (seg.offset != 0 || end != state.size) {
                return Err(ProtocolError::Malformed("small file split across units").into());
            }
            let file = match &cache.open {
                Some((id, f)) if *id == seg.file => Arc::clone(f),
                _ => {
                    let f = Arc::new(self.create_partial(&state, !state.precreated)?);
                    cache.open = Some((seg.file, Arc::clone(&f)));
                    f
                }
            };
            file.write_all_at(data, seg.offset)
                .map_err(|x| self.dest_err(&state.path, x))?;
            if state.precreated {
                start_writeback(&file, seg.offset, len);
            }
            self.stats
                .done_bytes
                .fetch_add(len as u64, Ordering::Relaxed);
            let prev = state
                .remaining
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |r| {
                    r.checked_sub(u64::from(seg.len))
                })
                .map_err(|_| ProtocolError::Malformed("more data than the file declared"))?;
            if prev == u64::from(seg.len) {
                if let Ok(mut m) = self.files.lock() {
                    m.remove(&seg.file);
                }
                cache.open = None;
                let file = Arc::try_unwrap(file)
                    .or_else(|shared| shared.try_clone())
                    .map_err(|x| self.dest_err(&state.path, x))?;
                self.queue_finish(state, file)?;
            }
        }
        Ok(())
    }

    /// fsync, metadata and rename of one complete file (runs on a finisher thread).
    fn finalize_file(&self, state: &FileState, file: File) -> Result<()> {
        let err = |x| self.dest_err(&state.path, x);
        fsops::apply_meta_fd(&file, &state.entry, self.as_root).map_err(err)?;
        file.sync_all().map_err(err)?;
        drop(file);
        let (parent, name) = state
            .path
            .split_last()
            .ok_or(ProtocolError::Malformed("file at the root path"))?;
        let pfd = fsops::open_dir(&self.root, &parent).map_err(err)?;
        fsops::rename_in(&pfd, &fsops::partial_name(name), name).map_err(err)?;
        self.stats.done_files.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Drops files the sender could not read: their partial files are removed.
    pub fn discard(&self, ids: &[u64]) -> Result<()> {
        for id in ids {
            let state = self.files.lock().ok().and_then(|mut m| m.remove(id));
            if let Some(state) = state {
                if let Some((parent, name)) = state.path.split_last() {
                    if let Ok(pfd) = fsops::open_dir(&self.root, &parent) {
                        let _ = fsops::remove_if_present(&pfd, &fsops::partial_name(name));
                    }
                }
            }
        }
        Ok(())
    }

    /// Completes the transfer: waits for the finishers, makes hardlinks, applies directory
    /// metadata, fsyncs every directory that changed. Fails if any file is incomplete.
    pub fn finish(&self) -> Result<Summary> {
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
        if let Some(e) = self.take_error() {
            return Err(e);
        }
        if let Some(state) = self
            .files
            .lock()
            .ok()
            .and_then(|m| m.values().next().cloned())
        {
            return Err(Error::Remote {
                side: "sender",
                message: format!(
                    "finished without sending all data of {}",
                    state.path.display()
                ),
                code: crate::error::exit::INTEGRITY,
            });
        }
        let links = self
            .hardlinks
            .lock()
            .map(|mut h| std::mem::take(&mut *h))
            .unwrap_or_default();
        for (path, target) in links {
            self.make_hardlink(&path, &target)?;
        }
        let mut dirs = self
            .dirs
            .lock()
            .map(|mut d| std::mem::take(&mut *d))
            .unwrap_or_default();
        // Deepest first, so a read-only parent never blocks its children.
        dirs.sort_by_key(|(p, _)| std::cmp::Reverse(p.components().count()));
        let mut touched = self
            .touched
            .lock()
            .map(|mut t| std::mem::take(&mut *t))
            .unwrap_or_default();
        for (path, e) in &dirs {
            let fd = fsops::open_dir(&self.root, path).map_err(|x| self.dest_err(path, x))?;
            fsops::apply_meta_fd(&fd, e, self.as_root).map_err(|x| self.dest_err(path, x))?;
            if let Some((parent, _)) = path.split_last() {
                touched.insert(parent);
            }
            touched.insert(path.clone());
        }
        for dir in &touched {
            fsops::sync_dir(&self.root, dir).map_err(|x| self.dest_err(dir, x))?;
        }
        Ok(Summary {
            files: self.stats.done_files.load(Ordering::Relaxed),
            other: self.other.load(Ordering::Relaxed),
            bytes: self.stats.done_bytes.load(Ordering::Relaxed),
            skipped: self.skipped.load(Ordering::Relaxed),
        })
    }

    fn make_hardlink(&self, path: &SafeRelPath, target: &SafeRelPath) -> Result<()> {
        let err = |x| self.dest_err(path, x);
        let (tparent, tname) = target
            .split_last()
            .ok_or(ProtocolError::Malformed("hardlink"))?;
        let (parent, name) = path
            .split_last()
            .ok_or(ProtocolError::Malformed("hardlink"))?;
        let tfd = fsops::open_dir(&self.root, &tparent).map_err(err)?;
        let pfd = fsops::open_dir(&self.root, &parent).map_err(err)?;
        let tmp = fsops::temp_name(name);
        fsops::remove_if_present(&pfd, &tmp).map_err(err)?;
        rustix::fs::linkat(
            &tfd,
            tname,
            &pfd,
            tmp.as_slice(),
            rustix::fs::AtFlags::empty(),
        )
        .map_err(|x| err(x.into()))?;
        fsops::rename_in(&pfd, &tmp, name).map_err(err)?;
        self.other.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

/// Starts writeback of a just-written range without waiting for it, so the data is
/// mostly on disk by the time the file's single fsync comes (wdt does the same). Without
/// it, a large file's whole dirty page cache is flushed in one long fsync at the end.
fn start_writeback(file: &File, offset: u64, len: usize) {
    use std::os::fd::AsRawFd;
    // Hand-written because neither rustix nor std wraps sync_file_range.
    // SAFETY: sync_file_range only reads its integer arguments; the descriptor is valid
    // for the duration of the call because `file` is borrowed. Errors are advisory.
    unsafe {
        libc::sync_file_range(
            file.as_raw_fd(),
            offset as libc::off64_t,
            len as libc::off64_t,
            libc::SYNC_FILE_RANGE_WRITE,
        );
    }
}
