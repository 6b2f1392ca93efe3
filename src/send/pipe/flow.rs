//! What the reading thread, the data streams and the driver of a pipe transfer share:
//! the blocks read (kept until the receiver has them) and the receiver's account of how
//! far the stream got, which is the credit the reader waits for.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use crate::codec::tree::BlockCv;

/// One block of the stream.
pub(super) struct Block {
    pub(super) offset: u64,
    pub(super) data: Vec<u8>,
    /// Its BLAKE3 chaining value (`codec::tree`): what its unit hash covers.
    pub(super) cv: BlockCv,
    /// Where its buffer goes when the last holder (the replay buffer or a stream) drops it.
    pub(super) pool: Arc<Pool>,
    /// Queued to go out again and not yet taken by a stream: a second loss report (say,
    /// the next receiver's after the chain went on with it) does not queue it twice.
    pub(super) again: AtomicBool,
}

impl Block {
    pub(super) fn end(&self) -> u64 {
        self.offset + self.data.len() as u64
    }
}

impl Drop for Block {
    fn drop(&mut self) {
        self.pool.put(std::mem::take(&mut self.data));
    }
}

/// The blocks one data stream wrote on its current connection that may not have arrived
/// yet: sent again first on the next connection, should this one break.
#[derive(Default)]
pub(super) struct InFlight(VecDeque<Arc<Block>>);

impl InFlight {
    /// `b` was written; what the receiver has (every byte before `have`) is let go.
    pub(super) fn wrote(&mut self, b: Arc<Block>, have: u64) {
        self.0.push_back(b);
        self.0.retain(|o| o.end() > have);
    }

    /// What to send again on a new connection (the receiver has every byte before `have`).
    pub(super) fn replay(&mut self, have: u64) -> Vec<Arc<Block>> {
        self.0.retain(|o| o.end() > have);
        self.0.iter().cloned().collect()
    }

    /// The receiver this was for is no longer fed (a chain went on without it).
    pub(super) fn clear(&mut self) {
        self.0.clear();
    }
}

/// Block buffers to fill again. Reusing them spares the reader an allocation and a
/// zero-fill of every block, and keeps the window's memory in one place.
pub(super) struct Pool {
    spare: Mutex<Vec<Vec<u8>>>,
    /// Most buffers kept: a full window's worth and a few in flight.
    keep: usize,
}

impl Pool {
    pub(super) fn new(window: u64, block: u64) -> Pool {
        Pool {
            spare: Mutex::new(Vec::new()),
            keep: (window / block.max(1)) as usize + 4,
        }
    }

    /// A buffer of `len` bytes; a recycled one keeps its old contents (to be overwritten).
    pub(super) fn take(&self, len: usize) -> Vec<u8> {
        let spare = self.spare.lock().ok().and_then(|mut s| s.pop());
        let mut v = spare.unwrap_or_default();
        v.resize(len, 0);
        v
    }

    fn put(&self, v: Vec<u8>) {
        if v.capacity() == 0 {
            return;
        }
        if let Ok(mut s) = self.spare.lock() {
            if s.len() < self.keep {
                s.push(v);
            }
        }
    }
}

/// What the reader, the streams and the driver share.
pub(super) struct Flow {
    pub(super) state: Mutex<FlowState>,
    pub(super) moved: Condvar,
    /// Bytes arrived at the receiver without a gap (mirrors `state.have`, read lock-free).
    pub(super) have: AtomicU64,
    /// The transfer is over (mirrors `state.stop`).
    pub(super) stopped: AtomicBool,
}

#[derive(Default)]
pub(super) struct FlowState {
    /// Bytes with the consumer.
    pub(super) written: u64,
    pub(super) have: u64,
    /// Bytes that may be in flight beyond `written`; 0 until the receiver said.
    pub(super) window: u64,
    /// Bytes read from the input.
    pub(super) read: u64,
    /// Blocks read and not yet known to have arrived, in offset order.
    pub(super) replay: VecDeque<Arc<Block>>,
    /// Every byte before this was dropped from `replay` (the receiver had it).
    pub(super) pruned: u64,
    pub(super) stop: bool,
}

impl Flow {
    pub(super) fn new() -> Flow {
        Flow {
            state: Mutex::new(FlowState::default()),
            moved: Condvar::new(),
            have: AtomicU64::new(0),
            stopped: AtomicBool::new(false),
        }
    }

    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, FlowState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The receiver's account: prune what arrived, let the reader go on.
    pub(super) fn ack(&self, written: u64, have: u64, window: u64, own: u64) {
        let mut g = self.lock();
        g.written = g.written.max(written);
        g.have = g.have.max(have);
        self.account(g, window, own);
    }

    /// The first account of a receiver the chain went on with (its predecessor reported
    /// no more than it has, so nothing it lacks was pruned): where it stands replaces
    /// what the one before said. False, changing nothing, when it lacks bytes no longer
    /// kept (it would get a gap).
    pub(super) fn take_over(&self, written: u64, have: u64, window: u64, own: u64) -> bool {
        let mut g = self.lock();
        if have < g.pruned {
            return false;
        }
        (g.written, g.have) = (written, have);
        self.account(g, window, own);
        true
    }

    /// The first byte still kept for a receiver the chain may go on with.
    pub(super) fn kept_from(&self) -> u64 {
        self.lock().pruned
    }

    fn account(&self, mut g: std::sync::MutexGuard<'_, FlowState>, window: u64, own: u64) {
        g.window = window.min(own);
        let have = g.have;
        while g.replay.front().is_some_and(|b| b.end() <= have) {
            if let Some(b) = g.replay.pop_front() {
                g.pruned = b.end();
            }
        }
        self.have.store(have, Ordering::Release);
        drop(g);
        self.moved.notify_all();
    }

    /// The receiver's `StreamLost`: every kept block from `have` on that is not among
    /// `got` (sorted) and not already queued to go out again, now marked as queued.
    pub(super) fn lost_since(&self, have: u64, got: &[u64]) -> Vec<Arc<Block>> {
        let g = self.lock();
        g.replay
            .iter()
            .filter(|b| b.end() > have && got.binary_search(&b.offset).is_err())
            .filter(|b| !b.again.swap(true, Ordering::AcqRel))
            .cloned()
            .collect()
    }

    pub(super) fn stop(&self) {
        self.lock().stop = true;
        self.stopped.store(true, Ordering::Release);
        self.moved.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(flow: &Flow, pool: &Arc<Pool>, blocks: u64, size: u64) {
        let mut g = flow.lock();
        for i in 0..blocks {
            g.replay.push_back(Arc::new(Block {
                offset: i * size,
                data: vec![0; size as usize],
                cv: crate::codec::tree::block_cv(i * size, &vec![0; size as usize]),
                pool: Arc::clone(pool),
                again: AtomicBool::new(false),
            }));
        }
        g.read = blocks * size;
    }

    #[test]
    fn the_next_receiver_takes_over_from_its_own_have_if_nothing_it_lacks_was_pruned() {
        const B: u64 = 64 << 10;
        let (flow, pool) = (Flow::new(), Arc::new(Pool::new(16 * B, B)));
        read(&flow, &pool, 8, B);
        // The first receiver acknowledged the chain's minimum: 3 blocks.
        flow.ack(3 * B, 3 * B, 8 * B, 8 * B);
        assert_eq!(flow.kept_from(), 3 * B);
        assert_eq!(flow.lock().replay.len(), 5);
        // The receiver after it had more: it takes over from there.
        assert!(flow.take_over(4 * B, 5 * B, 4 * B, 8 * B));
        let g = flow.lock();
        assert_eq!((g.written, g.have, g.window), (4 * B, 5 * B, 4 * B));
        assert_eq!(g.replay.front().map(|b| b.offset), Some(5 * B));
        drop(g);
        // One that lacks what is no longer kept fails instead of getting a gap.
        assert!(!flow.take_over(B, 2 * B, 4 * B, 8 * B));
        assert_eq!(flow.lock().have, 5 * B, "unchanged");
    }
}
