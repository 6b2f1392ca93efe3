//! The network part of `haul probe SRC... host:DST`: a far end started over ssh (as for
//! `copy`) measures the durable write rate and the cost per file at DST, then counts what
//! this side's data connections carry to it for a few seconds: `--streams` connections,
//! TLS and routing as a copy would use, incompressible bytes (the codec's gain is
//! accounted for by the caller from its own measurements).

use std::io::Write;
use std::time::{Duration, Instant};

use super::farend::FarEnd;
use super::route::Route;
use super::rsh::Rsh;
use super::unexpected;
use super::wire::{Reply, Request};
use crate::config::{RemotePath, SshOptions};
use crate::error::{exit, Error, Result};
use crate::transport::{Role, Ticket};

/// How long each data connection sends.
const SEND_TIME: Duration = Duration::from_secs(3);

/// What the far end measured.
#[derive(Debug, Clone, Copy)]
pub struct FarMeasure {
    /// Durable write rate at the destination, bytes per second.
    pub write_rate: Option<f64>,
    /// Seconds each file adds at the destination.
    pub per_file: Option<f64>,
    /// Bytes per second that crossed the network over all streams.
    pub network_rate: f64,
}

/// Starts the far end at `dest`'s host, lets it measure, and sends `block` over and over
/// on `streams` connections for [`SEND_TIME`].
pub fn measure(
    dest: &RemotePath,
    streams: usize,
    block: &[u8],
    ssh: &SshOptions,
    quiet: bool,
) -> Result<FarMeasure> {
    let rsh = Rsh::new(ssh.rsh.clone(), true);
    let mut far = FarEnd::start(&rsh, dest, ssh, quiet)?;
    far.send(&Request::Probe {
        dest: dest.path.clone(),
        // Lossless: validated to be at most MAX_STREAMS.
        streams: streams as u16,
        advertise: ssh.advertise,
    })?;
    let ready = far.ready("measuring the destination")?;
    let Some(ticket) = ready.ticket else {
        return Err(unexpected(&far, "no ticket"));
    };
    let ticket = Ticket::parse(&ticket)?;
    let route = Route::new(&rsh, dest, ticket, ready.port, true, ssh.via_ssh);
    let sent: Result<()> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..streams)
            .map(|_| s.spawn(|| send_for(&route, block)))
            .collect();
        hs.into_iter().try_for_each(|h| {
            h.join().unwrap_or_else(|_| {
                Err(Error::io(
                    "sending the probe's data",
                    std::io::Error::other("panicked"),
                ))
            })
        })
    });
    sent?;
    let measured = match far.recv("counting the probe's data")? {
        Reply::Probed {
            write_rate,
            file_micros,
            received,
            micros,
        } if micros > 0 && received > 0 => FarMeasure {
            write_rate: write_rate.map(|r| r as f64),
            per_file: file_micros.map(|m| m as f64 / 1e6),
            network_rate: received as f64 / (micros as f64 / 1e6),
        },
        Reply::Probed { .. } => return Err(unexpected(&far, "no probe data arrived")),
        Reply::Done { .. } | Reply::Ready { .. } => {
            return Err(unexpected(&far, "no probe result"));
        }
    };
    match far.finish(Some(Duration::from_secs(10))) {
        Some(d) if d.code == exit::OK => Ok(measured),
        Some(d) => Err(far.done_error(&d)),
        None => Err(Error::Host {
            host: far.host.clone(),
            message: "the far end ended without confirming (see above)".into(),
            code: exit::NETWORK,
        }),
    }
}

/// One data connection: `block` over and over for [`SEND_TIME`], then a clean end.
fn send_for(route: &Route, block: &[u8]) -> Result<()> {
    let mut conn = route.dial(Role::Data)?;
    let fail = |e| Error::io("sending the probe's data", e);
    let started = Instant::now();
    while started.elapsed() < SEND_TIME {
        conn.write_all(block).map_err(fail)?;
    }
    conn.flush().map_err(fail)?;
    conn.shutdown_write().map_err(fail)
}
