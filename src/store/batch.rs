//! Small files made durable together. A finisher takes the completed files waiting for
//! it (at most [`BATCH`]); when several are small ones (anonymous `O_TMPFILE` files, see
//! `partial`), it applies each one's metadata, makes all of them durable with one
//! `syncfs` per file system, checks each file's own writeback for errors, and only then
//! links each in under its name. Larger files, and a lone small one, are fsynced one by
//! one as before.
//!
//! What holds exactly as with one fsync per file: a name appears only after its file's
//! data and metadata are on disk (so a crash never leaves a partial file under a final
//! name), and the directories holding the new names are fsynced in `Store::finish`, so
//! `Done` still means durable. A failure leaves the batch's files unnamed (they vanish)
//! and fails the transfer; a re-run sends them again. The price: `syncfs` also writes
//! other processes' dirty data on that file system, as `sync` after `cp` does.

use std::fs::File;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::fsops;
use super::state::{Completed, FileState, Store};
use crate::error::Result;
use crate::protocol::SafeRelPath;

/// Most files one finisher takes at once (each holds an open descriptor until named).
pub(super) const BATCH: usize = 32;
/// Fewer small files than this are fsynced one by one (a `syncfs` for one file would
/// write the whole file system's dirty data for nothing).
const MIN_SYNCFS: usize = 4;

impl Store {
    /// Finishes a batch of complete files (runs on a finisher thread); failures go to
    /// the store's error.
    pub(super) fn finalize_batch(&self, batch: Vec<Completed>) {
        let small = batch
            .iter()
            .filter(|(s, _)| s.anonymous.load(Ordering::Relaxed))
            .count();
        if small < MIN_SYNCFS {
            for (state, file) in batch {
                if let Err(e) = self.finalize_file(&state, file) {
                    self.fail(e);
                }
            }
            return;
        }
        let mut sealed = Vec::with_capacity(small);
        for (state, file) in batch {
            let r = if state.anonymous.load(Ordering::Relaxed) {
                self.seal_meta(&state, &file)
                    .map(|()| sealed.push((state, file)))
            } else {
                self.finalize_file(&state, file)
            };
            if let Err(e) = r {
                self.fail(e);
            }
        }
        if let Err(e) = self.make_durable(&sealed) {
            return self.fail(e);
        }
        for (state, file) in sealed {
            if let Err(e) = self.publish(&state, file) {
                self.fail(e);
            }
        }
    }

    /// One `syncfs` per file system the files are on, then each file's writeback checked.
    fn make_durable(&self, files: &[(Arc<FileState>, File)]) -> Result<()> {
        let mut synced: Vec<u64> = Vec::new();
        for (state, file) in files {
            let err = |x| self.dest_err(&state.path, x);
            // An anonymous file is on its directory's file system.
            let parent = state.path.split_last().map(|(p, _)| p);
            let dev = self
                .dir(&parent.unwrap_or_else(SafeRelPath::root))
                .map_err(err)?
                .dev;
            if !synced.contains(&dev) {
                rustix::fs::syncfs(file).map_err(|x| err(x.into()))?;
                synced.push(dev);
            }
        }
        for (state, file) in files {
            fsops::wait_writeback(file).map_err(|x| self.dest_err(&state.path, x))?;
        }
        Ok(())
    }
}
