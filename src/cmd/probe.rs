//! `haul probe SRC... DST` and `haul probe PATH... --to TICKET`: runs the measurements of
//! `probe` (a far destination's through `remote::probe`, a far source's through
//! `remote::probe_source`, both far through `remote::probe_between`, a waiting
//! receiver's through `send::probe`) and prints what bounds the copy, the settings to use and the predicted
//! time (or one JSON object with `--json`).

use std::os::fd::AsFd;
use std::time::Instant;

use super::ticket::resolve_ticket;
use crate::config::{Config, Location, Probe, ProbeDest, SshOptions};
use crate::error::{Error, Result};
use crate::probe::{self, CodecRate, Sources, SAMPLE_BLOCK};
use crate::progress::{escape, human, json_string};

/// What was measured and picked.
struct Outcome {
    src: Sources,
    /// The destination directory measured, escaped for printing (`host:path` when far).
    dest: String,
    write: Option<f64>,
    /// Bytes per second over the streams to a far destination.
    network: Option<f64>,
    /// Seconds each file adds at the destination (create, fsync, close).
    per_file: Option<f64>,
    codecs: Vec<CodecRate>,
    choice: Option<probe::Choice>,
    streams: usize,
    seconds: f64,
}

/// Measures and prints.
pub(super) fn run_probe(p: &Probe, ssh: &SshOptions, cfg: &Config) -> Result<()> {
    let started = Instant::now();
    // Remote to remote: everything is measured on the two far hosts.
    if let (false, ProbeDest::Path(Location::Remote(r))) = (p.far.is_empty(), &p.dest) {
        let (far, m) = crate::remote::probe_between::measure(&p.far, r, p.streams, ssh, cfg.quiet)?;
        let shown = format!(
            "{}:{}",
            escape(&r.host),
            escape(&String::from_utf8_lossy(&r.path))
        );
        let measured = Measured {
            dest: shown,
            write: m.write_rate,
            per_file: m.per_file,
            network: Some(far.network_rate),
            same_device: false,
        };
        return report(far.src, far.codecs, measured, p.streams, started, cfg);
    }
    // A far source measures its walk, sample and codecs there, and the network from it.
    let (src, codecs, from_far) = if p.far.is_empty() {
        let src = probe::sample_sources(&p.sources, p.streams).map_err(|e| Error::Source {
            path: p.sources.first().cloned().unwrap_or_default(),
            source: e,
        })?;
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        let codecs = probe::codec_rates(&src.blocks, cores.min(p.streams));
        (src, codecs, None)
    } else {
        let far = crate::remote::probe_source::measure(&p.far, p.streams, ssh, cfg.quiet)?;
        (far.src, far.codecs, Some(far.network_rate))
    };
    let (dest, write, per_file, network, same) = match &p.dest {
        ProbeDest::Path(Location::Local(d)) => {
            let dir = probe::existing_dir(d);
            let failed = |e| Error::Destination {
                path: dir.clone(),
                source: e,
                hint: "",
            };
            let fd = probe::open_dir(&dir).map_err(failed)?;
            // A far source's sample stays there: then incompressible blocks.
            let random;
            let data: &[Vec<u8>] = match from_far {
                None => &src.blocks,
                Some(_) => {
                    random = [probe::dest::random_block()];
                    &random
                }
            };
            let write = probe::write_rate(fd.as_fd(), data).map_err(failed)?;
            // The store finishes files on 8 threads.
            let per_file = probe::file_cost(fd.as_fd(), 8).ok();
            // One disk under both (one file system, or partitions, volumes, a loop device's
            // image on the other's disk): reads and writes take turns.
            let same = std::fs::metadata(&dir).is_ok_and(|m| {
                use std::os::unix::fs::MetadataExt;
                probe::share_disk(&src.devices, m.dev())
            });
            let shown = escape(&dir.display().to_string());
            (
                shown,
                Some(write),
                per_file,
                from_far,
                same && from_far.is_none(),
            )
        }
        ProbeDest::Path(Location::Remote(r)) => {
            // Incompressible bytes: the link's raw rate (each codec's ratio is applied
            // to it by `choose`).
            let block = probe::dest::random_block();
            let m = crate::remote::probe::measure(r, p.streams, &block, ssh, cfg.quiet)?;
            let shown = format!(
                "{}:{}",
                escape(&r.host),
                escape(&String::from_utf8_lossy(&r.path))
            );
            (shown, m.write_rate, m.per_file, Some(m.network_rate), false)
        }
        ProbeDest::Ticket(from) => {
            let ticket = resolve_ticket(from)?;
            let block = probe::dest::random_block();
            let (m, peer) = crate::send::probe::probe_receiver(&ticket, p.streams, &block)?;
            let shown = match peer {
                Some(a) => format!("haul recv at {a}"),
                None => "haul recv".into(),
            };
            (shown, m.write_rate, m.per_file, Some(m.network_rate), false)
        }
    };
    let measured = Measured {
        dest,
        write,
        per_file,
        network,
        same_device: same,
    };
    report(src, codecs, measured, p.streams, started, cfg)
}

/// What the destination and the network measured.
struct Measured {
    /// The destination, escaped for printing.
    dest: String,
    write: Option<f64>,
    per_file: Option<f64>,
    network: Option<f64>,
    same_device: bool,
}

/// Picks the setting from the measurements and prints.
fn report(
    src: Sources,
    codecs: Vec<CodecRate>,
    m: Measured,
    streams: usize,
    started: Instant,
    cfg: &Config,
) -> Result<()> {
    let Measured {
        dest,
        write,
        per_file,
        network,
        same_device: same,
    } = m;
    let job = probe::Job {
        files: src.files,
        bytes: src.bytes,
        small_files: src.small_files,
        small_bytes: src.small_bytes,
        small_read: src.small_read,
        read: src.read_rate,
        walk: Some(src.walk_secs),
        write,
        per_file,
        network,
        same_device: same,
    };
    let choice = probe::choose(&job, &codecs);
    let o = Outcome {
        src,
        dest,
        write,
        network,
        per_file,
        codecs,
        choice,
        streams,
        seconds: started.elapsed().as_secs_f64(),
    };
    if cfg.json {
        super::json_out::hold(json(&o), false);
    } else if !cfg.quiet {
        crate::stdio::print(&text(&o));
    }
    Ok(())
}

fn rate(r: Option<f64>) -> String {
    match r {
        Some(r) => format!("{}/s", human(r as u64)),
        None => "-".into(),
    }
}

/// The slowest stage's time with the chosen codec (`probe::model`).
fn predicted(o: &Outcome) -> Option<f64> {
    o.choice.map(|c| c.seconds)
}

fn text(o: &Outcome) -> String {
    let s = &o.src;
    let mut t = format!(
        "source: {} files, {}{}; read {} ({} blocks of {}, {}; {:.0}% cached before)\n",
        s.files,
        human(s.bytes),
        if s.complete {
            ""
        } else {
            " at least (walk stopped)"
        },
        rate(s.read_rate),
        s.sampled,
        human(SAMPLE_BLOCK),
        if s.direct {
            "O_DIRECT: the disk"
        } else {
            "through the page cache"
        },
        s.cached * 100.0,
    );
    if let Some(per) = s.small_read {
        t += &format!(
            "small files: {} read whole, {:.3} ms each; walk {:.1} s\n",
            s.small_files,
            per * 1000.0,
            s.walk_secs
        );
    }
    t += &format!(
        "destination {}: durable write {}, {:.2} ms per file\n",
        o.dest,
        rate(o.write),
        o.per_file.unwrap_or(0.0) * 1000.0
    );
    t += &match o.network {
        Some(n) => format!(
            "network: {} over {} streams (TLS)\n",
            rate(Some(n)),
            o.streams
        ),
        None => "network: none (a copy on this host)\n".into(),
    };
    for c in &o.codecs {
        t += &format!(
            "codec {:<7} {:>13} ratio {:.2}\n",
            c.codec.to_string(),
            rate(Some(c.rate)),
            c.ratio
        );
    }
    match (o.choice, predicted(o)) {
        (Some(c), Some(secs)) => {
            t += &format!(
                "bottleneck: {}; settings: --compress {} --streams {}; predicted: {} in {:.1} s\n",
                c.bottleneck.name(),
                c.codec,
                o.streams,
                rate(Some(c.rate)),
                secs
            );
        }
        _ => t += "nothing to read: no prediction\n",
    }
    t
}

fn json(o: &Outcome) -> String {
    let num = |r: Option<f64>| r.map_or("null".to_string(), |r| format!("{}", r as u64));
    let s = &o.src;
    let codecs: Vec<String> = o
        .codecs
        .iter()
        .map(|c| {
            format!(
                "{{\"codec\":\"{}\",\"rate\":{},\"ratio\":{:.3}}}",
                c.codec, c.rate as u64, c.ratio
            )
        })
        .collect();
    let (bottleneck, codec, r) = match o.choice {
        Some(c) => (
            json_string(c.bottleneck.name()),
            json_string(&c.codec.to_string()),
            num(Some(c.rate)),
        ),
        None => ("null".into(), "null".into(), "null".into()),
    };
    format!(
        concat!(
            "{{\"files\":{},\"bytes\":{},\"walk_complete\":{},\"read_rate\":{},",
            "\"read_direct\":{},\"read_cached\":{:.3},\"write_rate\":{},\"file_seconds\":{},",
            "\"network_rate\":{},\"small_files\":{},\"small_file_seconds\":{},\"walk_seconds\":{:.3},",
            "\"bottleneck\":{},\"compress\":{},\"streams\":{},\"predicted_rate\":{},",
            "\"predicted_seconds\":{},\"seconds\":{:.3},\"codecs\":[{}]}}"
        ),
        s.files,
        s.bytes,
        s.complete,
        num(s.read_rate),
        s.direct,
        s.cached,
        num(o.write),
        o.per_file.map_or("null".into(), |s| format!("{s:.6}")),
        num(o.network),
        s.small_files,
        s.small_read.map_or("null".into(), |s| format!("{s:.6}")),
        s.walk_secs,
        bottleneck,
        codec,
        o.streams,
        r,
        predicted(o).map_or("null".into(), |p| format!("{p:.3}")),
        o.seconds,
        codecs.join(","),
    )
}
