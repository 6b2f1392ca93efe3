//! The network part of `haul probe host:SRC... DST` (a pull): a far end started over ssh
//! (as for `copy`) walks and samples the sources where they live and measures each codec
//! on its sample (`probe`, on that host's data and cores), reports them, then writes
//! incompressible blocks for a few seconds on `--streams` connections this side dials
//! (TLS and routing as a pull would use); this side counts them (`probe::count`): the
//! network in the direction the data would flow. The destination's measurements are
//! the caller's (it is here).

use std::time::Instant;

use super::farend::FarEnd;
use super::probe::finish;
use super::route::Route;
use super::rsh::Rsh;
use super::unexpected;
use super::wire::{Reply, Request, SourceReport};
use crate::config::{RemotePath, SshOptions};
use crate::error::{Error, Result};
use crate::probe::{count, CodecRate, Sources};
use crate::transport::{Role, Ticket};

/// This side stops counting this long after the far end is ready, whatever it does.
const MAX_COUNT: std::time::Duration = std::time::Duration::from_secs(30);
/// Most codecs a report may name (the probe compares four).
const MAX_CODECS: usize = 16;

/// What a far source measured, and the network from it.
#[derive(Debug)]
pub struct FarSource {
    /// The walk and the sample (no blocks: they stay there).
    pub src: Sources,
    /// Each codec's rate and ratio, on the far host's cores.
    pub codecs: Vec<CodecRate>,
    /// Bytes per second that crossed the network, far host to here, over all streams.
    pub network_rate: f64,
}

/// Starts the far end at the sources' host, lets it measure them, and counts what it
/// sends on `streams` connections.
pub fn measure(
    sources: &[RemotePath],
    streams: usize,
    ssh: &SshOptions,
    quiet: bool,
) -> Result<FarSource> {
    let Some(at) = sources.first() else {
        return Err(Error::Usage("probe needs a source".into()));
    };
    let rsh = Rsh::new(ssh.rsh.clone(), true);
    let mut far = FarEnd::start(&rsh, at, ssh, quiet)?;
    far.send(&Request::ProbeSource {
        paths: sources.iter().map(|s| s.path.clone()).collect(),
        // Lossless: validated to be at most MAX_STREAMS.
        streams: streams as u16,
        advertise: ssh.advertise,
        listen: true,
    })?;
    let (src, codecs) = measured(&mut far)?;
    let ready = far.ready("measuring the sources")?;
    let Some(ticket) = ready.ticket else {
        return Err(unexpected(&far, "no ticket"));
    };
    let ticket = Ticket::parse(&ticket)?;
    let route = Route::new(&rsh, at, ticket, ready.port, true, ssh.via_ssh);
    let deadline = Instant::now() + MAX_COUNT;
    let counts = count::count_streams(streams, deadline, || route.dial(Role::ProbeData))?;
    let (received, micros) = count::tally(&counts);
    if received == 0 || micros == 0 {
        return Err(unexpected(&far, "no probe data arrived"));
    }
    let network_rate = received as f64 / (micros as f64 / 1e6);
    finish(
        far,
        FarSource {
            src,
            codecs,
            network_rate,
        },
    )
}

/// Reads what a far source measured (its `SourceProbed`); its error, or what is wrong
/// with the report, otherwise.
pub(super) fn measured(far: &mut FarEnd) -> Result<(Sources, Vec<CodecRate>)> {
    let report = match far.recv("measuring the sources")? {
        Reply::SourceProbed(r) => r,
        Reply::Done(d) => return Err(far.done_error(&d)),
        Reply::Ready { .. } | Reply::Probed { .. } => {
            return Err(unexpected(far, "no measurement of the sources"))
        }
    };
    from_report(&report).map_err(|m| unexpected(far, &m))
}

/// The report a far source sends of what it measured.
pub fn to_report(src: &Sources, codecs: &[CodecRate]) -> SourceReport {
    SourceReport {
        files: src.files,
        bytes: src.bytes,
        complete: src.complete,
        blocks: src.sampled as u32,
        read_rate: src.read_rate.map(|r| r as u64),
        direct: src.direct,
        cached_permille: (src.cached.clamp(0.0, 1.0) * 1000.0).round() as u16,
        small_files: src.small_files,
        small_bytes: src.small_bytes,
        small_read_nanos: src.small_read.map(|s| (s * 1e9) as u64),
        walk_micros: (src.walk_secs * 1e6) as u64,
        codecs: codecs
            .iter()
            .map(|c| {
                (
                    c.codec.to_string(),
                    c.rate as u64,
                    (c.ratio * 1000.0) as u64,
                )
            })
            .collect(),
    }
}

/// The measurements a far source reported; what is wrong with the report otherwise.
pub fn from_report(r: &SourceReport) -> std::result::Result<(Sources, Vec<CodecRate>), String> {
    if r.codecs.len() > MAX_CODECS {
        return Err(format!("{} codecs measured", r.codecs.len()));
    }
    let codecs = r
        .codecs
        .iter()
        .map(|(name, rate, ratio)| {
            let codec = name.parse().map_err(|e: String| e)?;
            Ok(CodecRate {
                codec,
                rate: *rate as f64,
                ratio: (*ratio as f64 / 1000.0).max(1.0),
            })
        })
        .collect::<std::result::Result<Vec<_>, String>>()?;
    let src = Sources {
        files: r.files,
        bytes: r.bytes,
        complete: r.complete,
        sampled: r.blocks as usize,
        read_rate: r.read_rate.map(|x| x as f64),
        direct: r.direct,
        cached: f64::from(r.cached_permille.min(1000)) / 1000.0,
        small_files: r.small_files.min(r.files),
        small_bytes: r.small_bytes.min(r.bytes),
        small_read: r.small_read_nanos.map(|n| n as f64 / 1e9),
        walk_secs: r.walk_micros as f64 / 1e6,
        ..Sources::default()
    };
    Ok((src, codecs))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::Compression;

    #[test]
    fn a_report_carries_what_the_far_source_measured() {
        let src = Sources {
            files: 7,
            bytes: 9 << 20,
            complete: true,
            sampled: 3,
            read_rate: Some(2e8),
            direct: true,
            cached: 0.25,
            small_files: 6,
            small_bytes: 1 << 20,
            small_read: Some(5e-5),
            walk_secs: 0.125,
            ..Sources::default()
        };
        let codecs = [CodecRate {
            codec: Compression::Zstd(3),
            rate: 1.5e8,
            ratio: 2.5,
        }];
        let (back, c) = from_report(&to_report(&src, &codecs)).unwrap();
        assert_eq!((back.files, back.bytes, back.sampled), (7, 9 << 20, 3));
        assert_eq!((back.small_files, back.small_bytes), (6, 1 << 20));
        assert_eq!((back.read_rate, back.cached), (Some(2e8), 0.25));
        assert!((back.small_read.unwrap() - 5e-5).abs() < 1e-12);
        assert_eq!(back.walk_secs, 0.125);
        assert_eq!(
            (c[0].codec, c[0].rate, c[0].ratio),
            (Compression::Zstd(3), 1.5e8, 2.5)
        );
        // A codec this side does not know, or too many, make the report unusable.
        let mut r = to_report(&src, &codecs);
        r.codecs[0].0 = "brotli".into();
        assert!(from_report(&r).is_err());
        r.codecs = vec![("none".into(), 1, 1000); MAX_CODECS + 1];
        assert!(from_report(&r).is_err());
    }
}
