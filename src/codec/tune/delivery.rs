//! What TCP's delivery samples say a wire byte costs a stream, and whether it was the
//! link that paced them (see `codec::tune`'s *what the link costs*). Pure: it takes the
//! samples the tuner hands it.
//!
//! A delivery sample that was not app-limited (the stream had more to send) says the
//! rate something other than the stream let its bytes through: the link, the receiver,
//! or the cores both ends share. Only the link's rate is a price per wire byte. Where the
//! cores pace the writes (both ends on 2 saturated cores, the pg set unshaped), the same
//! busy samples say what the cores let through per unit: 15 ns per wire byte at lz4, 1.3
//! at none (a trace of auto11's), a rate that follows the level because the cores' work
//! is mostly per raw byte. Where the link paces them (the same cores behind 1 Gbit/s), a
//! wire byte took 37-46 ns at lz4 and at zstd:1 alike. So the samples are kept per level
//! the unit went at, in seconds per wire byte and per raw byte: the level pair measured
//! furthest apart in ratio tells which of the two stays put (`Delivery::link_paced`).
//!
//! Not here: the split of a write between the link, the receiver and the cores (the
//! tuner's `held`), which says how much of a sample to count.

use super::mean::{Mean, KEEP, LEVELS};

/// Weighted samples a level needs before it counts as evidence of what paces the writes
/// (units' worth: one busy sample is about a round trip, and a stream's samples jitter).
const EVIDENCE: f64 = 3.0;
/// The least spread in ratio (output per raw byte, as a factor) between two levels for
/// their delivery rates to tell the link from the cores apart: lz4 and zstd:1 on the pg
/// set are 2.3 apart, zstd:1 and zstd:3 1.1 (too close for a sample's noise).
const SPREAD: f64 = 1.3;

/// One level's busy delivery samples: decaying sums of the seconds they say the unit's
/// wire bytes took, the wire bytes, the raw bytes, and the (weighted) samples.
#[derive(Debug, Clone, Copy, Default)]
struct Paced {
    secs: f64,
    wire: f64,
    raw: f64,
    n: f64,
}

impl Paced {
    fn add(&mut self, secs: f64, wire: f64, raw: f64, weight: f64) {
        self.secs = self.secs * KEEP + secs * weight;
        self.wire = self.wire * KEEP + wire * weight;
        self.raw = self.raw * KEEP + raw * weight;
        self.n = self.n * KEEP + weight;
    }

    /// Seconds per wire byte and output bytes per raw byte, once there is evidence.
    fn get(&self) -> Option<(f64, f64)> {
        (self.n >= EVIDENCE && self.wire > 0.0 && self.raw > 0.0 && self.secs > 0.0)
            .then(|| (self.secs / self.wire, self.wire / self.raw))
    }
}

/// A stream's delivery samples.
#[derive(Debug, Clone)]
pub(super) struct Delivery {
    /// Seconds per wire byte at TCP's delivery rate, from samples that were not
    /// app-limited, each counted for the share of its write that waited for the link.
    link: Mean,
    /// The running share of delivery samples that were not app-limited (0 to 1), so
    /// weighted.
    bound: f64,
    /// Busy samples per level, counted for the share of the write that did not wait for
    /// the receiver.
    paced: [Paced; LEVELS],
}

impl Delivery {
    pub(super) fn new() -> Delivery {
        Delivery {
            link: Mean::new(0.0),
            bound: 0.0,
            paced: [Paced::default(); LEVELS],
        }
    }

    /// Learns from one sample after a write of `wire` bytes (`raw` before compression) at
    /// `level`, taken at `rate` wire bytes per second, `busy` when not app-limited: it
    /// counts towards what paces the writes for `open` (the share of the write that did
    /// not wait for the receiver), and towards the link's price for `weight`.
    pub(super) fn learn(
        &mut self,
        level: usize,
        (wire, raw): (usize, usize),
        rate: f64,
        busy: bool,
        (open, weight): (f64, f64),
    ) {
        let busy = busy && rate > 0.0;
        if busy && open > 0.0 && wire > 0 && level < LEVELS {
            let wire = wire as f64;
            self.paced[level].add(wire / rate, wire, raw as f64, open);
        }
        let limited = if busy { weight.max(0.0) } else { 0.0 };
        self.bound = self.bound * KEEP + limited * (1.0 - KEEP);
        if limited > 0.0 && wire > 0 {
            let w = wire as f64 * limited;
            self.link.add(w / rate, w, KEEP);
        }
    }

    /// Seconds a wire byte costs, given what the stream's writes took per wire byte
    /// (`wire`): the delivery rate blended in by the share of samples that were busy.
    pub(super) fn wire_cost(&self, wire: f64) -> f64 {
        wire + self.bound * (self.link.get() - wire).max(0.0)
    }

    /// How far the link, not the cores, paces the busy samples, 0 to 1: 1 where two
    /// levels' samples cost the same per wire byte, 0 where they cost the same per raw
    /// byte (the wire rate moved with the ratio), and 0 until two levels whose ratios are
    /// at least `SPREAD` apart have evidence. Between them, by where the seconds per wire
    /// byte fall on a log scale from the one to the other.
    pub(super) fn link_paced(&self) -> f64 {
        let got: Vec<(f64, f64)> = self.paced.iter().filter_map(Paced::get).collect();
        let mut best: Option<(f64, f64)> = None;
        for (i, &(wi, qi)) in got.iter().enumerate() {
            for &(wj, qj) in &got[i + 1..] {
                // Index the pair so that `q` grows from i to j: core-paced, `w` falls
                // by the same factor; link-paced, it stays.
                let spread = (qj / qi).ln();
                if spread.abs() < SPREAD.ln() {
                    continue;
                }
                let fell = (wi / wj).ln();
                let x = fell / spread;
                if best.is_none_or(|(s, _)| spread.abs() > s) {
                    best = Some((spread.abs(), x));
                }
            }
        }
        best.map_or(0.0, |(_, x)| (1.0 - x).clamp(0.0, 1.0))
    }
}
