//! What the reading thread, the data streams and the driver of a pipe transfer share:
//! the blocks read (kept until the receiver has them) and the receiver's account of how
//! far the stream got, which is the credit the reader waits for.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};

use crate::codec::tree::{block_cv, BlockCv, TreeHash};

/// One block of the stream.
pub(super) struct Block {
    pub(super) offset: u64,
    pub(super) data: Vec<u8>,
    /// Its BLAKE3 chaining value (`codec::tree`), computed once by the first stream that
    /// sends it (see [`Block::cv`]).
    pub(super) hashed: OnceLock<BlockCv>,
    /// Where its buffer goes when the last holder (the replay buffer or a stream) drops it.
    pub(super) pool: Arc<Pool>,
    /// Queued to go out again and not yet taken by a stream: a second loss report (say,
    /// the next receiver's after the chain went on with it) does not queue it twice.
    pub(super) again: AtomicBool,
}

impl Block {
    pub(super) fn new(offset: u64, data: Vec<u8>, pool: Arc<Pool>) -> Block {
        Block {
            offset,
            data,
            hashed: OnceLock::new(),
            pool,
            again: AtomicBool::new(false),
        }
    }

    pub(super) fn end(&self) -> u64 {
        self.offset + self.data.len() as u64
    }

    /// Its BLAKE3 chaining value (`codec::tree`): what its unit hash covers and what the
    /// stream's BLAKE3 is merged from. Computed by whichever thread asks first (a data
    /// stream, about to send it), once: the others wait for that value.
    pub(super) fn cv(&self) -> BlockCv {
        *self
            .hashed
            .get_or_init(|| block_cv(self.offset, &self.data))
    }
}

impl Drop for Block {
    fn drop(&mut self) {
        self.pool.put(std::mem::take(&mut self.data));
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
    /// The stream's BLAKE3 merged from the blocks dropped from `replay`, in order.
    pub(super) tree: TreeHash,
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
                // Sent, so hashed already.
                g.tree.push(b.cv());
            }
        }
        self.have.store(have, Ordering::Release);
        drop(g);
        self.moved.notify_all();
    }

    /// The stream's BLAKE3, once every block was read: the blocks dropped already, then
    /// those still kept (hashing any no stream has sent yet). `first`: the first block's
    /// root hash, the stream's hash if it is that one block.
    pub(super) fn digest(&self, first: Option<[u8; 32]>) -> Option<[u8; 32]> {
        let (mut tree, kept) = {
            let g = self.lock();
            (g.tree.clone(), g.replay.iter().cloned().collect::<Vec<_>>())
        };
        for b in &kept {
            tree.push(b.cv());
        }
        if let Some(root) = first {
            tree.first_root(root);
        }
        tree.finish()
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
            let data = vec![0; size as usize];
            g.replay
                .push_back(Arc::new(Block::new(i * size, data, Arc::clone(pool))));
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

    /// The stream's BLAKE3 is merged from blocks dropped (acknowledged, hashed by the
    /// stream that sent them) and blocks still kept, some never hashed yet: it is the
    /// standard BLAKE3 of the bytes, for one block, several, and none.
    #[test]
    fn the_digest_merges_dropped_and_kept_blocks_in_order() {
        const B: usize = 64 << 10;
        for len in [0, 1, B, B + 1, 5 * B + 77] {
            let data: Vec<u8> = (0..len).map(|i| (i * 13 + i / 1000) as u8).collect();
            let (flow, pool) = (Flow::new(), Arc::new(Pool::new(16 * B as u64, B as u64)));
            {
                let mut g = flow.lock();
                for (k, c) in data.chunks(B).enumerate() {
                    let b = Block::new((k * B) as u64, c.to_vec(), Arc::clone(&pool));
                    if k % 2 == 0 {
                        b.cv(); // sent by a stream
                    }
                    g.replay.push_back(Arc::new(b));
                }
            }
            let first = data.chunks(B).next().map(|c| *blake3::hash(c).as_bytes());
            // The receiver has the first two blocks (the second not hashed before).
            let have = (2 * B).min(len) as u64;
            flow.ack(have, have, 16 * B as u64, 16 * B as u64);
            assert_eq!(flow.lock().tree.blocks(), have.div_ceil(B as u64));
            let got = flow.digest(first).unwrap();
            assert_eq!(got, *blake3::hash(&data).as_bytes(), "{len} bytes");
        }
    }
}
