//! The receiver's data streams: one worker thread per data connection (frame →
//! decompress → verify → pwrite; in a chain fan-out also → forward), and after `Finish`
//! the wait for units still on their way ([`settle`]).
//!
//! Units that went into a socket that then died are lost silently, so on `Finish` the
//! receiver waits until every file is complete, or it has as many frames as the sender
//! wrote (counted since the current control connection, `units_base`, so a sender that
//! takes over counts only its own), or nothing arrived for 3 s with no worker busy
//! writing; then it asks for what is missing. "Arrived" means bytes, not finished units
//! (`Arriving`): a 4 MiB unit takes seconds on a slow link (`tests/e2e_slow_link.rs`).

use std::io::{self, Read};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::shared::{ms, Shared, TICK};
use crate::codec::Decoder;
use crate::error::{unless_panicked, Error, Result};
use crate::progress::Counters;
use crate::protocol::{body_at, DataHeader, FrameKind, ProtocolError, ReadError};
use crate::session::{frame_reader, watch};
use crate::store::direct::ALIGN;
use crate::store::WriterCache;
use crate::transport::Conn;

/// Starts a worker for a data connection, unless that would exceed the streams the
/// sender may have open.
pub(super) fn spawn_data_worker(shared: &Arc<Shared>, conn: Conn) {
    if shared.active.fetch_add(1, Ordering::AcqRel) >= shared.max_active {
        shared.active.fetch_sub(1, Ordering::AcqRel);
        drop(conn);
        if !shared.surplus_warned.swap(true, Ordering::Relaxed) {
            crate::progress::warn(&format!(
                "closed a data connection beyond the {} the sender may have open",
                shared.max_active
            ));
        }
        return;
    }
    let n = shared.data_conns.fetch_add(1, Ordering::Relaxed);
    shared.touch();
    let s = Arc::clone(shared);
    let r = std::thread::Builder::new()
        .name(format!("haul-recv-{n}"))
        .spawn(move || {
            if let Err(e) = unless_panicked("stream thread", || data_worker(conn, &s)) {
                s.fail(e);
            }
            s.touch();
            s.active.fetch_sub(1, Ordering::AcqRel);
        });
    if r.is_err() {
        shared.active.fetch_sub(1, Ordering::AcqRel);
        shared.fail(Error::io(
            "starting a stream thread",
            io::Error::other("spawn failed"),
        ));
    }
}

/// One data stream: verified units into the store until the End frame. A connection
/// that breaks is not an error here (the sender re-dials and re-sends), nor is one whose
/// frames fail verification (up to a bound, see `integrity`); authentic bad data is.
fn data_worker(mut conn: Conn, shared: &Shared) -> Result<()> {
    if let Some(l) = conn.take_lane_receiver() {
        let s = super::lane::Shared {
            store: &shared.store,
            abort: &shared.abort,
            busy: &shared.busy,
            tick: TICK,
        };
        return super::lane::run(l, s, || {
            shared.units.fetch_add(1, Ordering::AcqRel);
            shared.touch();
        });
    }
    let store = &shared.store;
    if conn.set_read_timeout(Some(TICK)).is_err() {
        return Ok(());
    }
    let mut reader = frame_reader(&conn);
    // A one-segment unit's bytes (a block of a large file) land aligned, for a direct
    // write as they lie (a pack of small files is written buffered anyway).
    reader.align_payloads(body_at(1), ALIGN);
    let mut decoder = Decoder::new(shared.key);
    let peer = conn.peer_desc();
    let forged = |what: &dyn std::fmt::Display| shared.forged.note("data", &peer, what);
    let mut cache = WriterCache::default();
    loop {
        let frame = match reader.read_frame(&mut Arriving(&mut conn, shared)) {
            Ok(Some(f)) => f,
            Ok(None) | Err(ReadError::Truncated) => return Ok(()),
            Err(e) if e.is_timeout() => {
                if shared.abort.load(Ordering::Relaxed) {
                    return Ok(());
                }
                continue;
            }
            // A TLS record that does not authenticate.
            Err(ReadError::Io(e)) if e.kind() == io::ErrorKind::InvalidData => return forged(&e),
            Err(ReadError::Io(_)) => return Ok(()),
            Err(ReadError::Protocol(p @ ProtocolError::Forged(_))) => return forged(&p),
            Err(ReadError::Protocol(p)) => return Err(p.into()),
        };
        match frame.kind {
            FrameKind::End => return Ok(()),
            FrameKind::Control => {
                return Err(
                    ProtocolError::Unexpected("control frame on a data stream".into()).into(),
                )
            }
            FrameKind::Data => {}
        }
        // The payload is not covered by the header's tag: a malformed one may have been
        // altered on the way like one whose hash does not match.
        let h = match DataHeader::parse(frame.payload) {
            Ok(h) => h,
            Err(e) => return forged(&e),
        };
        Counters::add(&store.stats.wire_bytes, frame.payload.len() as u64);
        let unit = match decoder.decode(&h) {
            Ok(u) => u,
            Err(_) => {
                let seg = h.segments().next();
                return forged(&Error::BlockHashMismatch {
                    file: seg.map(|s| store.describe(s.file)).unwrap_or_default(),
                    offset: seg.map(|s| s.offset).unwrap_or(0),
                });
            }
        };
        if let Some(f) = shared.forward.get() {
            f.offer(&h, unit.bytes());
        }
        shared.busy.fetch_add(1, Ordering::AcqRel);
        let written = store.write_unit(&unit, h.segments(), &mut cache);
        shared.busy.fetch_sub(1, Ordering::AcqRel);
        written?;
        shared.units.fetch_add(1, Ordering::AcqRel);
        shared.touch();
    }
}

/// A data connection as its frame reader sees it: a read that brings bytes is activity.
/// Without it only a finished unit counted, so a unit still arriving when `Finish` came
/// (a slow link or a low cap, where one 4 MiB unit takes seconds, the previous one done
/// more than `watch::SETTLE` before) was taken for one lost with its connection and sent again.
struct Arriving<'a>(&'a mut Conn, &'a Shared);

impl Read for Arriving<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.0.read(buf)?;
        if n > 0 {
            self.1.touch();
            // The progress line moves as bytes come, not by whole units.
            Counters::add(&self.1.store.stats.arrived_bytes, n as u64);
        }
        Ok(n)
    }
}

/// After Finish: waits until every file is complete, or every unit the sender wrote
/// (`units`, counted from `base`) has arrived, or nothing has arrived for a while (so what
/// is missing was lost), or `timeout`.
pub(super) fn settle(shared: &Shared, base: u64, timeout: Duration, units: u64) -> Result<()> {
    let start = Instant::now();
    loop {
        if let Some(e) = shared.take_fatal() {
            return Err(e);
        }
        // Everything the sender wrote has arrived, or nothing has for a while: what is
        // still missing was lost with a dropped connection.
        let received = shared.units.load(Ordering::Acquire).saturating_sub(base);
        if watch::settled(
            shared.store.incomplete(),
            received,
            units,
            ms(shared.idle_for()),
            shared.busy.load(Ordering::Acquire) != 0,
            ms(start.elapsed()),
            ms(timeout),
        ) {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
