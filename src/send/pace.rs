//! The bandwidth cap (`--limit`): one token bucket shared by every data stream of a
//! sender, on the bytes of frames put on the wire, changeable while the transfer runs
//! (`haul limit`, through [`control`]).
//!
//! Each frame pays for its bytes before it is written, first come, first served: a take
//! reserves its bytes behind every byte reserved before it and returns once the cap has
//! paid for them, sleeping in slices short enough that a new rate takes effect at once.
//! So with N streams taking 4 MiB units, one unit goes every 4 MiB ÷ rate, not N units
//! together every N × 4 MiB ÷ rate (which made any 10 s window at 8 MiB/s carry 5 or 6
//! bursts of 16 MiB: up to 17% over the cap). Credit for idle time is at most 50 ms of
//! traffic (at least 64 KiB), so a stream idle for a while cannot burst far above the
//! cap, and the average over any few seconds stays on it. No crate does exactly this
//! (the governor crate counts cells, not bytes, and cannot pay for a 4 MiB frame at
//! 1 MB/s), and it is a few lines.

pub mod control;

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::progress::Counters;
use crate::transport::{Gate, Pay};

/// Longest single sleep, so that a rate changed meanwhile applies within this.
const SLICE: Duration = Duration::from_millis(50);

/// A sender's bandwidth cap. The rate lives in `counters.limit` (0: none), where the
/// progress line reads it.
pub struct Pacer {
    counters: Arc<Counters>,
    bucket: Mutex<Bucket>,
}

/// Cumulative byte counts: what the cap has paid for and what takes have reserved.
#[derive(Debug)]
struct Bucket {
    /// Bytes the cap has paid for since the start (at most `burst` ahead of `reserved`).
    paid: f64,
    /// Bytes reserved by every take so far.
    reserved: f64,
    last: Instant,
}

impl Bucket {
    /// Nothing paid or reserved yet, counted from `now`.
    fn new(now: Instant) -> Bucket {
        Bucket {
            paid: 0.0,
            reserved: 0.0,
            last: now,
        }
    }

    /// Pays for the time since the last call at `rate`; credit for idle time is bounded.
    fn refill(&mut self, now: Instant, rate: u64) {
        let burst = (rate as f64 / 20.0).max(65536.0);
        let earned = now.saturating_duration_since(self.last).as_secs_f64() * rate as f64;
        self.paid = (self.paid + earned).min(self.reserved + burst);
        self.last = now;
    }

    /// Reserves `n` bytes behind everything reserved before: the mark `paid` must reach.
    fn reserve(&mut self, n: usize, now: Instant, rate: u64) -> f64 {
        self.refill(now, rate);
        self.reserved += n as f64;
        self.reserved
    }

    /// How long until `mark` is paid at `rate` (zero when it is).
    fn wait(&mut self, mark: f64, now: Instant, rate: u64) -> Duration {
        self.refill(now, rate);
        let owed = mark - self.paid;
        if owed <= 0.0 {
            return Duration::ZERO;
        }
        Duration::from_secs_f64(owed / rate as f64)
    }
}

impl std::fmt::Debug for Pacer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Pacer({:?})", self.rate())
    }
}

impl Pacer {
    /// A cap of `rate` bytes per second (`None`: none until one is set).
    pub fn new(counters: Arc<Counters>, rate: Option<u64>) -> Pacer {
        let p = Pacer {
            counters,
            bucket: Mutex::new(Bucket::new(Instant::now())),
        };
        p.set(rate);
        p
    }

    /// Changes the cap (`None` or 0: none). Lifting it forgives what the streams waiting
    /// then owed (they go at once), so a cap set again later starts from no debt.
    pub fn set(&self, rate: Option<u64>) {
        let rate = rate.unwrap_or(0);
        if rate == 0 {
            let mut b = self.bucket();
            b.paid = b.reserved;
        }
        self.counters.limit.store(rate, Ordering::Relaxed);
    }

    /// The cap now.
    pub fn rate(&self) -> Option<u64> {
        match self.counters.limit.load(Ordering::Relaxed) {
            0 => None,
            r => Some(r),
        }
    }

    /// Under a cap, the gate a frame's write goes through: each piece of 50 ms of traffic
    /// at the cap now (16 KiB to 4 MiB) paid for before it goes, so a 4 MiB frame under a
    /// low cap trickles out at the cap instead of leaving in one burst after one payment
    /// (see `transport::Gate`). `None`: no cap.
    pub fn gate(&self) -> Option<Gate<'_>> {
        self.gate_paying(self)
    }

    /// [`Pacer::gate`] whose pieces are paid through `pay` (which must call
    /// [`Pacer::take`]): for a caller that also counts them as they go.
    pub fn gate_paying<'a>(&self, pay: &'a dyn Pay) -> Option<Gate<'a>> {
        self.rate()
            .map(|r| Gate::new((r / 20).clamp(16 << 10, 4 << 20) as usize, pay))
    }

    /// Pays for `n` bytes about to go on the wire: returns at once under no cap,
    /// otherwise when the cap has paid for them and for every byte taken before them.
    pub fn take(&self, n: usize) {
        let Some(rate) = self.rate() else {
            return;
        };
        let mark = self.bucket().reserve(n, Instant::now(), rate);
        loop {
            let Some(rate) = self.rate() else {
                return;
            };
            let wait = self.bucket().wait(mark, Instant::now(), rate);
            if wait.is_zero() {
                return;
            }
            std::thread::sleep(wait.min(SLICE));
        }
    }

    fn bucket(&self) -> std::sync::MutexGuard<'_, Bucket> {
        self.bucket.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Pay for Pacer {
    fn pay(&self, n: usize) {
        self.take(n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_cap_never_waits() {
        let p = Pacer::new(Arc::default(), None);
        let t = Instant::now();
        for _ in 0..1000 {
            p.take(64 << 20);
        }
        assert!(t.elapsed() < Duration::from_secs(1));
    }

    #[test]
    fn a_cap_spreads_bytes_over_time_and_can_be_lifted() {
        let c: Arc<Counters> = Arc::default();
        let p = Arc::new(Pacer::new(Arc::clone(&c), Some(4 << 20)));
        assert_eq!(c.limit.load(Ordering::Relaxed), 4 << 20);
        let t = Instant::now();
        // 2 MiB beyond the first burst at 4 MiB/s: about half a second, from two threads.
        std::thread::scope(|s| {
            for _ in 0..2 {
                let p = &p;
                s.spawn(move || {
                    for _ in 0..8 {
                        p.take(128 << 10);
                    }
                });
            }
        });
        let e = t.elapsed();
        assert!(e >= Duration::from_millis(350), "{e:?}");
        // A stream deep in debt (16 s at this cap) is released when the cap goes.
        let q = Arc::clone(&p);
        let h = std::thread::spawn(move || q.take(64 << 20));
        std::thread::sleep(Duration::from_millis(100));
        p.set(None);
        h.join().unwrap();
    }

    #[test]
    fn streams_go_one_after_another_not_all_when_everyone_is_paid() {
        // Four streams reserve a 4 MiB unit each at the same instant, at 8 MiB/s: the
        // first is paid after about half a second (less the idle credit), the fourth
        // after two; they do not all wait the two seconds and go together.
        let t0 = Instant::now();
        let rate = 8 << 20;
        let mut b = Bucket::new(t0);
        let marks: Vec<f64> = (0..4).map(|_| b.reserve(4 << 20, t0, rate)).collect();
        let waits: Vec<f64> = marks
            .iter()
            .map(|&m| b.wait(m, t0, rate).as_secs_f64())
            .collect();
        for (i, w) in waits.iter().enumerate() {
            let due = (i + 1) as f64 * 0.5;
            assert!((w - due).abs() < 0.01, "stream {i} waits {w} s, due {due}");
        }
        // Half a second later the first is paid and the second is half a second away.
        let t1 = t0 + Duration::from_millis(500);
        assert_eq!(b.wait(marks[0], t1, rate), Duration::ZERO);
        let w = b.wait(marks[1], t1, rate).as_secs_f64();
        assert!((w - 0.5).abs() < 0.01, "{w}");
    }

    #[test]
    fn idle_time_earns_at_most_the_burst() {
        let t0 = Instant::now();
        let rate = 1 << 20;
        let mut b = Bucket::new(t0);
        // An hour idle: still only 64 KiB (the floor of 50 ms of traffic) go at once.
        let later = t0 + Duration::from_secs(3600);
        let m = b.reserve(64 << 10, later, rate);
        assert_eq!(b.wait(m, later, rate), Duration::ZERO);
        let m = b.reserve(1 << 20, later, rate);
        let w = b.wait(m, later, rate).as_secs_f64();
        assert!((w - 1.0).abs() < 0.01, "{w}");
    }
}
