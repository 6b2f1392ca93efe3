//! Who gets what in a plan of shards: fpart's idea, largest first into the lightest
//! shard. Every walked entry is held as a compact record (its path in one shared byte
//! arena), so a plan of millions of entries costs about 40 bytes plus its path each.
//!
//! A shard's weight is its data bytes plus [`PER_ENTRY`] for each entry, so shards come
//! out balanced by bytes and by count: a task's time is roughly its bytes over the
//! bandwidth plus a fixed cost per file created. All names of one multiply-linked file
//! form one unit and go to one shard (the receiver can only link names it has), and
//! ties are broken by walk order, so the same tree always gives the same plan.
//!
//! Not here: the walk and the files (`cmd`), the file format (`shard`).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use super::shard::Kind;

/// What an entry weighs beyond its data: haul's measured per-file cost (create, fsync,
/// rename) is of the order of moving this many bytes.
pub const PER_ENTRY: u64 = 64 << 10;

/// One walked entry.
#[derive(Clone, Copy, Debug)]
struct Rec {
    /// Its path inside its source: `arena[off..off + len]`.
    off: u64,
    len: u32,
    source: u32,
    kind: Kind,
    /// Size in bytes (regular files).
    size: u64,
    /// Its unit's weight (on the unit's first record only).
    cost: u64,
    /// The shard it goes to; until [`Plan::assign`], for a hardlink, the index of the
    /// record of the name it links to.
    shard: u32,
}

/// Every entry of a plan, in walk order.
#[derive(Debug, Default)]
pub struct Plan {
    arena: Vec<u8>,
    recs: Vec<Rec>,
    /// Hardlinks waiting for their target's record: (their record, target's transfer path).
    links: Vec<(u32, Vec<u8>)>,
    /// Each source's own transfer path (the part before the path inside it).
    prefixes: HashMap<u32, Vec<u8>>,
}

/// A walked entry, as [`Plan::push`] takes it.
#[derive(Debug, Clone)]
pub struct Found<'a> {
    /// Which source.
    pub source: u32,
    /// Its transfer path, of which the first `base` bytes name its source (`prefix/`).
    pub rel: &'a [u8],
    /// Where the path inside the source starts in `rel`.
    pub base: usize,
    /// What it is.
    pub kind: Kind,
    /// Size (regular files).
    pub size: u64,
    /// Data bytes (holes excluded): what moving it costs.
    pub data: u64,
    /// For a hardlink: the transfer path of the name it is another link of.
    pub link_to: Option<Vec<u8>>,
}

/// One entry as the plan sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry<'a> {
    /// What it is.
    pub kind: Kind,
    /// Size (regular files; 0 for anything else, hardlinks included).
    pub size: u64,
    /// Which source.
    pub source: u32,
    /// Its path inside the source.
    pub path: &'a [u8],
}

impl Plan {
    /// Adds a walked entry.
    pub fn push(&mut self, f: Found<'_>) {
        let Found {
            source,
            rel,
            base,
            kind,
            size,
            data,
            link_to,
        } = f;
        let inside = rel.get(base..).unwrap_or_default();
        self.prefixes.entry(source).or_insert_with(|| {
            rel.get(..base.saturating_sub(1))
                .unwrap_or_default()
                .to_vec()
        });
        let index = self.recs.len() as u32;
        if let Some(target) = link_to {
            self.links.push((index, target));
        }
        self.recs.push(Rec {
            off: self.arena.len() as u64,
            len: inside.len() as u32,
            source,
            kind,
            size: if kind == Kind::File { size } else { 0 },
            cost: data.saturating_add(PER_ENTRY),
            shard: u32::MAX,
        });
        self.arena.extend_from_slice(inside);
    }

    /// How many entries.
    pub fn len(&self) -> usize {
        self.recs.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.recs.is_empty()
    }

    /// Bytes of memory the plan holds (for the report).
    pub fn memory(&self) -> usize {
        self.arena.capacity() + self.recs.capacity() * std::mem::size_of::<Rec>()
    }

    /// Splits the entries into `shards` shards (at least 1): each hardlink joins its
    /// target's unit, then units go largest first to the lightest shard (weight, then
    /// entries, then index). Returns each shard's (entries, bytes).
    pub fn assign(&mut self, shards: u32) -> Vec<(u64, u64)> {
        let shards = shards.max(1);
        self.join_links();
        let mut order: Vec<u32> = (0..self.recs.len() as u32)
            .filter(|&i| self.recs[i as usize].shard == u32::MAX)
            .collect();
        order.sort_by_key(|&i| (Reverse(self.recs[i as usize].cost), i));
        let mut heap: BinaryHeap<Reverse<(u64, u64, u32)>> =
            (0..shards).map(|s| Reverse((0, 0, s))).collect();
        for i in order {
            let Some(Reverse((weight, entries, s))) = heap.pop() else {
                break;
            };
            let r = &mut self.recs[i as usize];
            r.shard = s;
            heap.push(Reverse((weight.saturating_add(r.cost), entries + 1, s)));
        }
        let mut totals = vec![(0u64, 0u64); shards as usize];
        for i in 0..self.recs.len() {
            let r = self.recs[i];
            let shard = match r.kind {
                // Its target's shard (targets come first in walk order and are assigned).
                Kind::Hardlink => self.recs[r.shard as usize].shard,
                _ => r.shard,
            };
            self.recs[i].shard = shard;
            let t = &mut totals[shard as usize];
            t.0 += 1;
            t.1 += r.size;
        }
        totals
    }

    /// Marks each hardlink with its target's record and adds its entry to the target's
    /// weight. A hardlink whose target is not in the plan (cannot happen: the walk sends
    /// a file's first name as the file) stays a unit of its own.
    fn join_links(&mut self) {
        let mut wanted: HashMap<Vec<u8>, Vec<u32>> = HashMap::new();
        for (i, target) in std::mem::take(&mut self.links) {
            wanted.entry(target).or_default().push(i);
        }
        if wanted.is_empty() {
            return;
        }
        let mut full = Vec::new();
        for t in 0..self.recs.len() {
            let r = self.recs[t];
            if r.kind != Kind::File {
                continue;
            }
            full.clear();
            if let Some(p) = self.prefixes.get(&r.source) {
                full.extend_from_slice(p);
            }
            let inside = &self.arena[r.off as usize..r.off as usize + r.len as usize];
            if !full.is_empty() && !inside.is_empty() {
                full.push(b'/');
            }
            full.extend_from_slice(inside);
            if let Some(links) = wanted.remove(full.as_slice()) {
                for l in links {
                    self.recs[l as usize].shard = t as u32;
                    let cost = &mut self.recs[t].cost;
                    *cost = cost.saturating_add(PER_ENTRY);
                }
            }
        }
    }

    /// The entries of shard `s`, in walk order (after [`Plan::assign`]).
    pub fn shard(&self, s: u32) -> impl Iterator<Item = Entry<'_>> {
        self.recs
            .iter()
            .filter(move |r| r.shard == s)
            .map(|r| Entry {
                kind: r.kind,
                size: r.size,
                source: r.source,
                path: &self.arena[r.off as usize..r.off as usize + r.len as usize],
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(
        source: u32,
        rel: &[u8],
        base: usize,
        kind: Kind,
        size: u64,
        data: u64,
        link_to: Option<Vec<u8>>,
    ) -> Found<'_> {
        Found {
            source,
            rel,
            base,
            kind,
            size,
            data,
            link_to,
        }
    }

    fn weights(p: &Plan, shards: u32) -> Vec<u64> {
        (0..shards)
            .map(|s| p.shard(s).map(|e| e.size + PER_ENTRY).sum())
            .collect()
    }

    #[test]
    fn largest_first_into_the_lightest() {
        let mut p = Plan::default();
        p.push(f(0, b"t", 0, Kind::Dir, 0, 0, None));
        for (i, size) in [100u64 << 20, 60 << 20, 50 << 20, 40 << 20, 10 << 20]
            .iter()
            .enumerate()
        {
            let name = format!("t/f{i}");
            p.push(f(0, name.as_bytes(), 2, Kind::File, *size, *size, None));
        }
        let totals = p.assign(2);
        // 100 | 60+50, then 40 to the 100 side, 10 to the 110 side: 140 / 120.
        assert_eq!(totals.iter().map(|t| t.0).sum::<u64>(), 6);
        let w = weights(&p, 2);
        let (hi, lo) = (w[0].max(w[1]), w[0].min(w[1]));
        assert!(hi - lo <= (20 << 20) + 2 * PER_ENTRY, "{w:?}");
    }

    #[test]
    fn many_small_files_balance_by_count() {
        let mut p = Plan::default();
        p.push(f(0, b"", 0, Kind::Dir, 0, 0, None));
        p.push(f(0, b"big", 0, Kind::File, 1 << 30, 1 << 30, None));
        for i in 0..700 {
            let name = format!("small{i}");
            p.push(f(0, name.as_bytes(), 0, Kind::File, 0, 0, None));
        }
        let totals = p.assign(8);
        // The big file's shard gets nothing else; the other 7 share 700 small ones.
        let mut counts: Vec<u64> = totals.iter().map(|t| t.0).collect();
        counts.sort();
        assert_eq!(counts[0], 1, "{totals:?}");
        assert!(
            counts[1..].iter().all(|&c| c == 100 || c == 101),
            "{totals:?}"
        );
    }

    #[test]
    fn hardlinks_stay_with_their_target_and_results_are_deterministic() {
        let build = || {
            let mut p = Plan::default();
            p.push(f(0, b"t", 2, Kind::Dir, 0, 0, None));
            p.push(f(0, b"t/a", 2, Kind::File, 5, 5, None));
            for i in 0..20 {
                let name = format!("t/x{i}");
                p.push(f(0, name.as_bytes(), 2, Kind::File, 7, 7, None));
            }
            p.push(f(
                0,
                b"t/z/l1",
                2,
                Kind::Hardlink,
                0,
                0,
                Some(b"t/a".to_vec()),
            ));
            p.push(f(
                0,
                b"t/z/l2",
                2,
                Kind::Hardlink,
                0,
                0,
                Some(b"t/a".to_vec()),
            ));
            p.assign(4);
            p
        };
        let p = build();
        let home = (0..4)
            .find(|&s| p.shard(s).any(|e| e.path == b"a"))
            .unwrap();
        let names: Vec<&[u8]> = p.shard(home).map(|e| e.path).collect();
        assert!(names.contains(&&b"z/l1"[..]) && names.contains(&&b"z/l2"[..]));
        let again = build();
        for s in 0..4 {
            assert!(p.shard(s).eq(again.shard(s)));
        }
        assert_eq!((0..4).map(|s| p.shard(s).count()).sum::<usize>(), 24);
    }
}
