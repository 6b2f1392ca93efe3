//! The destination: turns manifest entries and verified units into files beneath one root,
//! atomically and durably.
//!
//! A regular file is written to a partial file (`.haul-<hash>.part`) in its final
//! directory, or, if it fits in one unit, to an anonymous `O_TMPFILE` file there that is
//! linked in when finished (no directory lock per create). When its last byte has been written, a finisher thread applies owner, mode
//! and mtime, fsyncs it and renames it into place; finishers run in parallel so thousands
//! of small files do not pay one fsync round-trip each in sequence, and take small files
//! in batches made durable together (`batch`). Directory metadata,
//! hardlinks and directory fsyncs happen in [`Store::finish`].
//!
//! Files already present are used: same size and mtime means unchanged (rsync's quick
//! check); an earlier run's partial file plus its journal means resume; an older version
//! under the final name means delta (see `resume`). `--delete` lives in `mirror`.
//!
//! This file is the facade: opening the store, starting its finishers, taking the
//! sender's settings, dispatching manifest entries, and finishing the transfer. The parts
//! it calls depend only downwards, never on this file:
//!
//! - `state`: the [`Store`] struct, per-file state and the helpers every part uses;
//! - `partial`: a regular file's partial-file life cycle (create, write, journal, finish);
//! - `batch`: small files made durable with one `syncfs` per batch, then named;
//! - `resume`: what to ask for per regular file (quick check, resume, delta), on `partial`;
//! - `other`: directories, symlinks, FIFOs, devices and hardlinks;
//! - `dirlink`: -K, the one destination symlink followed, checked on its descriptor;
//! - `rules`: rsync's transfer rules (`-u`, `--existing`, `--ignore-existing`);
//! - `mirror`: `--delete`;
//! - `report`: what each entry changes (`-v`, `-i`) and a dry run's account (`-n`);
//! - `fsops`, `journal` and `key`: file-system calls beneath the root, the resume journal,
//!   and the receiver's private key that authenticates journals;
//! - `tests`: unit tests against a local user who swaps and plants files in the destination.

mod batch;
mod chown;
pub(crate) mod direct;
mod dirlink;
mod dirlog;
mod dirs;
mod fsops;
mod journal;
mod key;
mod mirror;
mod other;
mod partial;
mod report;
mod resume;
mod rules;
mod state;
mod stopping;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_dirs;
#[cfg(test)]
mod tests_settled;
pub mod xattr;

pub use batch::batch_now as small_batch;
pub use fsops::PARTIAL_PREFIX;
pub use state::{Store, WriterCache};

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use crossbeam_channel::Receiver;
use rustix::fs::{Mode, OFlags};

use crate::error::{Error, Result};
use crate::progress::Counters;
use crate::protocol::{
    Accept, Entry, EntryKind, ProtocolError, SafeRelPath, Summary, SyncOptions, Want,
};
use state::Completed;

/// How many files may be fsynced and renamed at once.
const FINISHERS: usize = 8;

impl Store {
    /// Opens (creating if needed) the destination root.
    pub fn open(root: &Path) -> Result<Store> {
        Store::open_as(root, false)
    }

    /// Opens the destination root for a dry run (`-n`): creates nothing; a root that does
    /// not exist yet is remembered as absent (everything beneath it would be new).
    pub fn open_dry(root: &Path) -> Result<Store> {
        Store::open_as(root, true)
    }

    fn open_as(root: &Path, dry: bool) -> Result<Store> {
        let absent = dry && std::fs::symlink_metadata(root).is_err();
        // An absent root is stood in for by its nearest existing ancestor, never looked in.
        let root_dir = match absent {
            true => root
                .ancestors()
                .skip(1)
                .find(|p| p.is_dir())
                .unwrap_or(Path::new("/")),
            false => root,
        };
        let created = !root.exists();
        if let Ok(m) = std::fs::metadata(root) {
            if !m.is_dir() {
                return Err(Error::Destination {
                    path: root.to_path_buf(),
                    source: std::io::Error::other("a file is in the way, not a directory"),
                    hint: "; give a directory (a stream goes to a file with recv --stream FILE)",
                });
            }
        }
        let made: Vec<PathBuf> = match dry {
            true => Vec::new(),
            false => root
                .ancestors()
                .take_while(|p| !p.as_os_str().is_empty() && std::fs::symlink_metadata(p).is_err())
                .map(Path::to_path_buf)
                .collect(),
        };
        if !dry {
            std::fs::create_dir_all(root).map_err(|e| Error::destination(root, e))?;
        }
        let fd = rustix::fs::open(
            root_dir,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| Error::destination(root, e.into()))?;
        // Fail now, not when the sender arrives: we must be able to create entries here.
        if !dry {
            rustix::fs::accessat(
                &fd,
                ".",
                rustix::fs::Access::WRITE_OK | rustix::fs::Access::EXEC_OK,
                rustix::fs::AtFlags::EACCESS,
            )
            .map_err(|e| Error::destination(root, e.into()))?;
        }
        if created && !dry {
            if let Some(parent) = root.parent().filter(|p| !p.as_os_str().is_empty()) {
                if let Ok(p) = File::open(parent) {
                    let _ = p.sync_all();
                }
            }
        }
        let now = rustix::time::clock_gettime(rustix::time::ClockId::RealtimeCoarse);
        let (tx, rx) = crossbeam_channel::bounded::<Completed>(1024);
        // A dry run makes nothing at the destination, not even an anonymous file.
        let log_dir = match dry {
            true => None,
            false => fd.try_clone().ok(),
        };
        Ok(Store {
            root: fd,
            root_path: root.to_path_buf(),
            block_size: AtomicU64::new(crate::protocol::DEFAULT_BLOCK_SIZE),
            as_root: fsops::is_root(),
            files: Mutex::new(HashMap::new()),
            dirs: Mutex::new(dirlog::DirLog::new(log_dir)),
            hardlinks: Mutex::new(Vec::new()),
            finish_tx: Mutex::new(Some(tx)),
            finish_rx: Mutex::new(Some(rx)),
            finishers: Mutex::new(Vec::new()),
            writing: AtomicUsize::new(0),
            closing: AtomicBool::new(false),
            error: Arc::new(Mutex::new(None)),
            other: AtomicU64::new(0),
            skipped: AtomicU64::new(0),
            specials_skipped: AtomicBool::new(false),
            unchanged_files: AtomicU64::new(0),
            unchanged_bytes: AtomicU64::new(0),
            deleted: AtomicU64::new(0),
            settled: Mutex::new(Default::default()),
            arrived: Mutex::new(Vec::new()),
            seen: Mutex::new(HashSet::new()),
            protect: Mutex::new(Default::default()),
            dirlinks: Mutex::new(HashMap::new()),
            dir_cache: Default::default(),
            made_links: Mutex::new(HashSet::new()),
            options: Mutex::new((SyncOptions::default(), [0u8; 32])),
            accept: Mutex::new(Accept::default()),
            chown: Mutex::new(Default::default()),
            linker: AtomicU8::new(0),
            journal_key: OnceLock::new(),
            ranges: AtomicU64::new(0),
            stats: Arc::new(Counters::default()),
            collect: AtomicBool::new(false),
            items: Mutex::new(Vec::new()),
            matched: AtomicU64::new(0),
            xattr_failed: AtomicU64::new(0),
            xattr_first: Mutex::new(None),
            absent,
            fresh: created && !dry,
            made: Mutex::new(made),
            keep_cache: AtomicBool::new(false),
            refused_direct: Default::default(),
            ruled_dirs: Mutex::new(Vec::new()),
            opened: (now.tv_sec, now.tv_nsec),
        })
    }

    /// A descriptor of the destination root of its own (for `haul recv` to measure it
    /// when probed: `receive::probe`).
    pub fn root_dup(&self) -> std::io::Result<std::os::fd::OwnedFd> {
        self.root.try_clone()
    }

    /// Starts the finisher threads; call once, with the store in an `Arc`.
    pub fn start(self: &Arc<Self>) {
        let Some(rx) = self.finish_rx.lock().ok().and_then(|mut g| g.take()) else {
            return;
        };
        let mut handles = Vec::new();
        let limit = batch::batch_now(FINISHERS);
        for i in 0..FINISHERS {
            let store = Arc::clone(self);
            let rx: Receiver<Completed> = rx.clone();
            let h = std::thread::Builder::new()
                .name(format!("haul-finish-{i}"))
                .spawn(move || {
                    while let Ok(first) = rx.recv() {
                        store.finalize_batch(batch::gather(first, &rx, limit, |c| c.0.size));
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

    /// What this receiver keeps of the sender's metadata (`--no-owner` and friends);
    /// call before the transfer starts. The default keeps everything. Fails (a usage
    /// error) on a `--chown` name unknown here or an owner this user may not give.
    pub fn set_accept(&self, accept: Accept) -> Result<()> {
        if let Some(spec) = &accept.chown {
            let ids = chown::resolve(spec, self.as_root)?;
            if let Ok(mut c) = self.chown.lock() {
                *c = ids;
            }
        }
        if let Ok(mut g) = self.accept.lock() {
            *g = accept;
        }
        Ok(())
    }

    /// `--keep-cache`: leave written pages in the page cache (by default each written
    /// range is dropped once written back; see `pagecache`).
    pub fn set_keep_cache(&self, keep: bool) {
        self.keep_cache.store(keep, Ordering::Relaxed);
    }

    /// Applies what the sender announced: block size (files larger than it are
    /// precreated and journaled), sync options, and the block key (for delta hashes).
    /// A dry run removes the directories this run made for the root (`haul recv DIR`
    /// makes DIR before it knows, to fail early where it cannot write).
    pub fn configure(&self, block_size: u64, options: SyncOptions, key: [u8; 32]) {
        if options.dry_run {
            self.remove_made();
        }
        self.block_size.store(block_size, Ordering::Relaxed);
        if let Ok(mut g) = self.options.lock() {
            *g = (options, key);
        }
    }

    /// Removes the directories this run made for the root (`haul recv DIR` makes DIR
    /// before a sender comes), each only while still empty: a dry run's, or a receiver's
    /// whose sender never came.
    pub fn remove_made(&self) {
        let made = self.made.lock().map(|mut m| std::mem::take(&mut *m));
        fsops::remove_made_dirs(&self.root, &made.unwrap_or_default());
    }

    /// The sender's filter rules: `--delete` leaves alone what they exclude.
    pub fn protect(&self, rules: crate::protocol::Filter) {
        if let Ok(mut g) = self.protect.lock() {
            *g = rules;
        }
    }

    /// Creates what a manifest batch describes and returns the ids of files whose data
    /// is wanted.
    pub fn apply_entries(&self, entries: Vec<Entry>) -> Result<Vec<Want>> {
        let mut need = Vec::new();
        let delete = self.options().delete;
        let dry = self.options().dry_run;
        let look = dry || self.collecting();
        let (accept, chown) = (self.accept(), self.chown());
        let me = (
            rustix::process::geteuid().as_raw(),
            rustix::process::getegid().as_raw(),
        );
        let ids: Vec<u64> = entries.iter().map(|e| e.id).collect();
        for mut e in entries {
            let path = SafeRelPath::parse(&e.path).map_err(ProtocolError::from)?;
            if delete {
                if let Ok(mut seen) = self.seen.lock() {
                    seen.insert(mirror::seen_key(&path));
                }
            }
            // Left as the destination has it by rsync's transfer rules (`rules`): seen,
            // but neither made, listed nor counted.
            if self.ruled_out(&path, &e) {
                continue;
            }
            if let Some((parent, _)) = path.split_last() {
                if let Ok(mut d) = self.dirs.lock() {
                    d.touch(&parent);
                }
            }
            // Refused by this receiver's own policy (--no-devices, --no-specials): skipped,
            // but still "seen", so --delete leaves what the destination has by that name.
            if !accept.apply(&mut e, me, chown) {
                self.skipped.fetch_add(1, Ordering::Relaxed);
                self.specials_skipped.store(true, Ordering::Relaxed);
                continue;
            }
            // Looked at before anything is made: what changes, or in a dry run, what would.
            let item = if look { self.observe(&path, &e) } else { None };
            if dry {
                self.dry_entry(path, e, item.as_ref());
                if let Some(i) = item {
                    self.note_item(i);
                }
                continue;
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
                    if let Some(want) = self.add_file(e, path, size, data_bytes)? {
                        need.push(want);
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
            if let Some(i) = item {
                self.note_item(i);
            }
        }
        // Entries that wait for no data are settled now (no data can arrive before the
        // answer), so the settled ids stay a few ranges: see `Store::is_settled`.
        let waiting: HashSet<u64> = need.iter().map(|w| w.id).collect();
        for id in ids.into_iter().filter(|id| !waiting.contains(id)) {
            self.settle(id);
        }
        Ok(need)
    }

    /// Completes the transfer: waits for the finishers, makes hardlinks, applies directory
    /// metadata, fsyncs every directory that changed. Fails if any file is incomplete.
    pub fn finish(&self) -> Result<Summary> {
        self.drain_finishers();
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
        let dirs = match self.dirs.lock() {
            Ok(mut d) => std::mem::replace(&mut *d, dirlog::DirLog::new(None)),
            Err(_) => {
                return Err(Error::io(
                    "the directory log",
                    std::io::Error::other("poisoned"),
                ))
            }
        };
        let log_err = |e: std::io::Error| Error::destination(&self.root_path, e);
        if self.options().delete {
            let sent = dirs.dir_paths().map_err(log_err)?;
            self.delete_extraneous(&sent)?;
        }
        if self.options().dry_run {
            return Ok(self.summary());
        }
        // Every directory is fsynced first, while all of them are still open to this user
        // (its entries are durable then); then the metadata goes on, deepest first, so a
        // directory its owner may not search (mode 0600, say) is closed only after its
        // children; then one syncfs per file system the metadata went to makes all of it
        // durable in one journal commit. (An fsync after each directory's metadata took
        // twice the time on 100,000 directories, a commit each; an fsync pass after the
        // metadata could not reach a closed directory's children as non-root.)
        dirs.deepest_first(log_err, |r| -> Result<()> {
            let (dirlog::DirRecord::Meta(dir, _) | dirlog::DirRecord::Sync(dir)) = r;
            self.at(&dir, fsops::sync_dir)
                .map_err(|x| self.dest_err(&dir, x))
        })?;
        let mut filesystems: HashMap<u64, std::os::fd::OwnedFd> = HashMap::new();
        dirs.deepest_first(log_err, |r| -> Result<()> {
            let dirlog::DirRecord::Meta(path, e) = r else {
                return Ok(());
            };
            let fd = self
                .at(&path, fsops::open_dir)
                .map_err(|x| self.dest_err(&path, x))?;
            let done = fsops::apply_meta_fd(&fd, &e, self.owners(), self.namespaces())
                .map_err(|x| self.dest_err(&path, x))?;
            self.note_xattrs(&path, done);
            let dev = rustix::fs::fstat(&fd)
                .map_err(|x| self.dest_err(&path, x.into()))?
                .st_dev;
            filesystems.entry(dev).or_insert(fd);
            Ok(())
        })?;
        for fd in filesystems.values() {
            rustix::fs::syncfs(fd).map_err(|x| log_err(x.into()))?;
        }
        self.warn_xattrs();
        Ok(self.summary())
    }

    /// The account of this transfer so far.
    fn summary(&self) -> Summary {
        Summary {
            files: self.stats.done_files.load(Ordering::Relaxed),
            other: self.other.load(Ordering::Relaxed),
            bytes: self.stats.done_bytes.load(Ordering::Relaxed),
            skipped: self.skipped.load(Ordering::Relaxed),
            unchanged_files: self.unchanged_files.load(Ordering::Relaxed),
            unchanged_bytes: self.unchanged_bytes.load(Ordering::Relaxed),
            deleted: self.deleted.load(Ordering::Relaxed),
            matched: self.matched.load(Ordering::Relaxed),
            dry_run: self.options().dry_run,
            resumed_files: self.stats.resumed_files.load(Ordering::Relaxed),
            resumed_bytes: self.stats.resumed_bytes.load(Ordering::Relaxed),
            transferred_size: self.stats.done_size.load(Ordering::Relaxed),
        }
    }
}
