//! The bandwidth cap (`--limit`): one token bucket shared by every data stream of a
//! sender, on the bytes of frames put on the wire, changeable while the transfer runs
//! (`haul limit`, through [`control`]).
//!
//! Each frame pays for its bytes before it is written; a stream in debt sleeps until the
//! bucket has refilled, in slices short enough that a new rate takes effect at once. The
//! bucket holds at most 50 ms of traffic (at least 64 KiB), so a stream idle for a while
//! cannot burst far above the cap, and the average over any few seconds stays on it.
//! No crate does exactly this (the governor crate counts cells, not bytes, and cannot
//! pay for a 4 MiB frame at 1 MB/s), and it is twenty lines.

pub mod control;

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::progress::Counters;

/// Longest single sleep, so that a rate changed meanwhile applies within this.
const SLICE: Duration = Duration::from_millis(50);

/// A sender's bandwidth cap. The rate lives in `counters.limit` (0: none), where the
/// progress line reads it.
pub struct Pacer {
    counters: Arc<Counters>,
    bucket: Mutex<Bucket>,
}

struct Bucket {
    /// Bytes that may go now; negative when in debt.
    tokens: f64,
    last: Instant,
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
            bucket: Mutex::new(Bucket {
                tokens: 0.0,
                last: Instant::now(),
            }),
        };
        p.set(rate);
        p
    }

    /// Changes the cap (`None` or 0: none).
    pub fn set(&self, rate: Option<u64>) {
        self.counters
            .limit
            .store(rate.unwrap_or(0), Ordering::Relaxed);
    }

    /// The cap now.
    pub fn rate(&self) -> Option<u64> {
        match self.counters.limit.load(Ordering::Relaxed) {
            0 => None,
            r => Some(r),
        }
    }

    /// Pays for `n` bytes about to go on the wire: returns at once under no cap,
    /// otherwise when the cap allows them.
    pub fn take(&self, n: usize) {
        let Some(rate) = self.rate() else {
            return;
        };
        let mut b = self.bucket.lock().unwrap_or_else(|p| p.into_inner());
        refill(&mut b, rate);
        b.tokens -= n as f64;
        drop(b);
        loop {
            let Some(rate) = self.rate() else {
                return;
            };
            let mut b = self.bucket.lock().unwrap_or_else(|p| p.into_inner());
            refill(&mut b, rate);
            if b.tokens >= 0.0 {
                return;
            }
            let wait = Duration::from_secs_f64(-b.tokens / rate as f64).min(SLICE);
            drop(b);
            std::thread::sleep(wait);
        }
    }
}

fn refill(b: &mut Bucket, rate: u64) {
    let now = Instant::now();
    let burst = (rate as f64 / 20.0).max(65536.0);
    b.tokens = (b.tokens + now.duration_since(b.last).as_secs_f64() * rate as f64).min(burst);
    b.last = now;
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
}
