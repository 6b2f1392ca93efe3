//! Small files made durable together. A finisher takes the completed files waiting for
//! it (at most [`BATCH`] files and [`BATCH_BYTES`], fewer under a low descriptor limit:
//! [`batch_limit`]); when several are small ones (anonymous `O_TMPFILE` files, see
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
//!
//! A batch is made when 4 or more of the files are small, and holds at most 256 files and
//! 32 MiB (never fewer than 32 files). Why 256: each `syncfs` waits for a journal commit
//! and a device flush, so batches of 32 bounded 20,000 files of 100 KiB to about 7,000
//! files a second, and 256 take that set 14% faster (`tests/e2e_small_kill.rs` kills such
//! copies at random points: every named file is whole).

use std::fs::File;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crossbeam_channel::Receiver;

use super::fsops;
use super::state::{Completed, FileState, Store};
use crate::error::Result;
use crate::protocol::SafeRelPath;

/// Most files one finisher takes at once (each holds an open descriptor until named).
/// Every batch costs a `syncfs`, which waits for a journal commit and a device flush
/// (20-60 ms on the test machine's virtual disk): 8 finishers with 32 files each bounded
/// 20,000 files of 100 KiB to about 7,000 files a second (design.md, *Durability*).
const BATCH: usize = 256;
/// Fewest files a finisher may take at once, however low the descriptor limit.
const MIN_BATCH: usize = 32;
/// Most file bytes one batch holds (dirty in the page cache until its `syncfs`).
const BATCH_BYTES: u64 = 32 << 20;
/// Descriptors kept for everything but the finishers' batches: the completed files queued
/// for them (the channel holds 1,024), open directories (256), sockets, journals.
const OTHER_DESCRIPTORS: u64 = 1536;
/// Fewer small files than this are fsynced one by one (a `syncfs` for one file would
/// write the whole file system's dirty data for nothing).
const MIN_SYNCFS: usize = 4;

/// How many files each of `finishers` may hold at once under a descriptor limit of
/// `nofile`: [`BATCH`], or what the limit leaves them, but never fewer than [`MIN_BATCH`].
pub(super) fn batch_limit(nofile: u64, finishers: usize) -> usize {
    let share = nofile.saturating_sub(OTHER_DESCRIPTORS) / finishers.max(1) as u64;
    usize::try_from(share)
        .unwrap_or(BATCH)
        .clamp(MIN_BATCH, BATCH)
}

/// How many small files each of `finishers` threads may make durable at once under this
/// process's descriptor limit now (see [`batch_limit`]); the probe measures with it too.
pub fn batch_now(finishers: usize) -> usize {
    let nofile = rustix::process::getrlimit(rustix::process::Resource::Nofile).current;
    batch_limit(nofile.unwrap_or(u64::MAX), finishers)
}

/// `first` and the completed files waiting behind it: at most `limit` files and about
/// [`BATCH_BYTES`] (the file that crosses it is taken too); `size` tells a file's bytes.
pub(super) fn gather<T>(
    first: T,
    rx: &Receiver<T>,
    limit: usize,
    size: impl Fn(&T) -> u64,
) -> Vec<T> {
    let mut bytes = size(&first);
    let mut batch = vec![first];
    while batch.len() < limit && bytes < BATCH_BYTES {
        let Ok(next) = rx.try_recv() else {
            break;
        };
        bytes = bytes.saturating_add(size(&next));
        batch.push(next);
    }
    batch
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_takes_what_waits_up_to_its_count_and_bytes() {
        let (tx, rx) = crossbeam_channel::unbounded::<u64>();
        for _ in 0..300 {
            tx.send(100 << 10).unwrap();
        }
        let b = gather(100 << 10, &rx, BATCH, |s| *s);
        assert_eq!(
            b.len(),
            BATCH,
            "256 files of 100 KiB: 25 MiB, under the byte bound"
        );
        let b = gather(100 << 10, &rx, 8, |s| *s);
        assert_eq!(b.len(), 8, "the count bound");
        let left = rx.len();
        let b = gather(1, &rx, BATCH, |s| *s);
        assert_eq!(b.len(), left + 1, "only what is waiting: it never blocks");
        for _ in 0..20 {
            tx.send(4 << 20).unwrap();
        }
        let b = gather(4 << 20, &rx, BATCH, |s| *s);
        assert_eq!(b.len(), 8, "4 MiB files: 32 MiB reached with the eighth");
    }

    #[test]
    fn a_low_descriptor_limit_makes_batches_smaller_but_not_below_the_floor() {
        assert_eq!(batch_limit(u64::MAX, 8), BATCH);
        assert_eq!(batch_limit(1 << 20, 8), BATCH);
        assert_eq!(batch_limit(3072, 8), (3072 - 1536) / 8);
        assert_eq!(batch_limit(1024, 8), MIN_BATCH);
        assert_eq!(batch_limit(0, 0), MIN_BATCH);
    }
}
