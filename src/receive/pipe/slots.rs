//! A pipe receiver's data connection slots: at most `streams + 4` readers at once. When
//! every slot is taken, a new connection takes the slot of the one that has carried
//! nothing longest, if that one has been silent for [`STALE`]: such a connection belongs
//! to a sender or hop that vanished without closing it (a network partition), and holding
//! its slot would refuse the connections of whoever feeds this receiver now (the hop
//! before a failed one, after the chain re-formed). Its reader ends at its next tick, as
//! for a broken connection. No I/O and no clock here: callers pass the time.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// How long a connection must have carried nothing before a new one may take its slot
/// (milliseconds): well above a busy sender's gaps between frames, below the 10 s after
/// which a relay counts its next hop as gone.
pub(super) const STALE: u64 = 5_000;

/// One reader's slot.
#[derive(Debug)]
pub(super) struct Slot {
    /// When its connection last carried bytes (milliseconds on the caller's clock).
    heard: AtomicU64,
    /// A newer connection took this slot: the reader ends.
    evicted: AtomicBool,
}

impl Slot {
    /// Its connection carried bytes at `now`.
    pub(super) fn heard(&self, now: u64) {
        self.heard.store(now, Ordering::Relaxed);
    }

    /// When its connection last carried anything.
    #[cfg(test)]
    pub(super) fn heard_at(&self) -> u64 {
        self.heard.load(Ordering::Relaxed)
    }

    /// Whether a newer connection took this slot.
    pub(super) fn evicted(&self) -> bool {
        self.evicted.load(Ordering::Acquire)
    }
}

/// The slots of one receiver.
#[derive(Debug)]
pub(super) struct Slots {
    max: usize,
    taken: Mutex<Vec<Arc<Slot>>>,
}

impl Slots {
    /// At most `max` readers whose slot was not taken over.
    pub(super) fn new(max: usize) -> Slots {
        Slots {
            max,
            taken: Mutex::new(Vec::new()),
        }
    }

    /// How many readers count at most.
    pub(super) fn max(&self) -> usize {
        self.max
    }

    /// A slot for a connection arriving at `now`: a free one, or that of the connection
    /// silent longest if it has been silent for [`STALE`]; None when every slot is busy.
    pub(super) fn take(&self, now: u64) -> Option<Arc<Slot>> {
        let mut taken = self.taken.lock().unwrap_or_else(|p| p.into_inner());
        let live = taken.iter().filter(|s| !s.evicted()).count();
        if live >= self.max {
            let oldest = taken
                .iter()
                .filter(|s| !s.evicted())
                .min_by_key(|s| s.heard.load(Ordering::Relaxed))?;
            if now.saturating_sub(oldest.heard.load(Ordering::Relaxed)) < STALE {
                return None;
            }
            oldest.evicted.store(true, Ordering::Release);
        }
        let slot = Arc::new(Slot {
            heard: AtomicU64::new(now),
            evicted: AtomicBool::new(false),
        });
        taken.push(Arc::clone(&slot));
        Some(slot)
    }

    /// The reader of `slot` ended.
    pub(super) fn free(&self, slot: &Arc<Slot>) {
        let mut taken = self.taken.lock().unwrap_or_else(|p| p.into_inner());
        taken.retain(|s| !Arc::ptr_eq(s, slot));
    }

    /// Readers running now (those whose slot was taken over included, until they end).
    #[cfg(test)]
    fn running(&self) -> usize {
        self.taken.lock().map(|t| t.len()).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_slots_refuse_a_connection_beyond_the_bound() {
        let slots = Slots::new(2);
        let a = slots.take(0).unwrap();
        let _b = slots.take(0).unwrap();
        a.heard(1_000);
        assert!(
            slots.take(STALE - 1).is_none(),
            "neither is silent long enough"
        );
        slots.free(&a);
        assert!(slots.take(STALE - 1).is_some(), "a freed slot is taken");
    }

    #[test]
    fn a_connection_silent_long_enough_gives_its_slot_to_a_new_one() {
        let slots = Slots::new(2);
        let (a, b) = (slots.take(0).unwrap(), slots.take(0).unwrap());
        a.heard(1_000);
        let c = slots.take(STALE + 500).expect("b has been silent since 0");
        assert!(b.evicted() && !a.evicted() && !c.evicted());
        assert!(
            slots.take(STALE + 500).is_none(),
            "a spoke at 1 s; c just came"
        );
        let d = slots.take(STALE + 1_000).expect("now a is stale too");
        assert!(a.evicted() && !d.evicted());
        // The bound holds for live readers; the evicted ones only until they end.
        assert_eq!(slots.running(), 4);
        slots.free(&a);
        slots.free(&b);
        assert_eq!(slots.running(), 2);
        assert!(slots.take(STALE + 1_000).is_none());
    }
}
