//! What every part of the store shares: the [`Store`] struct and its fields, the state of
//! a regular file in progress ([`FileState`], [`JournalState`]), a data stream's
//! [`WriterCache`], and the small helpers all parts use (options, error recording, the
//! file table's simple queries).
//!
//! It deliberately holds no behaviour of its own: nothing here creates, writes or removes
//! files in the destination (that is `partial`, `resume`, `other`, `mirror` and the facade
//! in `mod.rs`), and it uses nothing else in the store but `fsops`.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::Instant;

use crossbeam_channel::{Receiver, Sender};

use super::fsops;
use crate::error::{Error, Result};
use crate::progress::Counters;
use crate::protocol::{Entry, ProtocolError, SafeRelPath, SyncOptions};

/// A file whose last byte is written, with an open descriptor, ready to finish.
pub(super) type Completed = (Arc<FileState>, File);

/// The destination tree of one transfer.
pub struct Store {
    pub(super) root: OwnedFd,
    pub(super) root_path: PathBuf,
    pub(super) block_size: AtomicU64,
    pub(super) as_root: bool,
    pub(super) files: Mutex<HashMap<u64, Arc<FileState>>>,
    pub(super) dirs: Mutex<Vec<(SafeRelPath, Entry)>>,
    pub(super) hardlinks: Mutex<Vec<(SafeRelPath, SafeRelPath)>>,
    pub(super) touched: Mutex<HashSet<SafeRelPath>>,
    pub(super) finish_tx: Mutex<Option<Sender<Completed>>>,
    pub(super) finish_rx: Mutex<Option<Receiver<Completed>>>,
    pub(super) finishers: Mutex<Vec<JoinHandle<()>>>,
    pub(super) error: Arc<Mutex<Option<Error>>>,
    pub(super) other: AtomicU64,
    pub(super) skipped: AtomicU64,
    pub(super) unchanged_files: AtomicU64,
    pub(super) unchanged_bytes: AtomicU64,
    pub(super) deleted: AtomicU64,
    /// Files completed or forgotten: late or repeated data for them is ignored.
    pub(super) settled: Mutex<HashSet<u64>>,
    /// Every path in the manifest (kept only for --delete).
    pub(super) seen: Mutex<HashSet<SafeRelPath>>,
    pub(super) options: Mutex<(SyncOptions, [u8; 32])>,
    /// How small files are created and named: anonymous files linked with
    /// [`fsops::Linker::EmptyPath`] (0) or [`fsops::Linker::ProcFd`] (1), or named
    /// partial files renamed into place (2) where neither works.
    pub(super) linker: AtomicU8,
    /// The receiver's private journal key, loaded when first needed; `None` when it cannot
    /// be made or read safely (then nothing is resumed or journaled this run).
    pub(super) journal_key: OnceLock<Option<[u8; 32]>>,
    /// Progress counters.
    pub stats: Arc<Counters>,
}

/// A data stream's open partial file, kept between units of the same file.
#[derive(Default)]
pub struct WriterCache {
    pub(super) open: Option<(u64, Arc<File>)>,
}

/// A regular file in progress.
pub(super) struct FileState {
    pub(super) entry: Entry,
    pub(super) path: SafeRelPath,
    pub(super) size: u64,
    /// Raw bytes (or KEEP ranges) still to arrive.
    pub(super) remaining: AtomicU64,
    /// Ranges received so far (sorted, merged): duplicates after a reconnect are
    /// recognised, and what is missing can be asked for again.
    pub(super) received: Mutex<Vec<(u64, u64)>>,
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

    /// Records a background error; only the first is kept.
    pub(super) fn fail(&self, e: Error) {
        if let Ok(mut g) = self.error.lock() {
            g.get_or_insert(e);
        }
    }

    /// A destination error naming `path` beneath the root.
    pub(super) fn dest_err(&self, path: &SafeRelPath, e: io::Error) -> Error {
        Error::destination(self.root_path.join(path.as_path()), e)
    }

    /// Completed or forgotten: late or repeated data for it is ignored.
    pub(super) fn is_settled(&self, id: u64) -> bool {
        self.settled
            .lock()
            .map(|f| f.contains(&id))
            .unwrap_or(false)
    }

    /// How many files still wait for data.
    pub fn incomplete(&self) -> usize {
        self.files.lock().map(|m| m.len()).unwrap_or(0)
    }
}
