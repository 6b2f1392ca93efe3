//! The network part of `haul probe SRC... host:DST`: a far end started over ssh (as for
//! `copy`) measures the durable write rate and the cost per file at DST, then counts what
//! this side's probe streams carry to it for a few seconds: `--streams` connections,
//! TLS and routing as a copy would use, incompressible bytes (the codec's gain is
//! accounted for by the caller from its own measurements; the streams are
//! `probe::count`'s).

use std::time::Duration;

use super::farend::FarEnd;
use super::route::Route;
use super::rsh::Rsh;
use super::unexpected;
use super::wire::{Reply, Request};
use crate::config::{RemotePath, SshOptions};
use crate::error::{exit, Error, Result};
use crate::probe::{count, FarMeasure};
use crate::transport::{Role, Ticket};

/// Starts the far end at `dest`'s host, lets it measure, and sends `block` over and over
/// on `streams` connections for `count::SEND_TIME`.
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
        everywhere: false,
    })?;
    let ready = far.ready("measuring the destination")?;
    let Some(ticket) = ready.ticket else {
        return Err(unexpected(&far, "no ticket"));
    };
    let ticket = Ticket::parse(&ticket)?;
    let route = Route::new(&rsh, dest, ticket, ready.port, true, ssh.via_ssh);
    count::send_streams(streams, block, || route.dial(Role::ProbeData))?;
    let measured = probed(&mut far)?;
    finish(far, measured)
}

/// Reads what a far destination measured and counted of the probe's data (its `Probed`).
pub(super) fn probed(far: &mut FarEnd) -> Result<FarMeasure> {
    match far.recv("counting the probe's data")? {
        Reply::Probed {
            write_rate,
            file_micros,
            received,
            micros,
        } => FarMeasure::from_report(write_rate, file_micros, received, micros)
            .ok_or_else(|| unexpected(far, "no probe data arrived")),
        Reply::Done(_) | Reply::Ready { .. } | Reply::SourceProbed(_) => {
            Err(unexpected(far, "no probe result"))
        }
    }
}

/// Waits for the far end's `Done` after a probe; `value` when it succeeded.
pub(super) fn finish<T>(mut far: FarEnd, value: T) -> Result<T> {
    match far.finish(Some(Duration::from_secs(10))) {
        Some(d) if d.code == exit::OK => Ok(value),
        Some(d) => Err(far.done_error(&d)),
        None => Err(Error::Host {
            host: far.host.clone(),
            message: "the far end ended without confirming (see above)".into(),
            code: exit::NETWORK,
        }),
    }
}
