//! The reorder window of a pipe receiver and the state its threads share: verified
//! blocks wait here, by offset, until the writer hands them to the consumer in order.
//! It holds no connection and does no I/O; recycled block buffers keep its memory bounded.

use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use super::slots::Slots;
use crate::codec::tree::BlockCv;
use crate::error::{Error, Result};
use crate::progress::Counters;
use crate::protocol::Codec;
use crate::receive::integrity::Forgeries;
use crate::session::stream::{Reorder, Span};
use crate::store::direct::ALIGN;

/// How often blocked reads wake to check whether the transfer is over.
pub(super) const TICK: Duration = Duration::from_millis(200);

/// The reorder window (its bookkeeping is the stream conversation's, `session::stream`).
pub(super) type Window = Reorder<Held>;

/// A verified block in the window: its bytes are `buf[range]` (a raw block stays in the
/// buffer its frame was read into, a compressed one is decompressed into a buffer of its
/// own), with its chaining value for the stream's hash.
pub(super) struct Held {
    pub(super) buf: Vec<u8>,
    pub(super) range: Range<usize>,
    pub(super) cv: BlockCv,
    /// A relay's copy of the compressed body the block arrived in (smaller than the
    /// block), so it goes on to the next hop as the sender compressed it.
    pub(super) packed: Option<Packed>,
}

/// A block's body as the sender compressed it: verified through the block it decodes to.
pub(super) struct Packed {
    pub(super) codec: Codec,
    pub(super) body: Vec<u8>,
}

impl Held {
    pub(super) fn bytes(&self) -> &[u8] {
        &self.buf[self.range.clone()]
    }
}

impl Span for Held {
    fn span(&self) -> u64 {
        self.range.len() as u64
    }
}

/// What the readers, the writer and the control loop share.
pub(super) struct Shared {
    pub(super) key: [u8; 32],
    pub(super) block: u64,
    pub(super) window: u64,
    /// A relay keeps each compressed body with its block (see [`Held::packed`]).
    pub(super) keep_packed: bool,
    pub(super) win: Mutex<Window>,
    /// Block buffers the writer is done with, for the readers to fill again.
    pub(super) spare: Mutex<Vec<Vec<u8>>>,
    pub(super) arrived: Condvar,
    /// A data connection broke since the control loop last looked.
    pub(super) lost: AtomicBool,
    /// When bytes last arrived on a data connection or went to the consumer (`now_ms`).
    pub(super) moved_ms: AtomicU64,
    /// The writer is inside a write to the consumer.
    pub(super) writing: AtomicBool,
    pub(super) abort: AtomicBool,
    pub(super) fatal: Mutex<Option<Error>>,
    pub(super) forged: Forgeries,
    /// Data connection slots (at most `slots.max()` readers that count).
    pub(super) slots: Slots,
    /// The clock the slots run on.
    pub(super) epoch: Instant,
    pub(super) data_conns: AtomicUsize,
    pub(super) control_conns: AtomicUsize,
    pub(super) last_activity: Mutex<Instant>,
    pub(super) counters: Arc<Counters>,
}

impl Shared {
    /// A receiver's state before any data connection arrived: blocks of `block` bytes
    /// verified with `key`, a reorder window of `window` bytes, `slots` reader slots, the
    /// one control connection that started it.
    pub(super) fn new(
        key: [u8; 32],
        block: u64,
        window: u64,
        keep_packed: bool,
        forged: Forgeries,
        slots: usize,
        counters: Arc<Counters>,
    ) -> Shared {
        Shared {
            key,
            block,
            window,
            keep_packed,
            win: Mutex::new(Window::default()),
            spare: Mutex::new(Vec::new()),
            arrived: Condvar::new(),
            lost: AtomicBool::new(false),
            moved_ms: AtomicU64::new(0),
            writing: AtomicBool::new(false),
            abort: AtomicBool::new(false),
            fatal: Mutex::new(None),
            forged,
            slots: Slots::new(slots),
            epoch: Instant::now(),
            data_conns: AtomicUsize::new(0),
            control_conns: AtomicUsize::new(1),
            last_activity: Mutex::new(Instant::now()),
            counters,
        }
    }

    /// Key zero, blocks of `block` bytes, a window of 16 of them, `slots` reader slots,
    /// a relay's packed bodies kept: for unit tests.
    #[cfg(test)]
    pub(super) fn for_tests(block: u64, slots: usize) -> Arc<Shared> {
        let forged = Forgeries::starting_at(0);
        let counters = Arc::default();
        Arc::new(Shared::new(
            [0; 32],
            block,
            16 * block,
            true,
            forged,
            slots,
            counters,
        ))
    }

    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, Window> {
        self.win.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn touch(&self) {
        if let Ok(mut t) = self.last_activity.lock() {
            *t = Instant::now();
        }
    }

    /// Milliseconds since the receiver started: the slots' clock.
    pub(super) fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    pub(super) fn idle_for(&self) -> Duration {
        self.last_activity
            .lock()
            .map(|t| t.elapsed())
            .unwrap_or_default()
    }

    pub(super) fn fail(&self, e: Error) {
        if let Ok(mut f) = self.fatal.lock() {
            f.get_or_insert(e);
        }
        self.abort.store(true, Ordering::Release);
        self.arrived.notify_all();
    }

    pub(super) fn take_fatal(&self) -> Option<Error> {
        self.fatal.lock().ok().and_then(|mut f| f.take())
    }

    /// A block buffer to decode into: a recycled one (its old bytes still in it) or a new
    /// one with room for a block.
    ///
    /// Recycling is what bounds memory, not tidiness: each reader thread allocates from
    /// its own malloc arena and the writer frees into it, so with fresh buffers every
    /// arena keeps as much of the window resident as it ever held (8 streams with the
    /// default window peaked at 164 MiB, against ~110 MiB with one arena).
    pub(super) fn buffer(&self) -> Vec<u8> {
        let spare = self.spare.lock().ok().and_then(|mut s| s.pop());
        // Room for a block decoded at its aligned start, or for a raw block's whole frame
        // placed so that its bytes are aligned (`FrameReader::align_payloads`).
        spare.unwrap_or_else(|| Vec::with_capacity(self.block as usize + 2 * ALIGN))
    }

    /// Keeps `v` for [`Shared::buffer`], up to what a full window needs.
    pub(super) fn recycle(&self, v: Vec<u8>) {
        if let Ok(mut s) = self.spare.lock() {
            // A full window, and the buffer each data reader is filling; twice that
            // where each block may also keep its compressed body.
            let mut cap = self.window / self.block + 1 + self.slots.max() as u64;
            if self.keep_packed {
                cap *= 2;
            }
            if (s.len() as u64) < cap {
                s.push(v);
            }
        }
    }

    /// Gives back every buffer of a block the receiver is done with.
    pub(super) fn recycle_held(&self, held: Held) {
        if let Some(p) = held.packed {
            self.recycle(p.body);
        }
        self.recycle(held.buf);
    }

    /// Bytes arrived or went to the consumer just now (what a stall is the absence of).
    pub(super) fn moved(&self) {
        self.moved_ms.fetch_max(self.now_ms(), Ordering::Relaxed);
    }

    /// Takes one verified block; duplicates are dropped, a block outside the window or
    /// past the announced end is the sender breaking the protocol.
    pub(super) fn insert(&self, offset: u64, held: Held) -> Result<()> {
        let mut w = self.lock();
        match w.insert(offset, held, self.window, self.block) {
            Ok(None) => {
                drop(w);
                self.arrived.notify_all();
                Ok(())
            }
            Ok(Some(dup)) => {
                drop(w);
                self.recycle_held(dup);
                Ok(())
            }
            Err(e) => Err(Error::from(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::aligned_start;

    #[test]
    fn a_block_decoded_at_its_aligned_start_is_aligned_and_stays_put() {
        for (mut buf, len) in [
            (Vec::new(), 64 << 10),
            (Vec::with_capacity(100), 5000),
            (vec![3u8; 70_000], 64 << 10),
        ] {
            let at = aligned_start(&mut buf, len);
            let before = buf.as_ptr();
            assert!(at < ALIGN);
            assert!(buf.capacity() >= at + len);
            buf.resize(at + len, 0);
            assert_eq!(buf.as_ptr(), before, "the buffer did not move");
            assert_eq!(buf[at..].as_ptr().align_offset(ALIGN), 0);
            // Recycled for the next block: the same start, nothing moves.
            assert_eq!(aligned_start(&mut buf, len), at);
            assert_eq!(buf.as_ptr(), before);
        }
    }
}
