//! The adaptive codec's controller against data that changes under it and levels that
//! are not neighbours.

use super::*;

/// A slow link (a quarter of 100 Mbit/s per stream) and data whose compressibility
/// changes every `phase` units by `hard` times (the pg set's units shrink to 95 KB in
/// one table and to 270-940 KB in the next), sent as on a socket (delivery samples,
/// writes jittered). Returns the time and the units sent at each level, and the best
/// fixed level's time.
fn run_changing(t: &mut Tuner, phase: usize, hard: f64, units: usize) -> (f64, [usize; 5], f64) {
    const RATE: [f64; 5] = [f64::INFINITY, 3.0e9, 1.5e9, 9.0e8, 3.0e7];
    let link = 3.1e6;
    let raw = 4usize << 20;
    let cost = |l: usize, n: usize| if l == 0 { 0.0 } else { n as f64 / RATE[l] };
    let ratio_at = |i: usize| {
        let m = if (i / phase) % 2 == 1 { hard } else { 1.0 };
        PG_RATIO.map(|r| (r * m).min(1.0))
    };
    let (mut total, mut best) = (0.0, [0.0; 5]);
    let mut levels = [0; 5];
    for i in 0..units {
        let ratio = ratio_at(i);
        for (l, b) in best.iter_mut().enumerate() {
            *b += cost(l, raw).max(raw as f64 * ratio[l] / link);
        }
        let l = t.current();
        levels[l] += 1;
        total += probe_if_due(t, &cost, ratio);
        let wire = (raw as f64 * ratio[l]) as usize;
        let (c, send) = (cost(l, raw), wire as f64 / link);
        let sign = if i % 2 == 0 { 1.0 } else { -1.0 };
        let write = ((send - c) + sign * 0.5 * send).max(0.0);
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
    (
        total,
        levels,
        best.into_iter().fold(f64::INFINITY, f64::min),
    )
}

/// Each level's ratio is measured on other units than the current level's (a probe's
/// slice, units sent before the data changed): compared as they were, a level measured
/// on harder data looked worse than it is, and on the throttled pg run the streams sat
/// on zstd:1 (622 of 844 units) where zstd:3 is the fastest (1.07x).
#[test]
fn a_slow_link_with_changing_data_stays_compressed_hard() {
    for phase in [12, 24, 48] {
        let mut t = Tuner::new(4);
        let (took, levels, best) = run_changing(&mut t, phase, 2.0, 600);
        assert!(
            took <= 1.03 * best,
            "phase {phase}: {took} against {best}, units {levels:?}"
        );
    }
}
/// The pg set's index on a slow link (zstd CLI, 4 MiB units: zstd:1 sends 0.153, zstd:3
/// 0.151, zstd:6 0.122, at 325, 330 and 92 MB/s): the level above zstd:1 is no better,
/// the one above that is. Probing neighbours only, the streams stayed on zstd:1.
#[test]
fn a_better_level_past_an_equal_one_is_found() {
    const RATIO: [f64; 5] = [1.0, 0.2, 0.153, 0.151, 0.122];
    const CPU: [f64; 5] = [f64::INFINITY, 2.0e9, 3.25e8, 3.3e8, 9.2e7];
    let link = 3.1e6;
    let mut t = Tuner::new(4);
    let took = run_overlapped_at(&mut t, CPU, RATIO, link, (200, 0.5));
    let best = best_fixed_overlapped(CPU, RATIO, link, 200);
    assert_eq!(t.current(), 4);
    assert!(took <= 1.05 * best, "{took} against {best}");
}

/// The best fixed level's time for the job of [`run_overlapped_at`].
pub(super) fn best_fixed_overlapped(
    rate: [f64; 5],
    ratio: [f64; 5],
    link: f64,
    units: usize,
) -> f64 {
    let raw = (4u64 << 20) as f64;
    (0..5)
        .map(|l| {
            let c = if l == 0 { 0.0 } else { raw / rate[l] };
            c.max(raw * ratio[l] / link) * units as f64
        })
        .fold(f64::INFINITY, f64::min)
}

/// Random data on a link slow enough that the writes dominate: no unit goes at a level
/// no probe measured. Before, the priors of zstd:3 and zstd:6 (0.37, 0.35 of the raw
/// bytes) stood against lz4's measured 1.0, and streams of the small-file set (random
/// bytes) on a loaded machine sent units at zstd:3 and zstd:6 that shrank nothing.
#[test]
fn random_data_never_goes_to_an_unmeasured_level() {
    let raw = 4usize << 20;
    let link = 3.0e7;
    let cost = |l: usize, n: usize| if l == 0 { 0.0 } else { n as f64 / GIVE_UP[l] };
    for streams in [1, 4] {
        let mut t = Tuner::new(streams);
        let mut levels = [0; 5];
        for i in 0..200 {
            let l = t.current();
            levels[l] += 1;
            probe_if_due(&mut t, &cost, NOISE);
            let (c, send) = (cost(l, raw), raw as f64 / link);
            let sign = if i % 2 == 0 { 1.0 } else { -1.0 };
            let write = ((send - c) + sign * 0.5 * send).max(0.0);
            let sample = LinkSample {
                rate: link,
                app_limited: false,
                rwnd: Duration::ZERO,
            };
            t.observe(
                raw,
                raw,
                Duration::from_secs_f64(c),
                Duration::from_secs_f64(write),
                Some(sample),
            );
        }
        assert_eq!(levels[3] + levels[4], 0, "{streams} streams: {levels:?}");
        assert_eq!(t.current(), 0, "{streams} streams: {levels:?}");
    }
}

/// A probe can switch levels before its unit is compressed; the unit still goes at the
/// level it was made for. It was booked to the new level: one lz4 unit made zstd:1 look to
/// send 0.46 of the raw bytes where the probe had measured 0.1.
#[test]
fn a_unit_is_booked_to_the_level_it_went_at() {
    let raw = 4usize << 20;
    let slow = Duration::from_millis(100);
    let mut t = Tuner::new(1);
    assert_eq!(t.probe_due(), None);
    t.observe(raw, raw / 2, Duration::from_millis(1), slow, None);
    let p = t.probe_due().expect("a probe on the second unit");
    t.observe_probe(Probe {
        level: p,
        raw: PROBE_SLICE,
        out: PROBE_SLICE / 10,
        cpu: Duration::from_micros(500),
        current_out: PROBE_SLICE / 2,
    });
    assert_eq!(t.current(), p, "the probe switched");
    let probed = t.ratio[p].get();
    t.observe(raw, raw / 2, Duration::from_millis(1), slow, None);
    assert!(
        (t.ratio[p].get() - probed).abs() < 0.01,
        "{} after the probe's {probed}",
        t.ratio[p].get()
    );
}
