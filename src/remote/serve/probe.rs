//! The far end of `haul probe SRC... host:DST`: measures the durable write rate and the
//! cost per file where the copy would write, then counts what the local side's data
//! connections carry for a few seconds (the network rate over the streams a copy would
//! use, through the same TLS). Nothing stays at the destination.

use std::io::{self, Read};
use std::net::IpAddr;
use std::time::{Duration, Instant};

use super::endpoint::{listen, path_of, AcceptPool, Out};
use crate::error::{Error, Result};
use crate::probe;
use crate::remote::wire::{self, Reply};
use crate::transport::{Conn, Role};

/// A data connection that stays silent this long ends the count (the local side sends
/// for a few seconds without pause).
const SILENCE: Duration = Duration::from_secs(10);
/// The count ends this long after the first connection, whatever the local side does.
const MAX_COUNT: Duration = Duration::from_secs(30);

/// Measures, listens, counts, and reports `Probed`.
pub(super) fn serve_probe(
    out: &Out,
    dest: &[u8],
    streams: u16,
    advertise: Option<IpAddr>,
) -> Result<()> {
    let dir = probe::existing_dir(&path_of(dest));
    // Content does not matter to a disk: one pseudo-random block, written over and over.
    let mut block = vec![0u8; probe::SAMPLE_BLOCK as usize];
    blake3::Hasher::new().finalize_xof().fill(&mut block);
    let write = probe::write_rate(&dir, &[block]).map_err(|e| Error::Destination {
        path: dir.clone(),
        source: e,
        hint: "",
    })?;
    let per_file = probe::file_cost(&dir, 8).ok();
    let (listener, ticket, port) = listen(advertise, false)?;
    out.line(&wire::encode(&Reply::Ready {
        ticket: Some(ticket.encode()),
        port: Some(port),
        single_file: false,
        rename: None,
    }));
    let (_handle, accepted) = listener.spawn_acceptor();
    let pool = AcceptPool::new(accepted);
    let counted: Vec<Result<Count>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..streams.max(1))
            .map(|_| s.spawn(|| pool.take(Role::Data).and_then(count)))
            .collect();
        hs.into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(Error::io("counting", io::Error::other("panicked"))))
            })
            .collect()
    });
    let counts = counted.into_iter().collect::<Result<Vec<Count>>>()?;
    let received = counts.iter().map(|c| c.bytes).sum();
    let first = counts.iter().filter_map(|c| c.first).min();
    let last = counts.iter().filter_map(|c| c.last).max();
    let micros = match (first, last) {
        (Some(a), Some(b)) => b.duration_since(a).as_micros() as u64,
        _ => 0,
    };
    out.line(&wire::encode(&Reply::Probed {
        write_rate: Some(write as u64),
        file_micros: per_file.map(|s| (s * 1e6) as u64),
        received,
        micros,
    }));
    Ok(())
}

/// What one data connection carried, and when.
struct Count {
    bytes: u64,
    first: Option<Instant>,
    last: Option<Instant>,
}

/// Reads `conn` to its end, counting; bounded by [`SILENCE`] per read and [`MAX_COUNT`]
/// in all, so a local side that stalls cannot hold the far end.
fn count(mut conn: Conn) -> Result<Count> {
    let fail = |e| Error::io("counting the probe's data", e);
    conn.set_read_timeout(Some(SILENCE)).map_err(fail)?;
    let started = Instant::now();
    let mut buf = vec![0u8; 256 << 10];
    let mut c = Count {
        bytes: 0,
        first: None,
        last: None,
    };
    while started.elapsed() < MAX_COUNT {
        let n = match conn.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(fail(e)),
        };
        let now = Instant::now();
        c.first.get_or_insert(now);
        c.last = Some(now);
        c.bytes += n as u64;
    }
    Ok(c)
}
