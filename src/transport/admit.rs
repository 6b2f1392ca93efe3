//! Which unauthenticated connections the listener lets run their handshake, and what it
//! says about the ones it turns away.
//!
//! A handshake costs a thread until it ends or its deadline passes, so their number is
//! capped, in all and per source (an IPv4 address, or an IPv6 /64, which one attacker
//! usually holds whole). When a cap is reached the newcomer is not refused: the oldest
//! handshake that has not sent a byte yet is evicted instead (failing that, the oldest of
//! all), taken from the newcomer's own source when that source is at its cap, otherwise
//! from the source holding the most. A real dialer speaks within a round trip of
//! connecting, so a flood of silent or slow sockets, even from the dialer's own address,
//! only ever pushes out older flood sockets; and one source cannot push out another's.
//!
//! [`RejectLog`] keeps the listener's stderr bounded under a flood: a few lines per window,
//! then one line with how many more were refused.
//!
//! Not here: sockets or threads (the caller shuts down what is evicted), the handshake.

use std::net::IpAddr;
use std::time::{Duration, Instant};

/// Handshakes running at once, in all.
pub(super) const MAX_PENDING: usize = 256;
/// Handshakes running at once from one source: above the most connections one sender
/// opens at once (64 data streams and the control stream), well below `MAX_PENDING`.
pub(super) const MAX_PER_SOURCE: usize = 80;
/// How long each window of [`RejectLog`] lasts (the summary line says "10 s").
pub(super) const LOG_WINDOW: Duration = Duration::from_secs(10);
/// Refusals logged one by one per window; the rest are only counted.
const LOG_LINES_PER_WINDOW: u32 = 5;

/// Where a connection comes from, for the per-source cap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Source(IpAddr);

impl Source {
    /// The source of a peer address: IPv4 (also when mapped into IPv6) as is, IPv6 by /64.
    pub(super) fn of(ip: IpAddr) -> Source {
        match ip.to_canonical() {
            IpAddr::V6(a) => {
                let s = a.segments();
                Source(IpAddr::from([s[0], s[1], s[2], s[3], 0, 0, 0, 0]))
            }
            v4 => Source(v4),
        }
    }
}

struct Entry<T> {
    id: u64,
    source: Source,
    started: Instant,
    talking: bool,
    handle: T,
}

/// The handshakes now running, each with a handle (a socket clone) to end it by.
pub(super) struct Admission<T> {
    entries: Vec<Entry<T>>,
    next_id: u64,
}

/// A handshake that was admitted, and the one evicted to make room (its handle).
pub(super) struct Admitted<T> {
    /// The newcomer's id, for [`Admission::talking`] and [`Admission::remove`].
    pub id: u64,
    /// The evicted handshake's handle; the caller ends it.
    pub evicted: Option<T>,
}

impl<T> Admission<T> {
    /// An empty table.
    pub(super) fn new() -> Admission<T> {
        Admission {
            entries: Vec::new(),
            next_id: 0,
        }
    }

    /// Admits a newcomer from `source` at `now`, evicting one handshake if a cap is reached.
    pub(super) fn admit(&mut self, source: Source, now: Instant, handle: T) -> Admitted<T> {
        let own = self.count(source);
        let victim_source = if own >= MAX_PER_SOURCE {
            Some(source)
        } else if self.entries.len() >= MAX_PENDING {
            self.biggest_source()
        } else {
            None
        };
        let evicted = victim_source
            .and_then(|s| self.victim(s))
            .map(|i| self.entries.swap_remove(i).handle);
        let id = self.next_id;
        self.next_id += 1;
        self.entries.push(Entry {
            id,
            source,
            started: now,
            talking: false,
            handle,
        });
        Admitted { id, evicted }
    }

    /// Notes that handshake `id` received its first bytes.
    pub(super) fn talking(&mut self, id: u64) {
        if let Some(e) = self.entries.iter_mut().find(|e| e.id == id) {
            e.talking = true;
        }
    }

    /// Removes handshake `id` when it ends; `false` if it was evicted before.
    pub(super) fn remove(&mut self, id: u64) -> bool {
        match self.entries.iter().position(|e| e.id == id) {
            Some(i) => {
                self.entries.swap_remove(i);
                true
            }
            None => false,
        }
    }

    /// How many handshakes run now.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries.len()
    }

    fn count(&self, source: Source) -> usize {
        self.entries.iter().filter(|e| e.source == source).count()
    }

    fn biggest_source(&self) -> Option<Source> {
        self.entries
            .iter()
            .map(|e| (self.count(e.source), e.source))
            .max_by_key(|(n, _)| *n)
            .map(|(_, s)| s)
    }

    /// The index of `source`'s handshake to evict: the oldest silent one, else the oldest.
    fn victim(&self, source: Source) -> Option<usize> {
        self.entries
            .iter()
            .enumerate()
            .filter(|(_, e)| e.source == source)
            .min_by_key(|(_, e)| (e.talking, e.started, e.id))
            .map(|(i, _)| i)
    }
}

/// Rate-limits the listener's "rejected connection" lines.
pub(super) struct RejectLog {
    window: Instant,
    shown: u32,
    hidden: u64,
}

impl RejectLog {
    /// A log whose first window starts at `now`.
    pub(super) fn new(now: Instant) -> RejectLog {
        RejectLog {
            window: now,
            shown: 0,
            hidden: 0,
        }
    }

    /// Counts one refusal; `true` when it should be printed on its own line.
    pub(super) fn note(&mut self) -> bool {
        if self.shown < LOG_LINES_PER_WINDOW {
            self.shown += 1;
            true
        } else {
            self.hidden += 1;
            false
        }
    }

    /// At the end of a window (checked at `now`): how many refusals were not printed in it,
    /// if any, for one summary line. Starts the next window.
    pub(super) fn poll_summary(&mut self, now: Instant) -> Option<u64> {
        if now.saturating_duration_since(self.window) < LOG_WINDOW {
            return None;
        }
        self.window = now;
        self.shown = 0;
        Some(std::mem::take(&mut self.hidden)).filter(|&n| n > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn src(s: &str) -> Source {
        Source::of(s.parse().unwrap())
    }

    #[test]
    fn sources_group_ipv6_by_64_and_unmap_ipv4() {
        assert_eq!(src("2001:db8:1:2::5"), src("2001:db8:1:2:ffff::9"));
        assert_ne!(src("2001:db8:1:2::5"), src("2001:db8:1:3::5"));
        assert_eq!(src("::ffff:10.0.0.1"), src("10.0.0.1"));
        assert_ne!(src("10.0.0.1"), src("10.0.0.2"));
    }

    #[test]
    fn a_full_source_evicts_its_oldest_silent_handshake() {
        let mut a = Admission::new();
        let t0 = Instant::now();
        let s = src("127.0.0.1");
        let first = a.admit(s, t0, 0usize).id;
        a.talking(first);
        for i in 1..MAX_PER_SOURCE {
            assert!(a
                .admit(s, t0 + Duration::from_millis(i as u64), i)
                .evicted
                .is_none());
        }
        // Handle 0 is talking, so the oldest silent one (1) goes, then 2.
        let late = t0 + Duration::from_secs(1);
        assert_eq!(a.admit(s, late, 1000).evicted, Some(1));
        assert_eq!(a.admit(s, late, 1001).evicted, Some(2));
        assert_eq!(a.len(), MAX_PER_SOURCE);
        assert!(a.remove(first));
        assert!(!a.remove(first));
    }

    #[test]
    fn a_full_table_evicts_from_the_biggest_source_only() {
        let mut a = Admission::new();
        let t0 = Instant::now();
        let quiet = src("10.0.0.9");
        a.admit(quiet, t0, usize::MAX);
        let mut n = 0;
        'fill: for host in 1..=u8::MAX {
            for _ in 0..MAX_PER_SOURCE - usize::from(host == 1) {
                if a.len() == MAX_PENDING {
                    break 'fill;
                }
                a.admit(src(&format!("10.0.1.{host}")), t0, n);
                n += 1;
            }
        }
        assert_eq!(a.len(), MAX_PENDING);
        // The newcomer from a fresh source pushes out one of a biggest source's, never
        // `quiet`'s only one.
        let got = a.admit(src("10.0.2.1"), t0, 5000).evicted;
        assert!(got.is_some_and(|h| h < n), "{got:?}");
        assert_eq!(a.count(quiet), 1);
    }

    #[test]
    fn the_log_shows_a_few_lines_then_a_summary() {
        let t0 = Instant::now();
        let mut log = RejectLog::new(t0);
        let shown = (0..100).filter(|_| log.note()).count();
        assert_eq!(shown, LOG_LINES_PER_WINDOW as usize);
        assert_eq!(log.poll_summary(t0 + Duration::from_secs(1)), None);
        let end = t0 + LOG_WINDOW;
        assert_eq!(log.poll_summary(end), Some(100 - shown as u64));
        assert!(log.note());
        assert_eq!(log.poll_summary(end + LOG_WINDOW), None);
    }
}
