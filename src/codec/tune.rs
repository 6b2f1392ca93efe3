//! The adaptive codec's controller (`--compress auto`, the default across a network): for
//! one data stream, chooses the codec of each unit from what the stream measured on the
//! units before it. Pure: it takes byte counts and durations and returns a choice; the
//! encoder reads the clock.
//!
//! The model. A stream handles one unit at a time: it compresses it, then writes it (the
//! write includes TLS, waiting for room in the socket, and any `--limit` pacing). Per raw
//! byte at level `L` that is `a = cpu[L]` of compression and `b = ratio[L] * wire + recv`
//! of writing, where `ratio[L]` is output/input, `wire` the time the stream spends
//! writing one byte on the wire, and `recv` the time per raw byte its writes waited for
//! the receiver (below). A slow link or a cap makes `wire` large, and more compression
//! pays; slow compression makes `cpu[L]` large, and less pays. Incompressible data makes
//! every ratio 1 (units that do not shrink 3% go
//! raw), so `none` wins. `cpu[L]` is the thread's CPU time (`codec::clock`: a wall-clock
//! unit of a few ms was often preempted for a whole time slice, and levels timed at
//! different moments were compared on that noise); the write is wall time, so contention
//! from the other streams and other processes shows there. Hashing the unit's raw bytes
//! is not in the write (it costs the same at every level).
//!
//! What compression costs. CPU time leaves out what contention adds: on saturated cores
//! a unit's compression waits for a core too, and the write's wall time, which carries
//! that wait, was weighed against compression's bare CPU time (compressing looked cheap
//! exactly where the cores were the limit). So each unit's compression is also timed in
//! wall time, and `stretch`, the running Σwall ÷ ΣCPU over many units (smooth where one
//! unit's wall time is not), multiplies every level's `cpu[L]` alike.
//!
//! One stream alone pays `a + b`. With `n` streams, one compresses while others write,
//! and the resource that limits the transfer hides most of the other's cost; the
//! predicted cost is `max(a, b) + min(a, b) / n`. (The plain sum undervalued compression
//! on a shared slow link: when streams compress harder, fewer of them write at once and
//! each write gets more of the link, which a per-stream `wire` cannot foresee; measured
//! with the sum, a 100 Mbit/s run on a busy machine sent 188 of 827 units with lz4 and
//! 27 raw.)
//!
//! Exploration. Every `interval` units the stream also compresses the unit's first 512
//! KiB with another level and with the current one, and learns that level's cost and its
//! ratio relative to the current level's; the unit still goes at the current level.
//! Probes alternate up and down, every other one in a direction skipping a level (not
//! from `none`): on a pg index zstd:3 sends 1% less than zstd:1 and zstd:6 20% less, and
//! neighbours alone never got past the one to the other. A probe that changes nothing
//! doubles the interval (8 up to 64 units); a switch, or a current ratio that moved by a
//! fifth since the last probe, resets it. Only measured levels are chosen: priors stood
//! against measurements (zstd:6's 0.35 against lz4's 1.0 on random data).
//!
//! Ratios. Levels are measured on different bytes (a probe's slice, units sent before the
//! data changed; the pg set's units shrink to 95 KB in one table, 600-940 KB in the next):
//! compared as measured, a level last seen on harder data looked worse than it is
//! (throttled to 100 Mbit/s, streams sat on zstd:1 where zstd:3 was faster). So when the
//! current level's ratio moves, every other measured level's moves by the same factor.
//! When a probe finds its level's ratio or cost off the estimate, the data changed: the
//! other levels' old measurements count for little and are no candidates until measured
//! again (`Tuner::forget`; docs/design.md, *Data that changes under a stream*).
//!
//! What the link costs. `wire` alone misleads where the link is the limit: a write into
//! a socket buffer with room returns at once and the next one waits, so on a slow link
//! shared with busy cores a unit's write time per byte swings tenfold, and the more a
//! stream compresses the less its writes wait (the link drained meanwhile), which makes
//! compressing look less worth it the more it is done (measured: streams stepped down to
//! lz4, whose larger output then filled the link). So each unit also brings TCP's own
//! delivery-rate sample of the stream's connection ([`LinkSample`], `TCP_INFO`), which
//! says whether the stream was short of data while it was taken (`app_limited`: the link
//! had room) or not (the network or the receiver was the limit, and `1 / rate` is what
//! each wire byte costs whatever the level). `bound`, the running share of samples that
//! were not app-limited, blends the two: the cost of a wire byte is `wire` plus `bound`
//! times what the delivery rate says beyond it. Without samples (a tunnel, a local
//! pair) `wire` is used alone.
//!
//! What the receiver costs. A write also waits when the receiver does not keep up
//! (writing durably, decrypting, hashing, on cores it may share with us): its window
//! fills and the kernel counts the time as receive-window-limited (`tcpi_rwnd_limited`,
//! [`LinkSample::rwnd`]). That wait is per RAW byte, the same at every level (the
//! receiver writes the same bytes whatever crossed the wire), so it must not scale with
//! the ratio: charged to wire bytes, as before, it made a wire byte look dear on a fast
//! link to a slow disk and sent streams to zstd:3, spending the sender's CPU on the
//! receiver's shared cores for 6% fewer bytes. So each write is split by the running
//! share of write time that was rwnd-limited: that part goes into `recv` (seconds per
//! raw byte, added to `b` at every level), the rest (the link's and TLS's) into `wire`;
//! and a delivery sample counts as link-bound only for the rest. One part of the receiver's
//! work does follow the wire bytes: it decrypts and copies each of them. Where the
//! receiver is the limit, a level that sends more would make it slower, which nothing
//! measured at the current level shows (on loopback `none` looks free: no compression,
//! writes as fast as TLS); so a level's `recv` moves by `RECV_WIRE` per wire byte it
//! sends more or less than the current level, weighted by the share of the write time
//! that was the receiver's. And where the receiver is the limit, the sender's compression
//! does not hide behind it when both ends share cores (the test bed; a sender beside
//! its receiver): the predicted cost blends the overlapped `max + min / n` into the
//! plain sum `a + b` by that share. Measured before the blend (pg set, unshaped, load
//! 6–9): the streams' writes waited 45–68% of their busy time for the receiver, auto
//! stayed mostly on zstd:1 (235 MB on the wire), where lz4's cheaper compression would
//! have left the receiver more CPU (lz4 5.21 s, auto 6.27, zstd:1 7.86: medians of 3).
//! On separate hosts the levels then take the same time and the blend picks the one
//! that spends the least CPU, the polite choice.
//!
//! Saturated cores. Where the cores are the limit (both ends on one machine, the pg set
//! unshaped: `stretch` 1.5 or more), a write also waits for CPU: the receiver, both ends'
//! network stacks and the other streams run on the same cores. That wait is not the
//! link's, and it is not per wire byte: charged to wire bytes, it made each one look as
//! dear as the whole unit's time divided by the unit's few wire bytes, the more so the
//! harder the stream compressed, and kept the streams on zstd:1 where lz4 spends the
//! least CPU in all (quiet: lz4 3.26 s, zstd:1 3.84, auto 3.98). TCP's delivery samples
//! say the same wrong thing there (the rate is what the cores let through), unless the
//! link paces them whatever the cores (at 1 Gbit/s, lz4's output fills it): two levels'
//! busy samples tell which ([`delivery`]), and the cores discount them only so far.
//! So of each write, beside the receiver's window share, a part goes to `recv` too:
//! the write times the saturation (0 at `stretch` 1, 1 from `SATURATED`), but at most
//! `CORE_WAIT` times the unit's compression wall time, so that a slow link on a machine
//! busy with other work, whose writes wait far longer than any compression, still counts
//! as the link.
//! The running share of write time that went to `recv` this way or the receiver's
//! (`held`) then weighs what the other levels would cost the shared cores: the
//! receiver's decryption per wire byte more or less, its decompression per level
//! (`DECOMP`: lz4 ~0.15 ns per raw byte, zstd ~0.45), and the sender's TLS per wire byte
//! for the cores' part; all stretched like compression; and it blends the overlapped
//! `max + min / n` into the plain sum. On a quiet machine behind a slow link `stretch`
//! stays near 1 and none of this applies.
//!
//! Not here: the stream's own reading (the same for every level).

use std::time::Duration;

use super::mode::Compression;
use delivery::Delivery;
use mean::{Mean, KEEP, LEVELS};

mod delivery;
mod mean;

/// The levels the controller chooses among, cheapest first.
pub const LADDER: [Compression; LEVELS] = [
    Compression::None,
    Compression::Lz4,
    Compression::Zstd(1),
    Compression::Zstd(3),
    Compression::Zstd(6),
];

/// Where a stream starts: lz4, the cheapest level that still compresses. Where the cores
/// are the limit it is the best level, and a stream that started at zstd:1 spent its
/// warm-up (8 MiB of wire, ~36 units of the pg set per stream) there; where the link is
/// the limit the first probe, on the second unit, moves it up.
const START: usize = 1;
/// The unit of a stream's first probe: early, so that a slow link is seen within a few
/// units (the warm-up lets a stream move only to levels that send less).
const FIRST_PROBE: u32 = 2;
/// The same at each probe (probes are rarer: each one counts more).
const PROBE_KEEP: f64 = 0.7;
/// Hysteresis: a costlier level must be predicted this much faster (a cheaper one: no slower).
const MARGIN: f64 = 0.02;
/// The data changed when a ratio moves by `CHANGED` (a share) or a probe's cost per byte
/// by `CPU_CHANGED` (a factor); old measurements then count `STALE` probes (`forget`).
const CHANGED: f64 = 0.2;
const CPU_CHANGED: f64 = 2.0;
const STALE: f64 = 0.1;
/// Probe intervals in units.
const MIN_INTERVAL: u32 = 8;
const MAX_INTERVAL: u32 = 64;
/// Units (and probe slices) smaller than this teach nothing reliable about rates (timer
/// resolution and per-call overheads dominate).
pub const MIN_SAMPLE: usize = 64 << 10;
/// Wire bytes a stream must have written before it may switch to a level that sends
/// more: until the socket's send buffer (up to 4 MiB with Linux's default autotuning) and
/// the path's queues are full, writes return at once and the link looks free.
const WARMUP_WIRE: u64 = 8 << 20;
/// How much of a unit a probe compresses.
pub const PROBE_SLICE: usize = 512 << 10;

/// Prior compression costs (seconds per raw byte) and ratios, used until a level has a
/// measurement. Single-core rates on database pages from bench/RESULTS.md's table of
/// single-core costs (lz4_flex ~490 MB/s, zstd:1 ~335 MB/s), zstd:3 and zstd:6 at about
/// a half and a fifth of zstd:1.
const PRIOR_CPU: [f64; 5] = [0.0, 2.0e-9, 3.0e-9, 6.0e-9, 15.0e-9];
const PRIOR_RATIO: [f64; 5] = [1.0, 0.5, 0.4, 0.37, 0.35];
/// Prior write cost: 500 MB/s per stream.
const PRIOR_WIRE: f64 = 2.0e-9;
/// The most one unit's write time per wire byte counts for, as a multiple of the
/// running mean (see `Tuner::observe`).
const WIRE_STEP: f64 = 4.0;
/// The sender's TLS per wire byte, seconds: as the receiver's.
const SEND_WIRE: f64 = RECV_WIRE;
/// The stretch of compression (wall ÷ CPU) at which the cores count as saturated: what a
/// stream then waits for is CPU. Less is taken proportionally.
const SATURATED: f64 = 1.5;
/// How much of a write's wait saturated cores can explain, as a multiple of the unit's
/// compression wall time (both ends on the same cores: the receiver's work per unit is
/// of the order of the sender's).
const CORE_WAIT: f64 = 3.0;
/// The receiver's decompression, seconds per raw byte, per level (one core; lz4_flex and
/// zstd on the pg set; `none` decompresses nothing).
const DECOMP: [f64; 5] = [0.0, 0.15e-9, 0.45e-9, 0.45e-9, 0.45e-9];
/// The most one unit's compression counts as stretched by contention (wall ÷ CPU).
const MAX_STRETCH: f64 = 8.0;
/// The receiver's work per wire byte, seconds: a TLS stream decrypted and copied on one
/// core, ~1.8 GB/s (bench/RESULTS.md, *Choices inside one transfer*).
const RECV_WIRE: f64 = 1.0 / 1.8e9;

/// TCP's delivery-rate sample of a stream's connection after a unit's write.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LinkSample {
    /// Wire bytes per second the peer acknowledged, over about a round trip.
    pub rate: f64,
    /// The stream had nothing more to send while it was taken: the link had room.
    pub app_limited: bool,
    /// Of the unit's write, the time the connection was limited by the peer's receive
    /// window: the receiver did not keep up (zero where the kernel does not say).
    pub rwnd: Duration,
}

/// What a probe measured on one slice: the probed level's and the current level's output
/// length and compression time.
#[derive(Debug, Clone, Copy)]
pub struct Probe {
    /// The level probed (a neighbour, or the one past it).
    pub level: usize,
    /// Slice length in raw bytes.
    pub raw: usize,
    /// The probed level's output length (the slice's length when it did not shrink 3%).
    pub out: usize,
    /// The probed level's compression time.
    pub cpu: Duration,
    /// The current level's output length on the same slice.
    pub current_out: usize,
}

/// One stream's controller.
#[derive(Debug, Clone)]
pub struct Tuner {
    /// Compression seconds (thread CPU time) per raw byte, per level.
    cpu: [Mean; 5],
    /// Wall seconds per CPU second of compression, over all levels: how much the cores'
    /// contention stretches it (see `Tuner::observe_wall`).
    stretch: Mean,
    /// Output bytes per raw byte, per level.
    ratio: [Mean; 5],
    /// Write seconds per wire byte, the receiver's waits left out.
    wire: Mean,
    /// Seconds per raw byte the writes waited for the receiver (its window was full).
    recv: Mean,
    /// The share of write time that waited for the receiver (0 to 1).
    recv_share: Mean,
    /// The share of write time that waited for the receiver or for saturated cores.
    held: Mean,
    /// The last unit's compression in wall seconds (see `Tuner::observe_wall`).
    wall: f64,
    /// TCP's delivery samples (see [`delivery`]).
    delivery: Delivery,
    /// Wire bytes written so far (up to `WARMUP_WIRE`).
    written: u64,
    current: usize,
    /// Units since the last probe.
    since: u32,
    interval: u32,
    /// The last probe went up (the next goes down, where both exist).
    up: bool,
    /// Probes so far: of every four, the last two skip a level (see `Tuner::probe_due`).
    probes: u32,
    /// The level of the unit on its way (see `Tuner::observe`).
    sending: usize,
    /// 1 / the number of streams (see the module's *model*).
    overlap: f64,
    /// The current level's ratio when the last probe was decided.
    ratio_at_probe: f64,
    /// Levels measured on data that has changed since (see `Tuner::forget`).
    stale: [bool; LEVELS],
}

impl Tuner {
    /// A controller for one of `streams` streams, at the starting level with prior
    /// estimates.
    pub fn new(streams: usize) -> Tuner {
        Tuner {
            cpu: PRIOR_CPU.map(Mean::new),
            stretch: Mean::new(1.0),
            ratio: PRIOR_RATIO.map(Mean::new),
            wire: Mean::new(PRIOR_WIRE),
            recv: Mean::new(0.0),
            recv_share: Mean::new(0.0),
            held: Mean::new(0.0),
            wall: 0.0,
            delivery: Delivery::new(),
            written: 0,
            current: START,
            since: MIN_INTERVAL - FIRST_PROBE,
            interval: MIN_INTERVAL,
            up: false,
            probes: 0,
            sending: START,
            overlap: 1.0 / streams.max(1) as f64,
            ratio_at_probe: PRIOR_RATIO[START],
            stale: [false; LEVELS],
        }
    }

    /// The level the stream uses now (its index in [`LADDER`]).
    pub fn current(&self) -> usize {
        self.current
    }

    /// Counts one unit; when a probe is due, the level to probe on it.
    pub fn probe_due(&mut self) -> Option<usize> {
        self.since += 1;
        self.sending = self.current;
        // Not before the current level has a unit measured: a probe's ratio is relative
        // to it (against lz4's prior, zstd:1 looked to send a third of what it does).
        if self.since < self.interval || (self.current > 0 && self.cpu[self.current].den == 0.0) {
            return None;
        }
        self.since = 0;
        let top = LADDER.len() - 1;
        let up = match self.current {
            0 => true,
            c if c == top => false,
            _ => !self.up,
        };
        self.up = up;
        // Every other probe in a direction skips a level (see the module's
        // *exploration*); not from `none`, which must notice data turning compressible.
        let c = self.current;
        let far = c > 0 && self.probes % 4 >= 2;
        self.probes = self.probes.wrapping_add(1);
        Some(if up {
            if far && c + 2 <= top {
                c + 2
            } else {
                c + 1
            }
        } else if far && c >= 2 {
            c - 2
        } else {
            c - 1
        })
    }

    /// Learns from one unit sent at the current level: `raw` bytes became `wire` bytes on
    /// the wire, compressing took `cpu` and writing took `write`; `link` is TCP's
    /// delivery sample after the write (and the write's receiver-limited time), when the
    /// connection has one.
    pub fn observe(
        &mut self,
        raw: usize,
        wire: usize,
        cpu: Duration,
        write: Duration,
        link: Option<LinkSample>,
    ) {
        if raw < MIN_SAMPLE {
            return;
        }
        let raw_f = raw as f64;
        // The level the unit went at: a probe on it may have switched since (and booked
        // to the new level, the unit made it look as good as the old one).
        let c = self.sending;
        if c > 0 {
            self.stale[c] = false;
            self.cpu[c].add(cpu.as_secs_f64(), raw_f, KEEP);
            let before = self.ratio[c].get();
            self.ratio[c].add((wire as f64).min(raw_f), raw_f, KEEP);
            let now = self.ratio[c].get();
            self.follow(c, now / before);
            if (now - self.ratio_at_probe).abs() > CHANGED * self.ratio_at_probe {
                self.interval = MIN_INTERVAL;
                self.ratio_at_probe = now;
            }
        }
        self.written = (self.written + wire as u64).min(WARMUP_WIRE);
        // The receiver's part of the write, per raw byte; the rest is the link's, per
        // wire byte. The kernel counts in 4 ms jiffies: a 0.1 ms write reads 0 or 4 ms of
        // rwnd-limited time, right only on average (capped per unit at the write, the
        // rare 4 ms would be cut to 0.1 and the share biased 40 times low), so each unit
        // is split by the running share, whose sums see every count whole.
        let write_s = write.as_secs_f64();
        if let Some(l) = link {
            self.recv_share.add(l.rwnd.as_secs_f64(), write_s, KEEP);
        }
        // Where the cores are saturated, the write also waits for CPU (both ends' network
        // stacks and the receiver run on them): that part is not the link's either, and
        // the same per raw byte at every level. But no more of it than the cores could
        // explain, a few times the unit's own compression: a slow link on a machine busy
        // with other work still makes writes wait far longer than that, for the link.
        let share = self.share();
        let cores = (write_s * (1.0 - share) * self.saturation()).min(CORE_WAIT * self.wall);
        self.wall = 0.0;
        // (Never more than the write: the sum may round above it.)
        let recv = (write_s * share + cores).min(write_s);
        if write_s > 0.0 {
            self.held.add(recv, write_s, KEEP);
        }
        let share = self.held();
        self.recv.add(recv, raw_f, KEEP);
        let write = Duration::from_secs_f64((write_s - recv).max(0.0));
        if wire > 0 {
            // One unit's write may say at most WIRE_STEP times the running mean: a write
            // preempted for 34 ms carried 95 KB, which read as 360 ns per wire byte on a
            // link that costs one (a trace at 1 Gbit/s), and the mean then sent streams
            // to zstd:3 for ten units. A link that really slows down still moves the
            // mean by up to a third per unit.
            let cap = WIRE_STEP * self.wire.get().max(PRIOR_WIRE) * wire as f64;
            self.wire
                .add(write.as_secs_f64().min(cap), wire as f64, KEEP);
        }
        if let Some(l) = link {
            // A sample the receiver or the saturated cores held back measures them, not
            // the link: it counts for the share of the write that waited for the link.
            // So does a sample taken right after a write the receiver's window held up,
            // and the running share of the receiver's wait is not outweighed by the
            // cores' (`held` dips below it when their part is small): on the pg set
            // unshaped, writes stalled 0.2-0.4 s for a receiver writing durably, the
            // delivery rate then read 10 MB/s, and a weight of `1 - held` (0.7 at times
            // where the receiver's share was 1) made every wire byte cost 100 ns and kept
            // the streams on zstd:1 for their first 80 units. But the cores' part is
            // taken off only as far as the cores pace the samples: behind a full link
            // they are the link's however busy the cores (see [`delivery`]).
            let open = if l.rwnd.is_zero() {
                1.0 - self.share()
            } else {
                0.0
            };
            let cores = (share - self.share()).max(0.0);
            let paced = self.delivery.link_paced();
            let weight = open - (1.0 - paced) * cores;
            self.delivery
                .learn(c, (wire, raw), l.rate, !l.app_limited, (open, weight));
        }
        self.reconsider(false);
        self.sending = self.current;
    }

    /// Moves every other measured level's ratio by the factor the current level's moved
    /// (see the module's *ratios*): the data changed, for all of them alike.
    fn follow(&mut self, c: usize, f: f64) {
        for (l, r) in self.ratio.iter_mut().enumerate() {
            if l != 0 && l != c && r.den > 0.0 && f.is_finite() {
                r.num *= f;
            }
        }
    }

    /// The data changed: the levels but `current` count `STALE` probes, estimates kept,
    /// and are no candidates until measured again (docs/design.md, *Data that changes*).
    fn forget(&mut self, current: usize) {
        let cap = STALE * PROBE_SLICE as f64;
        for l in (1..LADDER.len()).filter(|&l| l != current) {
            self.cpu[l].cap(cap);
            self.ratio[l].cap(cap);
            self.stale[l] = true;
        }
    }

    /// Output bytes per raw byte at `level` now (see `Tuner::follow`); for a level not
    /// measured yet, its prior relative to the current level's.
    fn ratio(&self, level: usize) -> f64 {
        let r = &self.ratio[level];
        if level == 0 {
            1.0
        } else if level == self.current || r.den > 0.0 {
            r.get().min(1.0)
        } else {
            let c = self.current;
            (self.ratio[c].get() * PRIOR_RATIO[level] / PRIOR_RATIO[c]).min(1.0)
        }
    }

    /// Learns how long one unit's compression took in wall time against its CPU time:
    /// the stretch contention adds to every level's compression (see the module's
    /// *what compression costs*).
    pub fn observe_wall(&mut self, raw: usize, cpu: Duration, wall: Duration) {
        if raw < MIN_SAMPLE || cpu.is_zero() {
            return;
        }
        let (cpu, wall) = (cpu.as_secs_f64(), wall.as_secs_f64());
        self.wall = wall;
        self.stretch
            .add(wall.clamp(cpu, MAX_STRETCH * cpu), cpu, KEEP);
    }

    /// Learns from a probe: the probed level's cost per byte directly, its ratio relative to
    /// the current level's on the same slice (so a slice that compresses better or worse
    /// than the whole unit does not bias the choice).
    pub fn observe_probe(&mut self, p: Probe) {
        if p.raw < MIN_SAMPLE || p.level >= LADDER.len() || p.level == self.current {
            return;
        }
        let raw = p.raw as f64;
        let relative = p.out as f64 / p.current_out.max(1) as f64;
        let ratio = (self.ratio(self.current) * relative).min(1.0);
        // A level that sends a fifth more or less than its estimate, or costs half or twice
        // as much, says the data changed since it was measured (see `Tuner::forget`).
        let (known, cost) = (self.ratio(p.level), self.cpu[p.level].get());
        let per_byte = p.cpu.as_secs_f64() / raw;
        if p.level > 0
            && self.ratio[p.level].den > 0.0
            && ((ratio - known).abs() > CHANGED * known
                || per_byte > CPU_CHANGED * cost
                || per_byte * CPU_CHANGED < cost)
        {
            self.forget(self.current);
            self.interval = MIN_INTERVAL;
        }
        if p.level > 0 {
            self.stale[p.level] = false;
            self.cpu[p.level].add(p.cpu.as_secs_f64(), raw, PROBE_KEEP);
            self.ratio[p.level].add(ratio * raw, raw, PROBE_KEEP);
        }
        self.reconsider(true);
    }

    /// Seconds a wire byte costs the stream (see the module's *what the link costs*).
    fn wire_cost(&self) -> f64 {
        self.delivery.wire_cost(self.wire.get())
    }

    /// The share of write time that waited for the receiver, 0 to 1.
    fn share(&self) -> f64 {
        self.recv_share.get().clamp(0.0, 1.0)
    }

    /// Seconds per raw byte the receiver would hold the stream back at `level` (see the
    /// module's *what the receiver costs*).
    fn recv_cost(&self, level: usize) -> f64 {
        let more = self.ratio(level) - self.ratio(self.current);
        let decomp = DECOMP[level] - DECOMP[self.current];
        // The receiver's work, and where the cores are saturated the sender's TLS as well
        // (the write's own CPU went into `recv` with its wait), all stretched alike.
        let receiver = self.held() * (more * RECV_WIRE + decomp);
        let sender = self.held() * more * SEND_WIRE;
        (self.recv.get() + self.stretch.get() * (receiver + sender)).max(0.0)
    }

    /// The share of write time that waited for something other than the link, 0 to 1:
    /// the receiver's window, or cores so busy that what the stream waits for is CPU
    /// (both ends' network stacks run on them too).
    fn held(&self) -> f64 {
        self.held.get().clamp(0.0, 1.0)
    }

    /// How saturated the cores are, 0 to 1: the share of compression's wall time spent
    /// waiting for a core (`1 - 1 / stretch`).
    fn saturation(&self) -> f64 {
        ((self.stretch.get() - 1.0) / (SATURATED - 1.0)).clamp(0.0, 1.0)
    }

    /// Predicted seconds per raw byte at `level`.
    pub fn cost(&self, level: usize) -> f64 {
        let (a, b) = (
            self.cpu[level].get() * self.stretch.get(),
            self.ratio(level) * self.wire_cost() + self.recv_cost(level),
        );
        let hidden = a.max(b) + a.min(b) * self.overlap;
        // Where the receiver is the limit, compression does not hide behind it when both
        // ends share cores: each CPU second the sender spends is one the receiver lacks.
        // Nor where the cores are saturated: the other streams' writes then wait for the
        // same cores.
        let s = self.held();
        hidden * (1.0 - s) + (a + b) * s
    }

    /// Switches to the level predicted fastest: a level that spends more CPU per byte
    /// only when it beats the current one by more than the margin, one that spends less
    /// whenever it is predicted no slower (where the link hides compression, as with data
    /// that does not shrink on a slow link, every level costs the same time and the
    /// cheapest is the polite choice). During the warm-up, only levels that send less
    /// qualify. After a probe that changed nothing, probes less often.
    fn reconsider(&mut self, probed: bool) {
        let here = self.cost(self.current);
        let mut best = self.current;
        let mut best_cost = f64::INFINITY;
        let warm = self.written >= WARMUP_WIRE;
        for level in 0..LADDER.len() {
            // Only measured levels (see the module's *exploration*).
            if level == self.current
                || (level > 0 && (self.ratio[level].den == 0.0 || self.stale[level]))
                || (!warm && self.ratio(level) > self.ratio(self.current))
            {
                continue;
            }
            let c = self.cost(level);
            let bar = if level < self.current {
                here
            } else {
                here * (1.0 - MARGIN)
            };
            if c <= bar && c < best_cost {
                best = level;
                best_cost = c;
            }
        }
        if best != self.current {
            self.current = best;
            self.interval = MIN_INTERVAL;
            self.since = 0;
            self.ratio_at_probe = self.ratio(best);
        } else if probed {
            self.interval = (self.interval * 2).min(MAX_INTERVAL);
            self.ratio_at_probe = self.ratio[self.current].get();
        }
    }
}

#[cfg(test)]
#[path = "tune_tests.rs"]
mod tests;
