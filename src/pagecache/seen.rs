//! What the streams reading one file saw of its page cache first.
//!
//! Several streams read blocks of one big file at once, each noting residency just before
//! its own read. A page that one stream's read brought in (the kernel's readahead past its
//! range, see the module above) then looks cached to the stream that reads it next, which
//! would keep it: the page stays in the cache although nobody had it there before the run.
//! So the streams share, per file they have open, the pages that were **not** cached when
//! any of them first looked: a page once seen cold counts as brought in by this run,
//! whoever reads it and whatever the cache says by then.
//!
//! Memory: one entry per file some stream has open (at most one per stream), freed when
//! the last of them moves on; each holds runs of cold pages, which merge as the blocks
//! are read, and at most [`MAX_RUNS`] of them (a file cached in a scattered pattern past
//! that is noted per range only, as a single stream would).

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

/// Cold runs kept per file: 16 bytes each, so at most 4 MiB per open file.
pub const MAX_RUNS: usize = 1 << 18;

/// The cold pages of the files the streams of one transfer are reading.
#[derive(Debug, Default)]
pub struct Seen {
    files: Mutex<HashMap<u64, Entry>>,
}

/// One file's entry.
#[derive(Debug, Default)]
struct Entry {
    /// Streams that have it open.
    readers: usize,
    cold: Runs,
}

impl Seen {
    /// A stream starts reading file `id`.
    pub(super) fn enter(&self, id: u64) {
        if let Ok(mut files) = self.files.lock() {
            files.entry(id).or_default().readers += 1;
        }
    }

    /// A stream is done with file `id`; the entry goes with its last reader.
    pub(super) fn leave(&self, id: u64) {
        if let Ok(mut files) = self.files.lock() {
            if let Some(f) = files.get_mut(&id) {
                f.readers = f.readers.saturating_sub(1);
                if f.readers == 0 {
                    files.remove(&id);
                }
            }
        }
    }

    /// Merges what a stream just noted of file `id` from page `first` on (`resident`: one
    /// byte per page, bit 0 set when cached) with what was seen before: pages noted cold
    /// now are remembered, pages remembered cold are cleared in `resident`.
    pub(super) fn merge(&self, id: u64, first: u64, resident: &mut [u8]) {
        let Ok(mut files) = self.files.lock() else {
            return;
        };
        let Some(f) = files.get_mut(&id) else {
            return;
        };
        let mut i = 0;
        while i < resident.len() {
            let run = resident[i..].iter().take_while(|r| *r & 1 == 0).count();
            if run > 0 && f.cold.0.len() < MAX_RUNS {
                f.cold.insert(first + i as u64, first + (i + run) as u64);
            }
            i += run;
            i += resident[i..].iter().take_while(|r| *r & 1 != 0).count();
        }
        f.cold.clear(first, resident);
    }
}

/// Page runs `[start, end)`, disjoint and not touching, by start.
#[derive(Debug, Default)]
struct Runs(BTreeMap<u64, u64>);

impl Runs {
    fn insert(&mut self, mut start: u64, mut end: u64) {
        if let Some((&s, &e)) = self.0.range(..=start).next_back() {
            if e >= start {
                start = s;
                end = end.max(e);
            }
        }
        let inside: Vec<u64> = self.0.range(start..=end).map(|(s, _)| *s).collect();
        for s in inside {
            if let Some(e) = self.0.remove(&s) {
                end = end.max(e);
            }
        }
        self.0.insert(start, end);
    }

    /// Clears bit 0 of each byte of `pages` (page `first` on) that lies in a run.
    fn clear(&self, first: u64, pages: &mut [u8]) {
        let last = first + pages.len() as u64;
        let from = match self.0.range(..=first).next_back() {
            Some((&s, &e)) if e > first => s,
            _ => first,
        };
        for (&s, &e) in self.0.range(from..last) {
            let a = s.max(first) - first;
            let b = e.min(last) - first;
            for p in &mut pages[a as usize..b as usize] {
                *p &= !1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn cold_of(r: &Runs, first: u64, n: usize) -> Vec<bool> {
        let mut v = vec![1u8; n];
        r.clear(first, &mut v);
        v.iter().map(|b| b & 1 == 0).collect()
    }

    proptest! {
        /// Runs behave as the set of pages inserted: disjoint, not touching, and a page
        /// is cleared exactly when some inserted run holds it.
        #[test]
        fn runs_are_the_set_of_pages_inserted(
            ins in proptest::collection::vec((0u64..200, 1u64..40), 0..30),
            first in 0u64..150,
        ) {
            let mut r = Runs::default();
            let mut set = std::collections::BTreeSet::new();
            for (s, len) in ins {
                r.insert(s, s + len);
                set.extend(s..s + len);
            }
            let mut prev_end = None;
            for (&s, &e) in &r.0 {
                prop_assert!(s < e);
                if let Some(p) = prev_end {
                    prop_assert!(s > p, "runs touch or overlap");
                }
                prev_end = Some(e);
            }
            let got = cold_of(&r, first, 100);
            for (i, c) in got.iter().enumerate() {
                prop_assert_eq!(*c, set.contains(&(first + i as u64)), "page {}", first + i as u64);
            }
        }
    }

    #[test]
    fn a_page_once_seen_cold_stays_cold_for_every_stream_until_the_last_leaves() {
        let seen = Seen::default();
        seen.enter(7);
        seen.enter(7);
        // The first stream sees pages 10..20 cold.
        let mut a = vec![0u8; 10];
        seen.merge(7, 10, &mut a);
        assert!(a.iter().all(|b| b & 1 == 0));
        // The second finds 15..25 cached now: 15..20 were brought in by the run.
        let mut b = vec![1u8; 10];
        seen.merge(7, 15, &mut b);
        assert_eq!(b, [0, 0, 0, 0, 0, 1, 1, 1, 1, 1]);
        // Another file is unaffected; a file nobody entered remembers nothing.
        let mut c = vec![1u8; 10];
        seen.merge(8, 15, &mut c);
        assert_eq!(c, [1; 10]);
        seen.leave(7);
        let mut d = vec![1u8; 10];
        seen.merge(7, 15, &mut d);
        assert_eq!(d[0], 0, "one reader still has the file");
        seen.leave(7);
        assert!(seen.files.lock().unwrap().is_empty());
    }
}
