//! The prediction: a pure function from what a probe measured to the time the copy takes.
//!
//! A copy is a pipeline whose stages run at the same time: the sender's walk, its stream
//! workers reading (large files block by block, small ones whole, packed), compressing
//! and hashing, the network, the store writing the data and its finishers making small
//! files durable in batches (up to 256 at a time) with one `syncfs`. So the job takes as
//! long as its slowest stage, not the sum of them: the time of each stage over the whole
//! job is computed from the measured rates and the longest one is the prediction (and
//! names the bottleneck). One exception: when the source and the destination share a device, it
//! reads and writes in turn, so those two stages add up (`disk`).

use super::{Bottleneck, CodecRate, Compression};

/// The job and the rates measured for it (rates in bytes per second, times in seconds).
#[derive(Debug, Clone, Copy, Default)]
pub struct Job {
    /// Regular files.
    pub files: u64,
    /// Their data bytes.
    pub bytes: u64,
    /// Of them, the small files (read whole, packed) and their bytes.
    pub small_files: u64,
    /// The small files' bytes.
    pub small_bytes: u64,
    /// Wall time per small file read whole, as the sender's workers read them.
    pub small_read: Option<f64>,
    /// Read rate of large files (blocks).
    pub read: Option<f64>,
    /// The walk of the sources.
    pub walk: Option<f64>,
    /// Durable write rate at the destination.
    pub write: Option<f64>,
    /// Wall time per file made durable at the destination (the finishers together).
    pub per_file: Option<f64>,
    /// The network's rate over the streams (`None`: a copy on one host).
    pub network: Option<f64>,
    /// Source and destination on one device.
    pub same_device: bool,
}

/// The codec picked and what it predicts.
#[derive(Debug, Clone, Copy)]
pub struct Choice {
    /// The codec.
    pub codec: Compression,
    /// Source bytes per second over the whole job (bytes ÷ seconds).
    pub rate: f64,
    /// The predicted time of the whole job.
    pub seconds: f64,
    /// The stage that takes longest.
    pub bottleneck: Bottleneck,
}

/// Seconds each stage takes over the whole job with `codec`, with its bottleneck name.
pub fn stages(job: &Job, codec: &CodecRate) -> Vec<(f64, Bottleneck)> {
    let bytes = job.bytes as f64;
    let secs = |n: f64, rate: Option<f64>| rate.map(|r| n / r.max(1.0));
    let large = job.bytes.saturating_sub(job.small_bytes) as f64;
    // Large files at the block read rate; small ones at their own cost per file (without
    // its measurement, their bytes at the block rate).
    let read = match job.small_read {
        Some(per) => secs(large, job.read).map(|s| s + job.small_files as f64 * per),
        None => secs(bytes, job.read),
    };
    let write = secs(bytes, job.write);
    // Locally both ends hash every byte on the same cores: half the measured rate.
    let shared = if job.network.is_none() { 2.0 } else { 1.0 };
    let mut out = vec![(bytes / (codec.rate / shared).max(1.0), Bottleneck::Cpu)];
    match (read, write) {
        (Some(r), Some(w)) if job.same_device => out.push((r + w, Bottleneck::Disk)),
        _ => {
            out.extend(read.map(|s| (s, Bottleneck::Read)));
            out.extend(write.map(|s| (s, Bottleneck::Write)));
        }
    }
    out.extend(job.walk.map(|s| (s, Bottleneck::Read)));
    out.extend(secs(bytes, job.network.map(|n| n * codec.ratio)).map(|s| (s, Bottleneck::Network)));
    out.extend(
        job.per_file
            .map(|per| (job.files as f64 * per, Bottleneck::Files)),
    );
    out
}

/// The predicted time with `codec`: its slowest stage.
pub fn predict(job: &Job, codec: &CodecRate) -> Choice {
    let (seconds, bottleneck) =
        stages(job, codec)
            .into_iter()
            .fold(
                (0.0, Bottleneck::Cpu),
                |best, s| if s.0 > best.0 { s } else { best },
            );
    Choice {
        codec: codec.codec,
        rate: if seconds > 0.0 {
            job.bytes as f64 / seconds
        } else {
            0.0
        },
        seconds,
        bottleneck,
    }
}

/// The codec that finishes soonest. A copy on one host (`network` `None`) sends nothing
/// compressed, so only `none`. The codecs come cheapest first: a costlier one must
/// finish 2% sooner to be taken.
pub fn choose(job: &Job, codecs: &[CodecRate]) -> Option<Choice> {
    codecs
        .iter()
        .filter(|c| job.network.is_some() || c.codec == Compression::None)
        .map(|c| predict(job, c))
        .fold(None, |best: Option<Choice>, c| match best {
            Some(b) if c.seconds * 1.02 >= b.seconds => Some(b),
            _ => Some(c),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rate(codec: Compression, rate: f64, ratio: f64) -> CodecRate {
        CodecRate { codec, rate, ratio }
    }

    fn codecs() -> [CodecRate; 4] {
        [
            rate(Compression::None, 3000e6, 1.0),
            rate(Compression::Lz4, 900e6, 2.0),
            rate(Compression::Zstd(1), 400e6, 3.0),
            rate(Compression::Zstd(3), 150e6, 3.3),
        ]
    }

    fn big(network: Option<f64>) -> Job {
        Job {
            files: 1,
            bytes: 6_000_000_000,
            read: Some(500e6),
            write: Some(400e6),
            network,
            ..Job::default()
        }
    }

    #[test]
    fn the_slowest_stage_decides_and_a_slow_link_wants_compression() {
        // 100 Mbit/s: the best ratio wins (12.5 MB/s × 3.3).
        let c = choose(&big(Some(12.5e6)), &codecs()).unwrap();
        assert_eq!(
            (c.codec, c.bottleneck),
            (Compression::Zstd(3), Bottleneck::Network)
        );
        assert!((c.rate - 12.5e6 * 3.3).abs() < 1.0, "{}", c.rate);
        // 10 Gbit/s: the disk decides, and compressing gains nothing.
        let c = choose(&big(Some(1250e6)), &codecs()).unwrap();
        assert_eq!(
            (c.codec, c.bottleneck),
            (Compression::None, Bottleneck::Write)
        );
        assert!((c.seconds - 15.0).abs() < 1e-9);
        // Locally nothing is compressed, and hashing on both ends halves the CPU rate.
        let mut j = big(None);
        j.read = Some(5000e6);
        j.write = Some(5000e6);
        let c = choose(&j, &codecs()).unwrap();
        assert_eq!(
            (c.codec, c.bottleneck),
            (Compression::None, Bottleneck::Cpu)
        );
        assert!((c.rate - 1500e6).abs() < 1.0);
    }

    #[test]
    fn stages_overlap_except_reading_and_writing_one_device() {
        // 2 GB over 1 Gbit/s (125 MB/s) read at 500 and written at 400 MB/s: the network's
        // 16 s, not 16 + 4 + 5.
        let mut j = big(Some(125e6));
        j.bytes = 2_000_000_000;
        let c = choose(&j, &codecs()[..1]).unwrap();
        assert_eq!(c.bottleneck, Bottleneck::Network);
        assert!((c.seconds - 16.0).abs() < 1e-9, "{}", c.seconds);
        // One device reading and writing in turn: 4 + 5 s, more than the CPU's 1.3 s.
        j.network = None;
        j.same_device = true;
        let c = choose(&j, &codecs()).unwrap();
        assert_eq!(c.bottleneck, Bottleneck::Disk);
        assert!((c.seconds - 9.0).abs() < 1e-9, "{}", c.seconds);
    }

    #[test]
    fn many_small_files_cost_the_slowest_of_their_stages_not_the_sum() {
        // 20,000 files, 166 MB, over 1 Gbit/s: network 1.33 s; finishing them at 0.1 ms a
        // file 2 s; reading them whole at 40 µs a file 0.8 s; the walk 0.5 s.
        let j = Job {
            files: 20_000,
            bytes: 166_000_000,
            small_files: 20_000,
            small_bytes: 166_000_000,
            small_read: Some(40e-6),
            read: Some(50e6),
            walk: Some(0.5),
            write: Some(400e6),
            per_file: Some(100e-6),
            network: Some(125e6),
            same_device: false,
        };
        let c = choose(&j, &codecs()[..1]).unwrap();
        assert_eq!(c.bottleneck, Bottleneck::Files);
        assert!((c.seconds - 2.0).abs() < 1e-9, "{}", c.seconds);
        // The block read rate (50 MB/s: 3.3 s) does not apply to files read whole.
        let s = stages(&j, &codecs()[0]);
        let read: f64 = s
            .iter()
            .filter(|(_, b)| *b == Bottleneck::Read)
            .map(|(t, _)| *t)
            .fold(0.0, f64::max);
        assert!((read - 0.8).abs() < 1e-9, "{read}");
        // Without a measurement of whole-file reads, their bytes go at the block rate.
        let c = predict(
            &Job {
                small_read: None,
                ..j
            },
            &codecs()[0],
        );
        assert_eq!(c.bottleneck, Bottleneck::Read);
        assert!((c.seconds - 3.32).abs() < 1e-9, "{}", c.seconds);
        // A slow walk (a lower bound when it stopped) bounds the job too.
        let c = predict(
            &Job {
                walk: Some(6.0),
                ..j
            },
            &codecs()[0],
        );
        assert_eq!((c.seconds, c.bottleneck), (6.0, Bottleneck::Read));
        // Nothing to copy: nothing to wait for.
        assert_eq!(predict(&Job::default(), &codecs()[0]).seconds, 0.0);
    }
}
