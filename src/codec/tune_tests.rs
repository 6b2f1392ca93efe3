//! The adaptive codec's controller against simulated links and data.

use super::*;

/// A probe when one is due, as the encoder does it; returns its compression time.
fn probe_if_due(t: &mut Tuner, cost: &dyn Fn(usize, usize) -> f64, ratio: [f64; 5]) -> f64 {
    let l = t.current();
    let Some(p) = t.probe_due() else {
        return 0.0;
    };
    let n = PROBE_SLICE;
    t.observe_probe(Probe {
        level: p,
        raw: n,
        out: (n as f64 * ratio[p]) as usize,
        cpu: Duration::from_secs_f64(cost(p, n)),
        current_out: (n as f64 * ratio[l]) as usize,
    });
    cost(p, n) + cost(l, n)
}

/// A simulated stream: each level compresses at `cpu_rate[L]` raw bytes/s to
/// `ratio[L]`, and the link carries `link` wire bytes/s. Runs `units` units of 4 MiB
/// and returns the time they took, probes included.
fn run(t: &mut Tuner, cpu_rate: [f64; 5], ratio: [f64; 5], link: f64, units: usize) -> f64 {
    let raw = 4usize << 20;
    let cost = |l: usize, n: usize| if l == 0 { 0.0 } else { n as f64 / cpu_rate[l] };
    let mut total = 0.0;
    for _ in 0..units {
        let l = t.current();
        total += probe_if_due(t, &cost, ratio);
        let wire = (raw as f64 * ratio[l]) as usize;
        let write = wire as f64 / link;
        total += cost(l, raw) + write;
        t.observe(
            raw,
            wire,
            Duration::from_secs_f64(cost(l, raw)),
            Duration::from_secs_f64(write),
            None,
        );
    }
    total
}

/// Like [`run`], but as a real socket behaves: the link drains the socket buffer while
/// the stream compresses, so a unit takes `max(compress, link)` and its write waits
/// only for the rest, give or take `jitter` (a share of the link time, alternating
/// sign: writes into a buffer with room return early, the next ones wait). Each unit
/// brings TCP's delivery sample.
fn run_overlapped(t: &mut Tuner, ratio: [f64; 5], link: f64, units: usize, jitter: f64) -> f64 {
    run_overlapped_at(t, RATE, ratio, link, (units, jitter))
}

/// [`run_overlapped`] with the levels' compression rates given.
fn run_overlapped_at(
    t: &mut Tuner,
    rate: [f64; 5],
    ratio: [f64; 5],
    link: f64,
    (units, jitter): (usize, f64),
) -> f64 {
    let raw = 4usize << 20;
    let cost = |l: usize, n: usize| if l == 0 { 0.0 } else { n as f64 / rate[l] };
    let mut total = 0.0;
    for i in 0..units {
        let l = t.current();
        total += probe_if_due(t, &cost, ratio);
        let wire = (raw as f64 * ratio[l]) as usize;
        let (c, send) = (cost(l, raw), wire as f64 / link);
        let sign = if i % 2 == 0 { 1.0 } else { -1.0 };
        let write = ((send - c) + sign * jitter * send).max(0.0);
        total += c.max(send);
        let sample = LinkSample {
            rate: link,
            app_limited: c > send,
            rwnd: Duration::ZERO,
        };
        t.observe(
            raw,
            wire,
            Duration::from_secs_f64(c),
            Duration::from_secs_f64(write),
            Some(sample),
        );
    }
    total
}

/// The best fixed level's time for the job of [`run_overlapped`].
fn best_overlapped(ratio: [f64; 5], link: f64, units: usize) -> f64 {
    mix::best_fixed_overlapped(RATE, ratio, link, units)
}

/// A slow link whose writes wait only for what compression did not cover, and swing
/// between units: with TCP's delivery samples the controller stays on the level the
/// link wants; on a fast link the samples say app-limited and cheap levels win.
#[test]
fn delivery_samples_keep_a_slow_link_compressed() {
    let link = 3.0e6; // a quarter of 100 Mbit/s
    let mut t = Tuner::new(4);
    let took = run_overlapped(&mut t, PG, link, 300, 0.9);
    let best = best_overlapped(PG, link, 300);
    assert!(t.current() >= 3, "level {}", t.current());
    assert!(took <= 1.05 * best, "{took} against {best}");
    // On a fast link the same samples say the link has room: cheap levels.
    let mut t = Tuner::new(4);
    let took = run_overlapped(&mut t, PG, 2.0e9, 1000, 0.9);
    assert!(t.current() <= 1, "level {}", t.current());
    assert!(took <= 1.05 * best_overlapped(PG, 2.0e9, 1000));
}

/// A far end: the link carries `link` wire bytes/s; the receiver takes `raw` seconds
/// per raw byte (writing durably) and `wire` per wire byte (decrypting); the sender's
/// TLS takes `tls` per wire byte inside its writes. When the two `share` cores that are
/// all busy, the receiver also loses the time the sender spends compressing and
/// encrypting.
#[derive(Clone, Copy)]
struct FarEnd {
    link: f64,
    raw: f64,
    wire: f64,
    tls: f64,
    share: bool,
}

/// A receiver writing durably at 400 MB/s (the disk of bench/RESULTS.md), both ends
/// encrypting and decrypting at 1.8 GB/s.
const SLOW_DISK: FarEnd = FarEnd {
    link: 1.0e10,
    raw: 1.0 / 4.0e8,
    wire: 1.0 / 1.8e9,
    tls: 1.0 / 1.8e9,
    share: false,
};

/// The pg set's ratios and the sender's per-stream compression rates on it (highly
/// compressible pgbench tables: zstd:1 sent 189 of 3,450 MB in the quiet matrix, lz4
/// 437 MB).
const PG_RATIO: [f64; 5] = [1.0, 0.126, 0.055, 0.050, 0.046];
const PG_RATE: [f64; 5] = [f64::INFINITY, 3.0e9, 1.5e9, 9.0e8, 1.5e8];

/// The pg set sent to `far`, as on a socket: a unit's write waits for whatever of the
/// slower of the link and the receiver its compression and TLS did not cover, give or
/// take `jitter` (alternating). When the receiver is the slower, the kernel counts the
/// wait as receive-window-limited, and says so when `rwnd_known` (Linux 4.10 and later).
/// Returns the time `units` units of 4 MiB took (probes included) and the units sent at
/// each level.
fn run_far_end(
    t: &mut Tuner,
    far: FarEnd,
    (units, jitter): (usize, f64),
    rwnd_known: bool,
) -> (f64, [usize; 5]) {
    let raw = 4usize << 20;
    let cost = |l: usize, n: usize| if l == 0 { 0.0 } else { n as f64 / PG_RATE[l] };
    let mut total = 0.0;
    let mut levels = [0; 5];
    let mut clock = 0.0;
    for i in 0..units {
        let l = t.current();
        levels[l] += 1;
        total += probe_if_due(t, &cost, PG_RATIO);
        let wire = (raw as f64 * PG_RATIO[l]) as usize;
        let c = cost(l, raw);
        let tls = wire as f64 * far.tls;
        let mut receiver = raw as f64 * far.raw + wire as f64 * far.wire;
        if far.share {
            receiver += c + tls;
        }
        let send = wire as f64 / far.link;
        let drain = receiver.max(send);
        let sign = if i % 2 == 0 { 1.0 } else { -1.0 };
        let wait = (drain - c - tls).max(0.0) * (1.0 + sign * jitter);
        total += (c + tls).max(drain);
        // The kernel counts whole jiffies (4 ms at HZ=250): a write reads the ticks that
        // fell inside it.
        clock += c + tls;
        let start = (clock / JIFFY).floor();
        clock += wait;
        let ticks = (clock / JIFFY).floor() - start;
        let rwnd = if rwnd_known && receiver > send {
            ticks * JIFFY
        } else {
            0.0
        };
        let sample = LinkSample {
            rate: wire as f64 / drain,
            app_limited: c + tls > drain,
            rwnd: Duration::from_secs_f64(rwnd),
        };
        t.observe(
            raw,
            wire,
            Duration::from_secs_f64(c),
            Duration::from_secs_f64(tls + wait),
            Some(sample),
        );
    }
    (total, levels)
}

/// The kernel's clock tick for TCP's chrono counters, seconds.
const JIFFY: f64 = 0.004;

/// The best fixed level's time for the job of [`run_far_end`].
fn best_far_end(far: FarEnd, units: usize) -> f64 {
    let raw = (4u64 << 20) as f64;
    (0..5)
        .map(|l| {
            let c = if l == 0 { 0.0 } else { raw / PG_RATE[l] };
            let wire = raw * PG_RATIO[l];
            let sender = c + wire * far.tls;
            let shared = if far.share { sender } else { 0.0 };
            let drain = (raw * far.raw + wire * far.wire + shared).max(wire / far.link);
            sender.max(drain) * units as f64
        })
        .fold(f64::INFINITY, f64::min)
}

/// The file-mode pg cells of the quiet matrix: a fast link (unshaped, 1 Gbit/s) into a
/// receiver bounded by its disk. The writes wait for the receiver, which takes the same
/// time per raw byte at every level: the stream must not compress harder than zstd:1
/// (it went to zstd:3, 6.3–8.9 CPU s on the sender against zstd:1's 5.7–6.3, for 6%
/// fewer bytes), nor send raw, and must stay within 5% of the best fixed level. Before
/// the receiver's wait was told apart (`rwnd_known` false, as on a kernel before 4.10)
/// it went to zstd:3.
#[test]
fn a_receiver_bound_stream_does_not_compress_harder() {
    for link in [1.0e10, 1.25e8] {
        let far = FarEnd { link, ..SLOW_DISK };
        let mut t = Tuner::new(4);
        let (took, _) = run_far_end(&mut t, far, (400, 0.5), true);
        let best = best_far_end(far, 400);
        let level = t.current();
        assert!((1..=2).contains(&level), "level {level} at {link} B/s");
        assert!(took <= 1.05 * best, "{took} against {best} at {link} B/s");
    }
}

/// The same stream on a link slower than the receiver: the writes wait for the link
/// (nothing receive-window-limited) and compressing harder pays.
#[test]
fn a_link_bound_stream_still_compresses_harder() {
    let far = FarEnd {
        link: 1.25e7, // 100 Mbit/s
        ..SLOW_DISK
    };
    let mut t = Tuner::new(4);
    let (took, _) = run_far_end(&mut t, far, (400, 0.5), true);
    let best = best_far_end(far, 400);
    assert!(t.current() >= 3, "level {}", t.current());
    assert!(took <= 1.05 * best, "{took} against {best}");
}

/// A receiver that is the limit and spends 1 ns per wire byte it takes in (decrypting
/// on a busy core) behind a sender whose own writes are cheap (0.1 ns per byte: fast
/// TLS, or none): measured at zstd:1, `none` looks as cheap as any level (no
/// compression, writes almost free), while raw the receiver would take in 18 times the
/// bytes and take twice as long. A level that sends more must not look cheaper for the
/// receiver's wait (without the per-wire-byte term the stream went raw).
#[test]
fn a_receiver_bound_stream_does_not_go_raw() {
    let far = FarEnd {
        link: 1.0e10,
        raw: 1.0 / 1.0e9,
        wire: 1.0 / 1.0e9,
        tls: 1.0 / 1.0e10,
        share: false,
    };
    let mut t = Tuner::new(4);
    let (took, levels) = run_far_end(&mut t, far, (400, 0.5), true);
    assert_eq!(levels[0], 0, "units per level {levels:?}");
    let best = best_far_end(far, 400);
    assert!(took <= 1.1 * best, "{took} against {best}, {levels:?}");
}

/// The pg cells on the loaded test bed: both ends on 2 busy cores, the receiver the
/// limit (writes waited 45–68% of their busy time for its window). Every CPU second the
/// sender compresses is one the receiver lacks, so the cheapest level that does not send
/// much more wins (lz4; measured: lz4 5.21 s, zstd:1 7.86); before, the overlapped
/// model hid compression behind the receiver's wait and the stream stayed on zstd:1,
/// 1.18x the best.
#[test]
fn a_receiver_sharing_the_cores_gets_the_cpu() {
    let far = FarEnd {
        raw: 1.0e-9,
        share: true,
        ..SLOW_DISK
    };
    let mut t = Tuner::new(4);
    let (took, levels) = run_far_end(&mut t, far, (400, 0.5), true);
    let best = best_far_end(far, 400);
    assert_eq!(t.current(), 1, "units per level {levels:?}");
    assert!(took <= 1.05 * best, "{took} against {best}, {levels:?}");
}

const RATE: [f64; 5] = [f64::INFINITY, 1.0e9, 4.0e8, 2.0e8, 8.0e7];
const PG: [f64; 5] = [1.0, 0.45, 0.33, 0.30, 0.28];
const NOISE: [f64; 5] = [1.0; 5];
/// Compression rates on data that does not shrink: zstd gives up early (measured:
/// ~0.9 ns per byte of the sender's CPU at zstd:1 on random data).
const GIVE_UP: [f64; 5] = [f64::INFINITY, 3.0e9, 1.1e9, 1.0e9, 8.0e8];

/// The best fixed level's time for the same simulated job.
fn best_fixed(rate: [f64; 5], ratio: [f64; 5], link: f64, units: usize) -> f64 {
    (0..5)
        .map(|l| {
            let per = if l == 0 { 0.0 } else { 1.0 / rate[l] } + ratio[l] / link;
            per * (units as f64) * (4u64 << 20) as f64
        })
        .fold(f64::INFINITY, f64::min)
}

#[test]
fn a_fast_link_uses_little_cpu() {
    let mut t = Tuner::new(1);
    // A 4 GiB job: the warm-up's 8 MiB of wire at zstd:1 is amortized.
    let took = run(&mut t, RATE, PG, 1.0e9, 1000);
    assert!(t.current() <= 1, "level {}", t.current());
    let best = best_fixed(RATE, PG, 1.0e9, 1000);
    assert!(took <= 1.05 * best, "{took} against {best}");
}

#[test]
fn a_slow_link_compresses_hard() {
    let mut t = Tuner::new(1);
    let took = run(&mut t, RATE, PG, 1.0e6, 400);
    assert!(t.current() >= 3, "level {}", t.current());
    assert!(took <= 1.05 * best_fixed(RATE, PG, 1.0e6, 400));
}

#[test]
fn incompressible_data_goes_raw_and_rarely_probes() {
    let mut t = Tuner::new(1);
    run(&mut t, RATE, NOISE, 1.0e8, 200);
    assert_eq!(t.current(), 0);
    let probes = (0..640).filter(|_| t.probe_due().is_some()).count();
    assert!(probes <= 640 / MAX_INTERVAL as usize + 1, "{probes} probes");
}

/// Where the link is the limit, compressing data that does not shrink costs no time
/// but still costs CPU: the stream must still go raw (measured before: a 1 Gbit/s run
/// of random data at zstd:1 spent 8.3 CPU s on the sender against 4.6 s raw).
#[test]
fn incompressible_data_on_a_slow_link_goes_raw() {
    for streams in [1, 4] {
        let mut t = Tuner::new(streams);
        run_overlapped_at(&mut t, GIVE_UP, NOISE, 3.0e7, (200, 0.5));
        assert_eq!(t.current(), 0, "{streams} streams");
    }
}

#[test]
fn follows_a_link_throttled_mid_run() {
    let mut t = Tuner::new(1);
    run(&mut t, RATE, PG, 1.0e9, 200);
    let fast = t.current();
    run(&mut t, RATE, PG, 1.0e6, 100);
    assert!(t.current() > fast, "{fast} -> {}", t.current());
    run(&mut t, RATE, PG, 1.0e9, 200);
    assert!(t.current() <= 1, "back to {}", t.current());
}

#[test]
fn data_turning_compressible_is_noticed() {
    let mut t = Tuner::new(1);
    run(&mut t, RATE, NOISE, 1.0e8, 300);
    assert_eq!(t.current(), 0);
    run(&mut t, RATE, PG, 1.0e8, 2 * MAX_INTERVAL as usize);
    assert!(t.current() > 0);
}

/// The pg set on a fast link with two busy cores (ratios and per-stream rates from
/// the quiet 1 Gbit/s runs: lz4 sends 0.126 of the bytes, zstd:1 0.055), where every
/// 10th write is preempted for 300 times its length: lz4 is the fastest level, and
/// the streams must stay there (before the cap the preempted writes made the link
/// look 15 times slower and sent them to zstd:1 and up).
#[test]
fn a_preempted_write_is_not_a_slow_link() {
    const RATIO: [f64; 5] = [1.0, 0.126, 0.055, 0.052, 0.050];
    const CPU: [f64; 5] = [f64::INFINITY, 2.0e9, 1.0e9, 4.0e8, 1.5e8];
    let mut t = Tuner::new(4);
    let raw = 4usize << 20;
    let cost = |l: usize, n: usize| if l == 0 { 0.0 } else { n as f64 / CPU[l] };
    let mut cheap = 0;
    for i in 0..400 {
        let l = t.current();
        if l <= 1 {
            cheap += 1;
        }
        probe_if_due(&mut t, &cost, RATIO);
        let wire = (raw as f64 * RATIO[l]) as usize;
        let per = if i % 10 == 9 { 300.0e-9 } else { 1.0e-9 };
        t.observe(
            raw,
            wire,
            Duration::from_secs_f64(cost(l, raw)),
            Duration::from_secs_f64(wire as f64 * per),
            None,
        );
    }
    assert!(cheap >= 300, "only {cheap} of 400 units at lz4 or none");
}

#[test]
fn free_writes_at_the_start_do_not_fool_it() {
    // The first 8 MiB go into an empty socket buffer: the writes take no time.
    let mut t = Tuner::new(1);
    for _ in 0..30 {
        let l = t.current();
        t.probe_due();
        let wire = (4 << 20) / 10;
        t.observe(
            4 << 20,
            wire,
            Duration::from_secs_f64((4 << 20) as f64 / RATE[l]),
            Duration::ZERO,
            None,
        );
        if t.written < WARMUP_WIRE {
            assert!(
                t.current() >= START,
                "went to {} in the warm-up",
                t.current()
            );
        }
    }
    assert!(t.written >= WARMUP_WIRE);
}

#[test]
fn small_units_teach_nothing() {
    let mut t = Tuner::new(1);
    let before = t.clone();
    t.observe(
        100,
        50,
        Duration::from_secs(1),
        Duration::from_secs(1),
        None,
    );
    assert_eq!(t.cost(2), before.cost(2));
}

/// Both ends on the same 2 cores with nothing else to wait for (the pg cell unshaped, a
/// sender beside its receiver): 4 streams and their receivers share the cores, so each
/// unit takes every stream's and receiver's CPU over 2 cores, whatever crossed the wire.
/// Per raw byte, the sender compresses (`PG_RATE`), encrypts (`TLS` per wire byte) and
/// hashes; the receiver decrypts, decompresses (`DECOMP_REAL`), hashes and stores. A
/// stream's compression is stretched by the other threads on its cores; its write waits
/// for the receiver, `rwnd` of that wait counted by the kernel as receive-window-limited;
/// TCP's delivery samples, on `busy` of the units not app-limited, say the rate the cores
/// let through. Returns the time and the units at each level.
fn run_shared_cores(t: &mut Tuner, units: usize, rwnd: f64, busy: usize) -> (f64, [usize; 5]) {
    let raw = 4usize << 20;
    let cost = |l: usize, n: usize| if l == 0 { 0.0 } else { n as f64 / PG_RATE[l] };
    let (mut total, mut levels, mut clock) = (0.0, [0; 5], 0.0);
    for i in 0..units {
        let l = t.current();
        levels[l] += 1;
        total += probe_if_due(t, &cost, PG_RATIO) * STRETCH;
        let (unit, sender, wire) = shared_unit(l);
        total += unit;
        let c = cost(l, raw);
        let wait = (unit - sender * STRETCH).max(0.0);
        let write = (wire as f64 * TLS) * STRETCH + wait;
        clock += sender * STRETCH;
        let start = (clock / JIFFY).floor();
        clock += wait * rwnd;
        let ticks = (clock / JIFFY).floor() - start;
        clock += wait * (1.0 - rwnd);
        let sample = LinkSample {
            rate: wire as f64 / unit,
            app_limited: i % busy.max(1) != 0,
            rwnd: Duration::from_secs_f64(ticks * JIFFY),
        };
        feed(t, raw, wire, c, STRETCH, write, sample);
    }
    (total, levels)
}

/// One unit as a stream reports it: `c` s compressing (wall `stretch` × that), `write` s writing.
fn feed(
    t: &mut Tuner,
    raw: usize,
    wire: usize,
    c: f64,
    stretch: f64,
    write: f64,
    sample: LinkSample,
) {
    t.observe_wall(
        raw,
        Duration::from_secs_f64(c),
        Duration::from_secs_f64(c * stretch),
    );
    t.observe(
        raw,
        wire,
        Duration::from_secs_f64(c),
        Duration::from_secs_f64(write),
        Some(sample),
    );
}

/// The cores' stretch of one thread's work: 4 sending streams on 2 cores.
const STRETCH: f64 = 2.0;
/// Per wire byte: each side's TLS; per raw byte: each side's hash, the receiver's store,
/// and its decompression per level (lz4_flex and zstd on the pg set).
const TLS: f64 = 1.0 / 1.8e9;
const HASH: f64 = 1.0 / 3.0e9;
const STORE: f64 = 1.0 / 3.0e9;
const DECOMP_REAL: [f64; 5] = [0.0, 0.15e-9, 0.45e-9, 0.45e-9, 0.45e-9];

/// One 4 MiB unit at level `l` with both ends on 2 cores: its wall time per stream (all
/// 4 streams' and receivers' CPU over the 2 cores), the sender's own CPU, the wire bytes.
fn shared_unit(l: usize) -> (f64, f64, usize) {
    let raw = (4u64 << 20) as f64;
    let wire = raw * PG_RATIO[l];
    let c = if l == 0 { 0.0 } else { raw / PG_RATE[l] };
    let sender = c + wire * TLS + raw * HASH;
    let receiver = wire * TLS + raw * (DECOMP_REAL[l] + HASH + STORE);
    (4.0 * (sender + receiver) / 2.0, sender, wire as usize)
}

/// The pg cell unshaped on one machine (quiet: lz4 3.26 s, zstd:1 3.84, auto 3.98 before
/// this model): the cores are the limit, and lz4, which spends the least CPU in all (its
/// compression and decompression are the cheapest; its larger output costs little to
/// encrypt and decrypt), is the fastest level. The streams must settle on it within 5%
/// of it, whether the kernel counts the receiver's wait or not and however many delivery
/// samples say the link was busy. With none of the receiver's wait counted (as traced on
/// the test bed: no rwnd-limited time around any of 825 writes), the busy samples' rate
/// follows the level (15 ns per wire byte at lz4, 1.3 at none): the cores', not the
/// link's. Counted as the link's (auto11's change, `5a1a8fc`: 1.18× lz4 in nine quiet
/// runs), they made a wire byte look dear and sent the streams to zstd:1.
#[test]
fn shared_cores_settle_on_the_cheapest_cpu() {
    let best = (0..5)
        .map(|l| shared_unit(l).0 * 400.0)
        .fold(f64::INFINITY, f64::min);
    assert_eq!(best, shared_unit(1).0 * 400.0, "lz4 is the best level here");
    for (rwnd, busy) in [(1.0, 2), (0.5, 2), (0.5, 1), (0.0, 1), (0.0, 2), (0.0, 4)] {
        let mut t = Tuner::new(4);
        let (took, levels) = run_shared_cores(&mut t, 400, rwnd, busy);
        assert_eq!(t.current(), 1, "rwnd {rwnd}, busy 1/{busy}: {levels:?}");
        assert!(
            took <= 1.05 * best,
            "rwnd {rwnd}, busy 1/{busy}: {took} against {best}, {levels:?}"
        );
    }
}

/// The pg cell unshaped again: where the cores are the limit the streams start on lz4
/// and stay there. Started at zstd:1, a stream could leave it only once its writes had
/// filled the socket buffer (8 MiB of wire: ~36 of its units of the pg set).
#[test]
fn shared_cores_start_on_the_cheapest_cpu() {
    for (rwnd, busy) in [(1.0, 2), (0.5, 1), (0.0, 4)] {
        let mut t = Tuner::new(4);
        let (_, levels) = run_shared_cores(&mut t, 100, rwnd, busy);
        assert!(
            levels[2..].iter().sum::<usize>() <= 2,
            "rwnd {rwnd}, busy 1/{busy}: units per level {levels:?}"
        );
    }
}

/// A stream whose first units are too small to teach anything (packs of small files)
/// must not probe before its current level is measured: the probe's ratio is relative to
/// the current level's, and against lz4's prior (0.5) zstd:1 looked to send 0.18 of the
/// raw bytes where lz4 sent 0.06; the stream went to zstd:1 and stayed (traced on the pg
/// set unshaped).
#[test]
fn no_probe_before_the_current_level_is_measured() {
    let mut t = Tuner::new(4);
    for _ in 0..MIN_INTERVAL {
        assert_eq!(t.probe_due(), None);
        t.observe(
            MIN_SAMPLE / 2,
            MIN_SAMPLE / 20,
            Duration::from_micros(10),
            Duration::ZERO,
            None,
        );
    }
    let raw = 4usize << 20;
    t.observe(
        raw,
        raw / 16,
        Duration::from_secs_f64(raw as f64 * 0.3e-9),
        Duration::from_micros(50),
        None,
    );
    assert_eq!(t.probe_due(), Some(START + 1));
    assert_eq!(t.current(), START);
}

#[path = "tune_mix_tests.rs"]
mod mix;
