//! The network part of a probe, both ends: the prober writes one incompressible block over
//! and over on each of its streams for [`SEND_TIME`]; the measuring end reads them to
//! their end, counting, within a deadline; the rate is all bytes over the time from the
//! first byte to the last (so the streams' connection set-up is not counted, and every
//! stream's bytes are).
//!
//! Shared by `haul probe SRC host:DST` (the far end counts: `remote::probe`,
//! `remote::serve::probe`) and `haul probe SRC --to TICKET` (the waiting `haul recv`
//! counts: `send::probe`, `receive::probe`). The streams are authenticated connections
//! (`Role::ProbeData`, TLS): what they carry is counted and dropped, never used. Not
//! here: dialing and accepting them, what each codec would gain (the caller applies it).

use std::io::{self, Read, Write};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::transport::Conn;

/// How long each probe stream sends.
pub const SEND_TIME: Duration = Duration::from_secs(3);
/// What one read takes at most: a TLS read returns up to 256 KiB.
const READ_BUF: usize = 256 << 10;

/// What a destination across a network measured.
#[derive(Debug, Clone, Copy)]
pub struct FarMeasure {
    /// Durable write rate at the destination, bytes per second.
    pub write_rate: Option<f64>,
    /// Seconds each file adds at the destination.
    pub per_file: Option<f64>,
    /// Bytes per second that crossed the network over all streams.
    pub network_rate: f64,
}

impl FarMeasure {
    /// The measure from the numbers the far side reports (`write_rate` in bytes per
    /// second, `file_micros` per file, `received` bytes in `micros`); `None` when no
    /// probe data arrived.
    pub fn from_report(
        write_rate: Option<u64>,
        file_micros: Option<u64>,
        received: u64,
        micros: u64,
    ) -> Option<FarMeasure> {
        (received > 0 && micros > 0).then(|| FarMeasure {
            write_rate: write_rate.map(|r| r as f64),
            per_file: file_micros.map(|m| m as f64 / 1e6),
            network_rate: received as f64 / (micros as f64 / 1e6),
        })
    }
}

/// What one probe stream carried, and when.
#[derive(Debug, Clone, Copy, Default)]
pub struct Count {
    /// Bytes read.
    pub bytes: u64,
    /// When the first arrived.
    pub first: Option<Instant>,
    /// When the last arrived.
    pub last: Option<Instant>,
}

/// All streams together: bytes, and microseconds from the first byte to the last.
pub fn tally(counts: &[Count]) -> (u64, u64) {
    let received = counts.iter().map(|c| c.bytes).sum();
    let first = counts.iter().filter_map(|c| c.first).min();
    let last = counts.iter().filter_map(|c| c.last).max();
    let micros = match (first, last) {
        (Some(a), Some(b)) => b.duration_since(a).as_micros() as u64,
        _ => 0,
    };
    (received, micros)
}

/// Reads `conn` to its end, counting, until `deadline` at the latest: a prober that stalls
/// or never ends holds this side no longer than that.
pub fn count(mut conn: Conn, deadline: Instant) -> Result<Count> {
    let fail = |e| Error::io("counting the probe's data", e);
    let mut buf = vec![0u8; READ_BUF];
    let mut c = Count::default();
    while let Some(left) = deadline
        .checked_duration_since(Instant::now())
        .filter(|d| !d.is_zero())
    {
        conn.set_read_timeout(Some(left)).map_err(fail)?;
        let n = match conn.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                break
            }
            Err(e) => return Err(fail(e)),
        };
        let now = Instant::now();
        c.first.get_or_insert(now);
        c.last = Some(now);
        c.bytes += n as u64;
    }
    Ok(c)
}

/// Counts `streams` connections at once, each taken with `take` (which gives up by
/// `deadline`), each read until `deadline` at the latest.
pub fn count_streams(
    streams: usize,
    deadline: Instant,
    take: impl Fn() -> Result<Conn> + Sync,
) -> Result<Vec<Count>> {
    let take = &take;
    let counted: Vec<Result<Count>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..streams.max(1))
            .map(|_| s.spawn(move || take().and_then(|c| count(c, deadline))))
            .collect();
        hs.into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(Error::io("counting", io::Error::other("panicked"))))
            })
            .collect()
    });
    counted.into_iter().collect()
}

/// Opens `streams` connections with `dial` and writes `block` over and over on each for
/// [`SEND_TIME`], then ends each cleanly.
pub fn send_streams(
    streams: usize,
    block: &[u8],
    dial: impl Fn() -> Result<Conn> + Sync,
) -> Result<()> {
    let dial = &dial;
    let sent: Vec<Result<()>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..streams.max(1))
            .map(|_| s.spawn(move || dial().and_then(|c| send_for(c, block))))
            .collect();
        hs.into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| {
                    Err(Error::io(
                        "sending the probe's data",
                        io::Error::other("panicked"),
                    ))
                })
            })
            .collect()
    });
    sent.into_iter().collect()
}

/// One stream: `block` over and over for [`SEND_TIME`], then a clean end.
fn send_for(mut conn: Conn, block: &[u8]) -> Result<()> {
    let fail = |e| Error::io("sending the probe's data", e);
    let started = Instant::now();
    while started.elapsed() < SEND_TIME {
        conn.write_all(block).map_err(fail)?;
    }
    conn.flush().map_err(fail)?;
    conn.shutdown_write().map_err(fail)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_are_counted_to_their_end_and_summed() {
        let (a, b) = Conn::pair().unwrap();
        let block = vec![7u8; 1 << 16];
        let deadline = Instant::now() + Duration::from_secs(60);
        let counter = std::thread::spawn(move || count(b, deadline).unwrap());
        let mut a = a;
        for _ in 0..5 {
            a.write_all(&block).unwrap();
        }
        a.shutdown_write().unwrap();
        let c = counter.join().unwrap();
        assert_eq!(c.bytes, 5 << 16);
        let (received, micros) = tally(&[c, Count::default(), c]);
        assert_eq!(received, 10 << 16);
        assert_eq!(
            micros,
            c.last.unwrap().duration_since(c.first.unwrap()).as_micros() as u64
        );
        assert!(FarMeasure::from_report(None, None, 0, 5).is_none());
        let m = FarMeasure::from_report(Some(9), Some(1500), 4_000_000, 2_000_000).unwrap();
        assert_eq!((m.network_rate, m.per_file), (2_000_000.0, Some(0.0015)));
    }

    #[test]
    fn a_silent_stream_is_counted_only_until_the_deadline() {
        let (_a, b) = Conn::pair().unwrap();
        let c = count(b, Instant::now() + Duration::from_millis(50)).unwrap();
        assert_eq!((c.bytes, c.first), (0, None));
    }
}
