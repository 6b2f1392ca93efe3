//! What a transfer that stops early keeps for the next run: every verified, durable range
//! journaled, including those of files that arrived whole but were not finished.
//!
//! A file whose last byte arrives leaves the table of files in progress and goes to a
//! finisher, its last range unjournaled (the finisher makes the file whole and final). If
//! the transfer stops first, nobody finishes it; so [`Store::save_progress`] lets the
//! writes under way end (and starts no new one), then lets the finishers finish what they
//! were given, and a complete file the finishers can no longer take has its last range
//! journaled by the stream that completed it ([`Store::queue_finish`]). Otherwise the
//! next run would send that file again (seen under load: a 12 MiB file whole on a full
//! disk, resent in part).

use std::fs::File;
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::partial::flush_journal;
use super::state::{FileState, Store};
use crate::error::{Error, Result};

/// How long a stopping transfer waits for writes under way (each is one unit's segments:
/// a few MiB and an fsync).
const WRITES_WAIT: Duration = Duration::from_secs(10);

/// One `write_unit` under way, counted until dropped.
pub(super) struct Writing<'a>(&'a AtomicUsize);

impl Drop for Writing<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Store {
    /// Counts a write under way; refused once the transfer is stopping.
    pub(super) fn enter_write(&self) -> Result<Writing<'_>> {
        // Counted before `closing` is read, and `save_progress` sets `closing` before it
        // reads the count (both SeqCst): a write either is waited for or sees `closing`.
        self.writing.fetch_add(1, Ordering::SeqCst);
        let w = Writing(&self.writing);
        if self.closing.load(Ordering::SeqCst) {
            return Err(Error::io(
                "writing",
                io::Error::other("the transfer is stopping"),
            ));
        }
        Ok(w)
    }

    /// Makes every pending journal record durable-backed and written: used when the
    /// transfer stops early, so the next run resumes from here (see the module).
    pub fn save_progress(&self) {
        self.closing.store(true, Ordering::SeqCst);
        let deadline = Instant::now() + WRITES_WAIT;
        while self.writing.load(Ordering::SeqCst) > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        self.drain_finishers();
        let states: Vec<Arc<FileState>> = self
            .files
            .lock()
            .map(|m| m.values().cloned().collect())
            .unwrap_or_default();
        for s in states {
            let Some(j) = &s.journal else { continue };
            let Ok(mut g) = j.lock() else { continue };
            if g.pending.is_empty() {
                continue;
            }
            if let Ok(f) = self.open_work_file(&s) {
                let _ = flush_journal(&mut g, &f);
            }
        }
    }

    /// Hands a complete file to the finisher threads. When they no longer take files (the
    /// transfer is stopping), journals what it has pending and its `last` range, which
    /// completed it and was not journaled, so the next run finishes it instead of sending
    /// it again.
    pub(super) fn queue_finish(
        &self,
        state: Arc<FileState>,
        file: File,
        last: Option<(u64, u32)>,
    ) -> Result<()> {
        let tx = self.finish_tx.lock().ok().and_then(|g| g.clone());
        let (state, file) = match tx {
            Some(tx) => match tx.send((state, file)) {
                Ok(()) => return Ok(()),
                Err(back) => back.into_inner(),
            },
            None => (state, file),
        };
        if let Some(j) = &state.journal {
            if let Ok(mut g) = j.lock() {
                g.pending.extend(last);
                if !g.pending.is_empty() {
                    let _ = flush_journal(&mut g, &file);
                }
            }
        }
        Err(Error::io(
            "finishing files",
            io::Error::other("the transfer is stopping"),
        ))
    }
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::sync::Arc;

    use super::super::tests::{at_point, entry, file, no_race, store, write};
    use crate::protocol::Segment;

    const MIB: u64 = 1 << 20;

    fn unit(offset: u64) -> Segment {
        Segment {
            file: 1,
            offset,
            len: MIB as u32,
            keep: false,
        }
    }

    /// A stream completes a file after the transfer stopped (the finishers are gone): the
    /// file is journaled whole, so the next run asks for none of it and finishes it.
    #[test]
    fn a_file_completed_after_the_stop_is_not_sent_again() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("d");
        fs::create_dir(&root).unwrap();
        let data = vec![3u8; MIB as usize];
        let s = store(&root);
        s.apply_entries(vec![entry(1, "big", file(2 * MIB), 0o644)])
            .unwrap();
        write(&s, &[unit(0)], &data).unwrap();
        // The stop took the finishers while the last unit was on its way.
        s.drain_finishers();
        assert!(write(&s, &[unit(MIB)], &data).is_err());
        s.save_progress();
        drop(s);
        let s = Arc::new(store(&root));
        let need = s
            .apply_entries(vec![entry(1, "big", file(2 * MIB), 0o644)])
            .unwrap();
        assert!(need.is_empty(), "asked again for {need:?}");
        s.start();
        s.finish().unwrap();
        assert_eq!(
            fs::read(root.join("big")).unwrap(),
            vec![3u8; 2 * MIB as usize]
        );
    }

    /// A file completed while the transfer finishes is never left out of a finish that
    /// succeeds: until the finishers have it, it counts as incomplete (before, it left the
    /// table of files waiting for data first, so a finish in that moment stopped the
    /// finishers, succeeded, and the file was never linked in).
    #[test]
    fn a_finish_while_a_completed_file_is_on_its_way_does_not_succeed() {
        let tmp = tempfile::tempdir().unwrap();
        let s = Arc::new(store(tmp.path()));
        s.apply_entries(vec![entry(1, "f", file(MIB), 0o644)])
            .unwrap();
        s.start();
        let seen = Arc::new(std::sync::Mutex::new(None));
        let (s2, seen2) = (Arc::clone(&s), Arc::clone(&seen));
        at_point("file complete, not yet queued", move || {
            let incomplete = s2.incomplete();
            let finished = s2.finish().is_ok();
            *seen2.lock().unwrap() = Some((incomplete, finished));
        });
        let written = write(&s, &[unit(0)], &vec![5u8; MIB as usize]);
        no_race();
        let seen = seen.lock().unwrap().take();
        assert_eq!(seen, Some((1, false)), "(incomplete, finish succeeded)");
        // The writer learns that its file could not be finished.
        assert!(written.is_err());
    }

    /// Once progress is saved, no write starts: what the journal says stays what is there.
    #[test]
    fn no_write_starts_after_progress_is_saved() {
        let tmp = tempfile::tempdir().unwrap();
        let s = store(tmp.path());
        s.apply_entries(vec![entry(1, "big", file(2 * MIB), 0o644)])
            .unwrap();
        s.save_progress();
        let e = write(&s, &[unit(0)], &vec![1u8; MIB as usize]).unwrap_err();
        assert!(e.to_string().contains("stopping"), "{e}");
    }
}
