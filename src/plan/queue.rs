//! The work queue the stream workers share: files cut into blocks at multiples of the
//! block size, small files bundled into packs, and always the largest remaining item
//! first (wdt's rule), so one huge file spreads over every stream and the transfer does
//! not end with one stream dragging a giant file alone.
//!
//! Not here: reading or sending (workers do that); deciding which files are needed
//! (the receiver does).

use std::collections::{BinaryHeap, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::plan::beneath::Within;
use crate::plan::walk::{FileData, Stamp};
use crate::protocol::WantKind;

/// A regular file to send.
#[derive(Debug)]
pub struct FileJob {
    /// Manifest id.
    pub id: u64,
    /// Its path on this host (what messages name).
    pub path: PathBuf,
    /// Where it is opened: beneath its source's root.
    pub at: Within,
    /// Its size at walk time.
    pub size: u64,
    /// Size, mtime and ctime at walk time.
    pub stamp: Stamp,
    /// Its path at the destination.
    pub dest: Vec<u8>,
    /// The receiver's hashes of an older version: send only pieces that differ.
    pub delta: Option<Delta>,
}

/// The receiver's old version, hashed per piece.
#[derive(Debug)]
pub struct Delta {
    /// Bytes per piece (divides the block size).
    pub chunk: u32,
    /// One hash per piece of the old content.
    pub hashes: Vec<[u8; 16]>,
}

/// One unit of work for a stream.
#[derive(Debug)]
pub enum Work {
    /// Bytes `[offset, offset + len)` of one file.
    Block {
        /// The file.
        file: Arc<FileJob>,
        /// Start.
        offset: u64,
        /// Length.
        len: u32,
    },
    /// Several whole small files.
    Pack(Vec<Arc<FileJob>>),
}

/// A file still being cut into blocks.
struct Cursor {
    file: Arc<FileJob>,
    extents: VecDeque<(u64, u64)>,
    remaining: u64,
}

enum Item {
    File(Cursor),
    Pack(Vec<Arc<FileJob>>, u64),
}

impl Item {
    fn weight(&self) -> u64 {
        match self {
            Item::File(c) => c.remaining,
            Item::Pack(_, bytes) => *bytes,
        }
    }
}

impl PartialEq for Item {
    fn eq(&self, other: &Self) -> bool {
        self.weight() == other.weight()
    }
}
impl Eq for Item {}
impl PartialOrd for Item {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Item {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.weight().cmp(&other.weight())
    }
}

#[derive(Default)]
struct State {
    heap: BinaryHeap<Item>,
    pack: Vec<Arc<FileJob>>,
    pack_bytes: u64,
    closed: bool,
    aborted: bool,
    /// Units handed out and not yet reported done.
    in_flight: usize,
    /// Files queued and not yet wholly handed out (the bound of [`WorkQueue::wait_room`]).
    files: usize,
}

/// Largest-first work queue shared by the stream workers.
pub struct WorkQueue {
    block: u64,
    pack_max_file: u64,
    pack_max_files: usize,
    state: Mutex<State>,
    ready: Condvar,
    /// Signalled when files leave the queue (see [`WorkQueue::wait_room`]).
    room: Condvar,
}

impl WorkQueue {
    /// A queue cutting at `block` bytes; files up to `block / 4` are packed.
    pub fn new(block: u64) -> WorkQueue {
        WorkQueue {
            block,
            pack_max_file: block / 4,
            pack_max_files: crate::protocol::MAX_SEGMENTS,
            state: Mutex::new(State::default()),
            ready: Condvar::new(),
            room: Condvar::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds a file, or the part of it the receiver wants. Small dense files go into the
    /// current pack.
    pub fn push(&self, id: u64, data: FileData, want: WantKind) {
        let (extents, delta) = match want {
            WantKind::All => (data.extents, None),
            WantKind::Ranges(r) => (intersect(&data.extents, &r), None),
            WantKind::Delta { chunk, hashes } => (data.extents, Some(Delta { chunk, hashes })),
        };
        let data_bytes: u64 = extents.iter().map(|(a, b)| b - a).sum();
        if data_bytes == 0 {
            return;
        }
        let whole = data_bytes == data.size && delta.is_none();
        let job = Arc::new(FileJob {
            id,
            path: data.path,
            at: data.at,
            size: data.size,
            stamp: data.stamp,
            dest: data.dest,
            delta,
        });
        let mut st = self.lock();
        st.files += 1;
        if whole && data.size <= self.pack_max_file {
            st.pack.push(job);
            st.pack_bytes += data.size;
            if st.pack_bytes >= self.block || st.pack.len() >= self.pack_max_files {
                Self::seal_pack(&mut st);
                self.ready.notify_one();
            }
            return;
        }
        st.heap.push(Item::File(Cursor {
            file: job,
            extents: extents.into(),
            remaining: data_bytes,
        }));
        self.ready.notify_one();
    }

    fn seal_pack(st: &mut State) {
        if st.pack.is_empty() {
            return;
        }
        let pack = std::mem::take(&mut st.pack);
        let bytes = std::mem::take(&mut st.pack_bytes);
        st.heap.push(Item::Pack(pack, bytes));
    }

    /// Makes the current partial pack available (e.g. at the end of a manifest batch, so
    /// workers are not idle while the walk goes on).
    pub fn flush(&self) {
        let mut st = self.lock();
        Self::seal_pack(&mut st);
        self.ready.notify_all();
    }

    /// No more files will be added; workers drain what is left and stop.
    pub fn close(&self) {
        let mut st = self.lock();
        Self::seal_pack(&mut st);
        st.closed = true;
        self.ready.notify_all();
    }

    /// True once `abort` was called.
    pub fn is_aborted(&self) -> bool {
        self.lock().aborted
    }

    /// Stop handing out work now.
    pub fn abort(&self) {
        let mut st = self.lock();
        st.aborted = true;
        self.ready.notify_all();
        self.room.notify_all();
    }

    /// A guard for a thread that takes work from this queue: if the thread unwinds from a
    /// panic, the queue is aborted. The work it held would otherwise never finish, and
    /// whoever waits for the queue to empty would wait for ever instead of failing the
    /// transfer (the panic itself is reported when the thread is joined).
    pub fn abort_on_panic(&self) -> AbortOnPanic<'_> {
        AbortOnPanic(self)
    }

    /// Waits until fewer than `max` files are queued (or the queue was aborted), sealing
    /// the current pack first so that the workers can take it. The manifest waits here, so
    /// the files known to both sides and not yet sent stay a bounded window, however many
    /// the tree holds: largest-first then orders the files within that window.
    pub fn wait_room(&self, max: usize) {
        while !self.wait_room_for(max, Duration::from_secs(3600)) {}
    }

    /// [`WorkQueue::wait_room`] for at most `timeout`: false if there was no room by then.
    pub fn wait_room_for(&self, max: usize, timeout: Duration) -> bool {
        let mut st = self.lock();
        if st.files < max {
            return true;
        }
        Self::seal_pack(&mut st);
        self.ready.notify_all();
        wait_until(st, &self.room, timeout, |st| st.aborted || st.files < max)
    }

    /// The next unit of work, largest first; `None` once closed and empty, or aborted.
    pub fn next(&self) -> Option<Work> {
        let mut st = self.lock();
        loop {
            if st.aborted {
                return None;
            }
            if let Some(item) = st.heap.pop() {
                st.in_flight += 1;
                let work = match item {
                    Item::Pack(files, _) => {
                        st.files = st.files.saturating_sub(files.len());
                        Work::Pack(files)
                    }
                    Item::File(mut c) => {
                        let work = self.cut(&mut c);
                        if c.remaining > 0 {
                            st.heap.push(Item::File(c));
                        } else {
                            st.files = st.files.saturating_sub(1);
                        }
                        work
                    }
                };
                self.room.notify_all();
                return Some(work);
            }
            if st.closed {
                return None;
            }
            st = self.ready.wait(st).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// A worker finished a unit it got from `next`.
    pub fn done(&self) {
        let mut st = self.lock();
        st.in_flight = st.in_flight.saturating_sub(1);
        if st.in_flight == 0 && st.heap.is_empty() {
            self.ready.notify_all();
        }
    }

    /// Waits until every queued unit was handed out and reported done (or the queue was
    /// aborted). Seals the current pack first.
    pub fn wait_idle(&self) {
        while !self.wait_idle_for(Duration::from_secs(3600)) {}
    }

    /// [`WorkQueue::wait_idle`] for at most `timeout`: false if work was left by then.
    pub fn wait_idle_for(&self, timeout: Duration) -> bool {
        let mut st = self.lock();
        Self::seal_pack(&mut st);
        self.ready.notify_all();
        wait_until(st, &self.ready, timeout, |st| {
            st.aborted || (st.in_flight == 0 && st.heap.is_empty())
        })
    }

    /// Takes the next block of a file: from the first data range up to the next multiple
    /// of the block size (blocks stay aligned to file offsets).
    fn cut(&self, c: &mut Cursor) -> Work {
        let (start, end) = c.extents.front().copied().unwrap_or((0, 0));
        let block_end = (start / self.block + 1) * self.block;
        let stop = end.min(block_end);
        if stop >= end {
            c.extents.pop_front();
        } else if let Some(front) = c.extents.front_mut() {
            front.0 = stop;
        }
        c.remaining -= stop - start;
        Work::Block {
            file: Arc::clone(&c.file),
            offset: start,
            len: (stop - start) as u32,
        }
    }
}

/// Waits on `cv` until `done` holds for the state or `timeout` passed; whether it holds.
fn wait_until(
    mut st: MutexGuard<'_, State>,
    cv: &Condvar,
    timeout: Duration,
    done: impl Fn(&State) -> bool,
) -> bool {
    let deadline = Instant::now() + timeout;
    while !done(&st) {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        st = cv
            .wait_timeout(st, left)
            .map(|(g, _)| g)
            .unwrap_or_else(|p| p.into_inner().0);
    }
    true
}

/// The parts of `extents` inside `ranges` (both sorted and disjoint).
fn intersect(extents: &[(u64, u64)], ranges: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < extents.len() && j < ranges.len() {
        let a = extents[i].0.max(ranges[j].0);
        let b = extents[i].1.min(ranges[j].1);
        if a < b {
            out.push((a, b));
        }
        if extents[i].1 < ranges[j].1 {
            i += 1;
        } else {
            j += 1;
        }
    }
    out
}

/// See [`WorkQueue::abort_on_panic`].
pub struct AbortOnPanic<'a>(&'a WorkQueue);

impl Drop for AbortOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Before the guard a stream that panicked left `wait_idle_for` false for ever (the
    /// block it had taken never finished) and the sender hung.
    #[test]
    fn a_worker_that_panics_aborts_the_queue() {
        let q = WorkQueue::new(1 << 20);
        q.push(1, data(4 << 20, vec![(0, 4 << 20)]), WantKind::All);
        std::thread::scope(|s| {
            let h = s.spawn(|| {
                let _aborts = q.abort_on_panic();
                let _held = q.next();
                panic!("a stream fails");
            });
            assert!(h.join().is_err());
        });
        assert!(q.is_aborted());
        assert!(q.wait_idle_for(Duration::from_millis(10)));
        // A worker that returns normally leaves the queue alone.
        let q = WorkQueue::new(1 << 20);
        drop(q.abort_on_panic());
        assert!(!q.is_aborted());
    }

    fn data(size: u64, extents: Vec<(u64, u64)>) -> FileData {
        let root = crate::plan::beneath::Root::by_path(PathBuf::new(), (0, 0));
        FileData {
            path: PathBuf::from("x"),
            at: Within {
                root: Arc::new(root),
                rel: PathBuf::from("x"),
            },
            size,
            extents,
            stamp: Stamp {
                inode: (0, 0),
                size,
                mtime: 0,
                ctime: 0,
            },
            dest: b"x".to_vec(),
            parent: None,
        }
    }

    #[test]
    fn intersect_ranges() {
        assert_eq!(
            intersect(&[(0, 10), (20, 30)], &[(5, 25), (28, 40)]),
            [(5, 10), (20, 25), (28, 30)]
        );
        assert_eq!(intersect(&[(0, 10)], &[]), []);
    }

    #[test]
    fn largest_first_and_aligned_blocks() {
        let q = WorkQueue::new(100);
        q.push(1, data(250, vec![(0, 250)]), WantKind::All);
        q.push(2, data(1000, vec![(50, 120), (700, 1000)]), WantKind::All);
        q.close();
        let mut got = Vec::new();
        while let Some(w) = q.next() {
            match w {
                Work::Block { file, offset, len } => got.push((file.id, offset, len)),
                Work::Pack(_) => panic!("no packs expected"),
            }
        }
        // File 2 has 370 data bytes, file 1 250: file 2 first, each block within one
        // block-size-aligned window.
        assert_eq!(got[0], (2, 50, 50));
        for (_, off, len) in &got {
            assert_eq!(off / 100, (off + u64::from(*len) - 1) / 100);
        }
        let total: u64 = got.iter().map(|g| u64::from(g.2)).sum();
        assert_eq!(total, 620);
        let mut f2: Vec<_> = got
            .iter()
            .filter(|g| g.0 == 2)
            .map(|g| (g.1, g.2))
            .collect();
        f2.sort();
        assert_eq!(
            f2,
            [(50, 50), (100, 20), (700, 100), (800, 100), (900, 100)]
        );
    }

    #[test]
    fn small_files_are_packed() {
        let q = WorkQueue::new(100);
        for id in 0..9 {
            q.push(id, data(20, vec![(0, 20)]), WantKind::All);
        }
        q.push(99, data(0, vec![]), WantKind::All);
        q.close();
        let mut packs = Vec::new();
        while let Some(w) = q.next() {
            match w {
                Work::Pack(p) => packs.push(p.iter().map(|f| f.id).collect::<Vec<_>>()),
                Work::Block { .. } => panic!("small files must be packed"),
            }
        }
        assert_eq!(packs.len(), 2);
        assert_eq!(packs.iter().map(Vec::len).sum::<usize>(), 9);
    }

    #[test]
    fn wait_room_seals_the_pack_and_waits_for_the_workers() {
        let q = Arc::new(WorkQueue::new(100));
        for id in 0..3 {
            q.push(id, data(20, vec![(0, 20)]), WantKind::All);
        }
        q.push(3, data(250, vec![(0, 250)]), WantKind::All);
        q.wait_room(5); // 4 queued: returns at once
        let q2 = Arc::clone(&q);
        let taker = std::thread::spawn(move || {
            let mut ids = Vec::new();
            // The pack of 3 (sealed by wait_room), then file 3 in three blocks.
            for _ in 0..4 {
                match q2.next() {
                    Some(Work::Pack(p)) => ids.extend(p.iter().map(|f| f.id)),
                    Some(Work::Block { file, .. }) => ids.push(file.id),
                    None => break,
                }
                q2.done();
            }
            ids
        });
        q.wait_room(1); // returns once every file was handed out
        let mut ids = taker.join().unwrap();
        ids.sort();
        assert_eq!(ids, [0, 1, 2, 3, 3, 3]);
        assert_eq!(q.lock().files, 0);
    }

    #[test]
    fn abort_wakes_waiting_workers() {
        let q = Arc::new(WorkQueue::new(100));
        let q2 = Arc::clone(&q);
        let t = std::thread::spawn(move || q2.next().is_none());
        std::thread::sleep(std::time::Duration::from_millis(20));
        q.abort();
        assert!(t.join().unwrap());
    }
}
