//! A pipe receiver's data connections: one thread each, reading frames, verifying each
//! stream block (a raw one where it lies, a compressed one decompressed into a recycled
//! buffer, a relay keeping its compressed body too) and putting it into the reorder
//! window.

use std::io;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::slots::Slot;
use super::window::{Held, Packed, Shared, TICK};
use crate::codec::{aligned_start, Decoder};
use crate::error::{unless_panicked, Error, Result};
use crate::progress::Counters;
use crate::protocol::{body_at, Codec, DataHeader, FrameKind, ProtocolError, ReadError};
use crate::session::frame_reader;
use crate::store::direct::ALIGN;
use crate::transport::Conn;

pub(super) fn spawn_reader(shared: &Arc<Shared>, conn: Conn) {
    let Some(slot) = shared.slots.take(shared.now_ms()) else {
        return;
    };
    let n = shared.data_conns.fetch_add(1, Ordering::Relaxed);
    shared.touch();
    let (s, mine) = (Arc::clone(shared), Arc::clone(&slot));
    let r = std::thread::Builder::new()
        .name(format!("haul-pipe-recv-{n}"))
        .spawn(move || {
            match unless_panicked("stream thread", || read_loop(conn, &s, &mine)) {
                Ok(true) => {}
                Ok(false) => s.lost.store(true, Ordering::Release),
                Err(e) => s.fail(e),
            }
            s.touch();
            s.slots.free(&mine);
        });
    if r.is_err() {
        shared.slots.free(&slot);
        shared.fail(Error::io(
            "starting a stream thread",
            io::Error::other("spawn failed"),
        ));
    }
}

/// One data connection: verified blocks into the window until its End frame (`true`) or
/// until it breaks (`false`: what it carried may be lost). Frames that fail verification
/// cost the connection (up to the transfer's bound); authentic nonsense is an error. A
/// connection whose slot a newer one took (`slots`) ends as a broken one.
fn read_loop(mut conn: Conn, shared: &Shared, slot: &Slot) -> Result<bool> {
    if conn.set_read_timeout(Some(TICK)).is_err() {
        return Ok(false);
    }
    let mut reader = frame_reader(&conn);
    // A raw block's bytes (one segment) land aligned, for a direct write as they lie.
    reader.align_payloads(body_at(1), ALIGN);
    let mut decoder = Decoder::new(shared.key);
    let peer = conn.peer_desc();
    let forged = |what: &dyn std::fmt::Display| -> Result<bool> {
        shared.forged.note("data", &peer, what).map(|()| false)
    };
    loop {
        let frame = match reader.read_frame(&mut Heard(&mut conn, shared, slot)) {
            Ok(Some(f)) => f,
            Ok(None) | Err(ReadError::Truncated) => return Ok(false),
            Err(e) if e.is_timeout() => {
                if shared.abort.load(Ordering::Acquire) {
                    return Ok(true);
                }
                if slot.evicted() {
                    conn.abort();
                    return Ok(false);
                }
                continue;
            }
            Err(ReadError::Io(e)) if e.kind() == io::ErrorKind::InvalidData => {
                conn.abort();
                return forged(&e);
            }
            Err(ReadError::Io(_)) => return Ok(false),
            Err(ReadError::Protocol(p @ ProtocolError::Forged(_))) => {
                conn.abort();
                return forged(&p);
            }
            Err(ReadError::Protocol(p)) => return Err(p.into()),
        };
        match frame.kind {
            FrameKind::End => return Ok(true),
            FrameKind::Control => {
                return Err(
                    ProtocolError::Unexpected("control frame on a data stream".into()).into(),
                )
            }
            FrameKind::Data => {}
        }
        let h = match DataHeader::parse(frame.payload) {
            Ok(h) => h,
            Err(e) => {
                conn.abort();
                return forged(&e);
            }
        };
        Counters::add(&shared.counters.wire_bytes, frame.payload.len() as u64);
        let seg = {
            let mut segs = h.segments();
            let (Some(seg), None) = (segs.next(), segs.next()) else {
                conn.abort();
                return forged(&"stream block with several segments");
            };
            seg
        };
        // Checked before verification: the block's hash depends on its place in the
        // stream, so a block out of shape cannot be verified, nor be authentic.
        if seg.file != 0
            || seg.keep
            || seg.len != h.raw_len
            || seg.len == 0
            || u64::from(seg.len) > shared.block
            || seg.offset % shared.block != 0
        {
            conn.abort();
            return forged(&"stream block out of shape");
        }
        let offset = seg.offset;
        let held = if h.codec == Codec::Raw {
            // Verified where it lies; the frame's buffer itself goes to the window.
            let cv = match decoder.verify_stream_raw(&h, offset) {
                Ok(cv) => cv,
                Err(e) => {
                    conn.abort();
                    return forged(&format!("stream block failed verification ({e:?})"));
                }
            };
            let body = h.body.len();
            let Some((buf, payload)) = reader.take_frame(shared.buffer()) else {
                return Err(Error::io(
                    "reading a stream block",
                    io::Error::other("lost frame"),
                ));
            };
            Held {
                buf,
                range: payload.end - body..payload.end,
                cv,
                packed: None,
            }
        } else {
            let mut buf = shared.buffer();
            let at = aligned_start(&mut buf, h.raw_len as usize);
            match decoder.decode_stream_at(&h, offset, &mut buf, at) {
                Ok(cv) => Held {
                    range: at..buf.len(),
                    packed: packed(shared, &h, buf.len() - at),
                    buf,
                    cv,
                },
                Err(e) => {
                    shared.recycle(buf);
                    conn.abort();
                    return forged(&format!("stream block failed verification ({e:?})"));
                }
            }
        };
        Counters::add(&shared.counters.units, 1);
        shared.insert(offset, held)?;
        shared.touch();
    }
}

/// A data connection read so that every read bringing bytes counts as hearing from it
/// (its slot's clock), not only a finished frame: on a slow link one 4 MiB frame can take
/// longer than [`super::slots::STALE`], and a connection still carrying it is not one
/// that vanished, whose slot a new connection may take.
struct Heard<'a>(&'a mut Conn, &'a Shared, &'a Slot);

impl io::Read for Heard<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.0.read(buf)?;
        if n > 0 {
            self.2.heard(self.1.now_ms());
            self.1.moved();
            // The progress line moves as bytes come, not by whole blocks written in order.
            Counters::add(&self.1.counters.arrived_bytes, n as u64);
        }
        Ok(n)
    }
}

/// A relay's copy of compressed block `h`'s body (decoded to `raw` bytes and verified), so
/// the next hop gets what the sender chose; none where the body is no smaller than the
/// block, which bounds the copies by the window (a sender sends such a block raw anyway).
fn packed(shared: &Shared, h: &DataHeader<'_>, raw: usize) -> Option<Packed> {
    if !shared.keep_packed || h.body.len() >= raw {
        return None;
    }
    let mut body = shared.buffer();
    body.clear();
    body.extend_from_slice(h.body);
    Some(Packed {
        codec: h.codec,
        body,
    })
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::time::{Duration, Instant};

    use super::*;
    use crate::session::sealer;

    #[test]
    fn a_frame_still_arriving_counts_as_hearing_from_its_connection() {
        let shared = Shared::for_tests(64 << 10, 4);
        let slot = shared.slots.take(shared.now_ms()).unwrap();
        let taken_at = slot.heard_at();
        let (mut tx, rx) = Conn::pair().unwrap();
        let header = sealer(&tx).header(FrameKind::Data, 60 << 10);
        let (s, mine) = (Arc::clone(&shared), Arc::clone(&slot));
        let reading = std::thread::spawn(move || read_loop(rx, &s, &mine));
        tx.write_all(&header).unwrap();
        // The frame's body trickles in; not one frame is finished.
        std::thread::sleep(Duration::from_millis(300));
        tx.write_all(&[0u8; 1000]).unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        while slot.heard_at() < taken_at + 300 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        let heard = slot.heard_at();
        shared.abort.store(true, Ordering::Release);
        drop(tx);
        let _ = reading.join();
        assert!(
            heard >= taken_at + 300,
            "bytes arriving 300 ms in left the slot heard at {heard} ms (taken at {taken_at})"
        );
    }
}
