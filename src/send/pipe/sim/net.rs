//! The simulator's randomness and network: a seeded generator, and a connection that
//! delivers frames in order after a latency until it is cut.

use std::collections::VecDeque;

/// splitmix64: small, seedable, the same on every machine.
pub(in crate::send) struct Rng(pub(in crate::send) u64);

impl Rng {
    pub(in crate::send) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// In `lo..=hi`.
    pub(in crate::send) fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }
    pub(in crate::send) fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

/// One simulated TCP connection, either direction's frames in order.
pub(in crate::send) struct Wire<M> {
    /// Frames on their way: (arrives at, frame).
    pub(in crate::send) frames: VecDeque<(u64, M)>,
    /// Cut at this time: undelivered frames are gone, later writes vanish.
    pub(in crate::send) cut: Option<u64>,
    /// From when a write on it fails at the writer (its reset arrived).
    write_fails: u64,
    /// When the reader sees it broken.
    read_fails: u64,
    /// Closed by the writer then: what it wrote still arrives, then the reader sees the end.
    closed: Option<u64>,
}

impl<M> Default for Wire<M> {
    fn default() -> Self {
        Wire {
            frames: VecDeque::new(),
            cut: None,
            write_fails: 0,
            read_fails: 0,
            closed: None,
        }
    }
}

impl<M> Wire<M> {
    pub(in crate::send) fn cut_at(&mut self, now: u64, rng: &mut Rng) {
        if self.cut.is_none() {
            self.cut = Some(now);
            self.frames.clear();
            // The side that was cut may learn late; its peer learns at its next write.
            self.write_fails = now + rng.range(0, 300);
            self.read_fails = now + rng.range(0, 300);
        }
    }
    /// Writes `m`; false when the writer sees the connection broken.
    pub(in crate::send) fn write(&mut self, now: u64, latency: u64, m: M) -> bool {
        match self.cut {
            Some(_) if now >= self.write_fails => false,
            // Written into a connection already dead: accepted, never delivered.
            Some(_) => true,
            None => {
                self.frames.push_back((now + latency, m));
                true
            }
        }
    }
    pub(in crate::send) fn arrived(&mut self, now: u64) -> Option<M> {
        match self.frames.front() {
            Some((at, _)) if *at <= now && self.cut.is_none() => {
                self.frames.pop_front().map(|f| f.1)
            }
            _ => None,
        }
    }
    pub(in crate::send) fn read_broken(&self, now: u64) -> bool {
        (self.cut.is_some() && now >= self.read_fails)
            || (self.closed.is_some_and(|c| now >= c) && self.frames.is_empty())
    }
    /// The writer closes it (its process ended): frames on their way still arrive.
    pub(in crate::send) fn close(&mut self, now: u64) {
        self.closed.get_or_insert(now);
    }
}

/// Runs `run` on every seed and fails naming each seed that failed (all of them: each is a
/// regression test to keep) and the first one's reason.
pub(in crate::send) fn check_seeds(
    seeds: impl IntoIterator<Item = u64>,
    run: impl Fn(u64) -> Result<(), String>,
) {
    let mut of = 0u64;
    let failed: Vec<(u64, String)> = seeds
        .into_iter()
        .inspect(|_| of += 1)
        .filter_map(|seed| run(seed).err().map(|e| (seed, e)))
        .collect();
    assert!(
        failed.is_empty(),
        "{} of {of} seeds failed: {:?}; the first: {}",
        failed.len(),
        failed.iter().map(|f| f.0).collect::<Vec<_>>(),
        failed[0].1
    );
}

/// A soak's seeds: `HAUL_SIM_SEEDS` of them (default 100,000), beyond the CI seeds.
pub(in crate::send) fn soak_seeds() -> std::ops::Range<u64> {
    let n: u64 = std::env::var("HAUL_SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100_000);
    (1 << 32)..(1 << 32) + n
}
