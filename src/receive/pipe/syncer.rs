//! A pipe's file destination made durable while it is written: a thread of its own
//! `fdatasync`s the file each time another [`SYNC_CHUNK`] bytes were written, so the
//! `fsync` at the end commits only what the last chunk left, as file mode's journal
//! spreads its `fdatasync`s (every 64 MiB or second). The writer never waits for it: it
//! only says how far it got. Without it, a stream written straight to the device still
//! left every block allocation of the whole file to the final `fsync`'s journal commit,
//! which took 0.2 s in some runs and 1.0–1.4 s in others (bench/RESULTS.md, *Pipe mode's
//! file made durable as it is written*).
//!
//! An `fdatasync` error is kept and returned by [`Syncer::stop`]: the thread syncs through
//! a duplicate of the writer's descriptor, the same open file description, so the kernel
//! reports a writeback error to whichever call comes first and not again to the final
//! `fsync`.

use std::fs::File;
use std::io;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

/// Bytes written between two `fdatasync`s.
pub(super) const SYNC_CHUNK: u64 = 64 << 20;

/// How a file is made durable (a test makes it fail as a disk would).
pub(super) type SyncFn = fn(&File) -> io::Result<()>;

/// The real `fdatasync`.
pub(super) fn sync_data(f: &File) -> io::Result<()> {
    f.sync_data()
}

#[derive(Default)]
struct State {
    /// Bytes the writer has written.
    written: u64,
    /// Bytes durable after the last completed `fdatasync`.
    synced: u64,
    /// `fdatasync`s completed.
    syncs: u64,
    stop: bool,
    /// The first `fdatasync` error; no sync is tried after it.
    error: Option<io::Error>,
}

type Shared = Arc<(Mutex<State>, Condvar)>;

/// The syncing thread of one file destination.
pub(super) struct Syncer {
    shared: Shared,
    chunk: u64,
    thread: Option<JoinHandle<()>>,
}

fn lock(s: &Shared) -> MutexGuard<'_, State> {
    s.0.lock().unwrap_or_else(|p| p.into_inner())
}

impl Syncer {
    /// Starts syncing `file` every `chunk` bytes with `sync`. `None` when its descriptor
    /// cannot be duplicated or no thread started: then only the final `fsync` makes it
    /// durable, as before this existed.
    pub(super) fn start(file: &File, chunk: u64, sync: SyncFn) -> Option<Syncer> {
        let file = file.try_clone().ok()?;
        let chunk = chunk.max(1);
        let shared: Shared = Arc::default();
        let theirs = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("haul-pipe-sync".into())
            .spawn(move || run(&file, &theirs, chunk, sync))
            .ok()?;
        Some(Syncer {
            shared,
            chunk,
            thread: Some(thread),
        })
    }

    /// The writer has written `total` bytes of the file so far.
    pub(super) fn wrote(&self, total: u64) {
        let mut g = lock(&self.shared);
        g.written = total;
        if total.saturating_sub(g.synced) >= self.chunk {
            self.shared.1.notify_one();
        }
    }

    /// `fdatasync`s completed so far.
    #[cfg(test)]
    pub(super) fn syncs(&self) -> u64 {
        lock(&self.shared).syncs
    }

    /// Whether a sync has failed.
    #[cfg(test)]
    pub(super) fn failed(&self) -> bool {
        lock(&self.shared).error.is_some()
    }

    /// Stops the thread (a sync under way completes first) and returns the first error
    /// any sync hit. The caller's `fsync` makes the rest durable.
    pub(super) fn stop(&mut self) -> io::Result<()> {
        lock(&self.shared).stop = true;
        self.shared.1.notify_one();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        match lock(&self.shared).error.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

impl Drop for Syncer {
    /// Unfinished (the transfer failed): the thread ends; its error does not matter.
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

fn run(file: &File, shared: &Shared, chunk: u64, sync: SyncFn) {
    let mut g = lock(shared);
    loop {
        while !g.stop && g.written.saturating_sub(g.synced) < chunk {
            g = shared.1.wait(g).unwrap_or_else(|p| p.into_inner());
        }
        if g.stop {
            return;
        }
        let upto = g.written;
        drop(g);
        let r = sync(file);
        g = lock(shared);
        match r {
            Ok(()) => {
                g.synced = upto;
                g.syncs += 1;
            }
            Err(e) => {
                g.error = Some(e);
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::time::{Duration, Instant};

    /// Waits (at most a minute: a bound for a stuck thread, not a timing assertion)
    /// until `f` holds.
    fn until(f: impl Fn() -> bool) -> bool {
        let end = Instant::now() + Duration::from_secs(60);
        while !f() {
            if Instant::now() > end {
                return false;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        true
    }

    #[test]
    fn a_file_is_synced_as_each_chunk_is_written_and_not_before() {
        let mut f = tempfile::tempfile().unwrap();
        let mut s = Syncer::start(&f, 4096, sync_data).unwrap();
        f.write_all(&[1u8; 4095]).unwrap();
        s.wrote(4095);
        f.write_all(&[2u8; 1]).unwrap();
        s.wrote(4096);
        assert!(until(|| s.syncs() == 1), "one chunk written: one sync");
        f.write_all(&[3u8; 3 * 4096]).unwrap();
        s.wrote(4 * 4096);
        assert!(
            until(|| s.syncs() == 2),
            "three chunks at once: one more sync"
        );
        s.stop().unwrap();
        assert_eq!(s.syncs(), 2);
    }

    #[test]
    fn nothing_written_means_no_sync_and_a_clean_stop() {
        let f = tempfile::tempfile().unwrap();
        let mut s = Syncer::start(&f, 4096, sync_data).unwrap();
        s.wrote(100);
        s.stop().unwrap();
        assert_eq!(s.syncs(), 0);
    }

    #[test]
    fn a_failed_sync_is_returned_by_stop_and_not_retried() {
        fn eio(_: &File) -> io::Result<()> {
            Err(io::Error::from_raw_os_error(libc::EIO))
        }
        let f = tempfile::tempfile().unwrap();
        let mut s = Syncer::start(&f, 10, eio).unwrap();
        s.wrote(10);
        assert!(until(|| s.thread.as_ref().is_some_and(|t| t.is_finished())));
        s.wrote(100);
        let e = s.stop().unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EIO));
        assert_eq!(s.syncs(), 0);
        // Stopped twice (as Drop does after finish): nothing left to report.
        s.stop().unwrap();
    }
}
