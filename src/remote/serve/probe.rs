//! The far end of `haul probe SRC... host:DST`: measures the durable write rate and the
//! cost per file where the copy would write, then counts what the local side's probe
//! streams carry for a few seconds (the network rate over the streams a copy would use,
//! through the same TLS). Nothing stays at the destination. The measurements themselves
//! are `probe::dest` and `probe::count`, which a waiting `haul recv` shares. And the far
//! end of `haul probe host:SRC... DST`: the sources' walk, sample and codecs measured
//! here, then the probe streams written from here to the local side, or (remote to
//! remote, `h1:SRC h2:DST`) to the far destination whose ticket `Go` brings.

use std::io;
use std::net::IpAddr;
use std::os::fd::AsFd;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::endpoint::{listen, path_of, AcceptPool, Out};
use super::stdin::{read_request, watch_stdin};
use crate::error::{Error, Result};
use crate::probe;
use crate::remote::wire::{self, Reply, Request};
use crate::send::ticket_dialer;
use crate::session::lost;
use crate::transport::{Role, Ticket};

/// The count ends this long after the far end is ready, whatever the local side does
/// (it dials through ssh, maybe a tunnel, then sends for a few seconds).
const MAX_COUNT: Duration = Duration::from_secs(30);

/// Measures, listens, counts, and reports `Probed`.
pub(super) fn serve_probe(
    out: &Out,
    dest: &[u8],
    streams: u16,
    advertise: Option<IpAddr>,
    everywhere: bool,
) -> Result<()> {
    let dir = probe::dest::existing_dir(&path_of(dest));
    let failed = |e| Error::Destination {
        path: dir.clone(),
        source: e,
        hint: "",
    };
    let fd = probe::dest::open_dir(&dir).map_err(failed)?;
    let measured = probe::dest::measure(fd.as_fd()).map_err(failed)?;
    let (listener, ticket, port) = listen(advertise, everywhere)?;
    out.ready(&ticket, port, false);
    let (_handle, accepted) = listener.spawn_acceptor();
    let pool = AcceptPool::new(accepted);
    let deadline = Instant::now() + MAX_COUNT;
    let counts = probe::count::count_streams(usize::from(streams), deadline, || {
        pool.take(Role::ProbeData)
    })?;
    let (received, micros) = probe::count::tally(&counts);
    out.line(&wire::encode(&Reply::Probed {
        write_rate: Some(measured.write_rate as u64),
        file_micros: measured.per_file.map(|s| (s * 1e6) as u64),
        received,
        micros,
    }));
    Ok(())
}

/// The far end of `haul probe host:SRC... DST`: walks and samples the sources here,
/// measures each codec on the sample with this host's cores, reports `SourceProbed`,
/// then writes incompressible blocks on `streams` connections for
/// `probe::count::SEND_TIME`: connections the local side opens to this side's listener
/// (`listen`), or (remote to remote) ones dialed to the far destination's ticket, which
/// `Go` brings (that side counts).
pub(super) fn serve_probe_source(
    out: &Out,
    input: io::BufReader<io::Stdin>,
    finished: &Arc<AtomicBool>,
    paths: &[Vec<u8>],
    streams: u16,
    advertise: Option<IpAddr>,
    listen_here: bool,
) -> Result<()> {
    // Remote to remote, `Go` is still to come on stdin.
    let mut waiting = if listen_here {
        watch_stdin(input, Arc::clone(finished));
        None
    } else {
        Some(input)
    };
    let paths: Vec<_> = paths.iter().map(|p| path_of(p)).collect();
    let streams = usize::from(streams).max(1);
    let src = probe::sample_sources(&paths, streams).map_err(|e| Error::Source {
        path: paths.first().cloned().unwrap_or_default(),
        source: e,
    })?;
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let codecs = probe::codec_rates(&src.blocks, cores.min(streams));
    out.line(&wire::encode(&Reply::SourceProbed(
        crate::remote::probe_source::to_report(&src, &codecs),
    )));
    drop(src);
    let block = probe::dest::random_block();
    if let Some(mut input) = waiting.take() {
        out.line(&wire::encode(&Reply::Ready {
            ticket: None,
            port: None,
            single_file: false,
            rename: None,
        }));
        let ticket = match read_request(&mut input) {
            Ok(Request::Go {
                ticket: Some(t), ..
            }) => Ticket::parse(&t)?,
            Ok(_) => {
                return Err(crate::protocol::ProtocolError::Unexpected(
                    "expected Go with a ticket from the local haul".into(),
                )
                .into())
            }
            Err(None) => {
                return Err(lost(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the local haul went away before the probe's streams",
                )))
            }
            Err(Some(e)) => return Err(e),
        };
        watch_stdin(input, Arc::clone(finished));
        // Probe streams always go through TLS, as the copy's would by default.
        let dial = ticket_dialer(&ticket, true);
        return probe::count::send_streams(streams, &block, || dial(Role::ProbeData));
    }
    let (listener, ticket, port) = listen(advertise, false)?;
    out.ready(&ticket, port, false);
    let (_handle, accepted) = listener.spawn_acceptor();
    let pool = AcceptPool::new(accepted);
    probe::count::send_streams(streams, &block, || pool.take(Role::ProbeData))
}
