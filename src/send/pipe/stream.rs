//! One data stream of a pipe transfer: takes blocks (lost ones first), compresses, hashes
//! and frames them as file data units of file 0; after a broken connection, re-dials and
//! first sends again what the old one may have lost. When a chain fan-out moved on to
//! the next receiver, the stream follows (the driver sends that one what it lacks).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::{select, Receiver};

use super::flow::{Block, Flow, InFlight};
use crate::codec::tree::stream_unit_hash;
use crate::codec::{Compression, Encoder};
use crate::error::{Error, Result};
use crate::progress::Counters;
use crate::protocol::{encode_data_header, hashed_parts, set_hash, Codec, FrameKind, Segment};
use crate::send::dial::{backoff, gave_up, put, put_unit, DataConn, Redial};
use crate::transport::TransportError;

/// How often an idle stream checks whether the transfer stopped.
const TICK: Duration = Duration::from_millis(200);

/// One data stream of a pipe transfer.
pub(super) struct Stream<'a> {
    link: &'a Redial<'a>,
    conn: Option<DataConn>,
    /// The target `conn` (or the last failure) belongs to.
    generation: u64,
    enc: Encoder,
    flow: &'a Flow,
    counters: &'a Counters,
    /// Blocks written on the current connection that may not have arrived yet.
    outstanding: InFlight,
    cbuf: Vec<u8>,
    hdr: Vec<u8>,
    head: Vec<u8>,
}

impl<'a> Stream<'a> {
    pub(super) fn new(
        link: &'a Redial<'a>,
        compress: Compression,
        streams: usize,
        flow: &'a Flow,
        counters: &'a Counters,
    ) -> Stream<'a> {
        Stream {
            link,
            conn: None,
            generation: 0,
            enc: Encoder::new(compress, streams),
            flow,
            counters,
            outstanding: InFlight::default(),
            cbuf: Vec::new(),
            hdr: Vec::new(),
            head: Vec::new(),
        }
    }

    /// Sends blocks (lost ones first) until both queues are closed or the transfer stops.
    pub(super) fn run(
        &mut self,
        work: &Receiver<Arc<Block>>,
        again: &Receiver<Arc<Block>>,
    ) -> Result<()> {
        let mut work_open = true;
        while !self.flow.stopped.load(Ordering::Acquire) {
            let next = match again.try_recv() {
                Ok(b) => Some(b),
                Err(_) if work_open => select! {
                    recv(again) -> b => match b {
                        Ok(b) => Some(b),
                        Err(_) => break,
                    },
                    recv(work) -> b => match b {
                        Ok(b) => Some(b),
                        Err(_) => {
                            work_open = false;
                            None
                        }
                    },
                    default(TICK) => None,
                },
                Err(_) => select! {
                    recv(again) -> b => match b {
                        Ok(b) => Some(b),
                        Err(_) => break,
                    },
                    default(TICK) => None,
                },
            };
            let Some(b) = next else { continue };
            b.again.store(false, Ordering::Release);
            if b.end() <= self.flow.have.load(Ordering::Acquire) {
                continue;
            }
            self.send(b)?;
        }
        if let Some(c) = self.conn.as_mut() {
            let gate = self.link.pace.gate();
            let _ = put(c, gate.as_ref(), FrameKind::End, &[], 0, &mut self.head);
            let _ = c.conn.shutdown_write();
        }
        Ok(())
    }

    /// Sends `b`; after a broken connection, re-dials and first sends again what the old
    /// one had in flight. When every re-dial fails and a chain can go on without this
    /// receiver, waits for it to and sends `b` to the next one.
    fn send(&mut self, b: Arc<Block>) -> Result<()> {
        let mut failures = 0u32;
        let mut why: Option<Error> = None;
        loop {
            let now = self.link.target.generation();
            if now != self.generation {
                // The chain moved on: the driver sends the new receiver all it lacks, and
                // what went wrong with the one before is no news.
                self.generation = now;
                self.conn = None;
                self.outstanding.clear();
                (failures, why) = (0, None);
            }
            if self.conn.is_none() {
                match self.link.open() {
                    Ok(c) => {
                        if let Some(w) = &why {
                            crate::progress::warn(&format!(
                                "data stream {} reconnected ({w})",
                                self.link.stream
                            ));
                            Counters::add(&self.counters.reconnects, 1);
                        }
                        self.conn = Some(c);
                    }
                    Err(
                        e @ Error::Transport(
                            TransportError::AuthRejected | TransportError::PeerUnauthenticated,
                        ),
                    ) => {
                        let e = match why.take() {
                            Some(w) => gave_up(&w, Some(e)),
                            None => e,
                        };
                        self.give_up(now, e)?;
                        failures = 0;
                        continue;
                    }
                    Err(e) => {
                        failures += 1;
                        if failures > self.link.retries {
                            let e = match why.take() {
                                Some(w) => gave_up(&w, Some(e)),
                                None => e,
                            };
                            self.give_up(now, e)?;
                            failures = 0;
                            continue;
                        }
                        why.get_or_insert(e);
                        std::thread::sleep(backoff(failures));
                        continue;
                    }
                }
            }
            let r = if why.is_some() {
                self.replay().and_then(|()| self.write(&b, true))
            } else {
                self.write(&b, true)
            };
            match r {
                Ok(()) => {
                    let have = self.flow.have.load(Ordering::Acquire);
                    self.outstanding.wrote(b, have);
                    return Ok(());
                }
                Err(e) => {
                    self.conn = None;
                    failures += 1;
                    if failures > self.link.retries {
                        self.give_up(now, gave_up(&e, None))?;
                        (failures, why) = (0, None);
                        continue;
                    }
                    std::thread::sleep(backoff(failures - 1));
                    why = Some(e);
                }
            }
        }
    }

    /// The receiver of target `generation` cannot be reached (`e`): Ok once the chain
    /// went on with the next one, else `e`.
    fn give_up(&mut self, generation: u64, e: Error) -> Result<()> {
        if !self.link.target.wait_moved(generation) {
            return Err(e);
        }
        self.outstanding.clear();
        Ok(())
    }

    /// Sends again, on a new connection, what the old one may have lost.
    fn replay(&mut self) -> Result<()> {
        let have = self.flow.have.load(Ordering::Acquire);
        for o in self.outstanding.replay(have) {
            self.write(&o, false)?;
        }
        Ok(())
    }

    /// Compresses, hashes and writes one block as a data unit of file 0; a `fresh` one (not
    /// sent before) counts in `sent_bytes` piece by piece as it goes.
    fn write(&mut self, b: &Block, fresh: bool) -> Result<()> {
        let Some(conn) = self.conn.as_mut() else {
            return Err(crate::session::lost(std::io::Error::other(
                "data stream not connected",
            )));
        };
        let raw = &b.data[..];
        let (codec, packed) = self.enc.encode(raw, &mut self.cbuf);
        let packed = packed.len();
        let body_len = if codec == Codec::Raw {
            raw.len()
        } else {
            packed
        };
        let seg = Segment {
            file: 0,
            offset: b.offset,
            len: raw.len() as u32,
            keep: false,
        };
        encode_data_header(&mut self.hdr, codec, raw.len() as u32, &[seg]);
        let hash = stream_unit_hash(&conn.key, hashed_parts(&self.hdr), &b.cv);
        set_hash(&mut self.hdr, &hash);
        let len = self.hdr.len() + body_len;
        let before = crate::send::sample::before_write(&self.enc, &conn.conn);
        let started = std::time::Instant::now();
        let pace = self.link.pace;
        let progress = Share::new(&self.counters.sent_bytes, fresh, raw.len(), len);
        let pay = |n: usize| {
            pace.take(n);
            progress.went(n);
        };
        let gate = pace.gate_paying(&pay);
        let gate = gate.as_ref();
        let wrote = {
            if codec == Codec::Raw && conn.conn.is_encrypted() {
                // The block stays in the replay window: copied into the codec's buffer (a
                // block's size once the codec ran; grown to one without a codec) and sealed
                // there, so it goes in one gathering write rather than as 64 KiB copies.
                if self.cbuf.len() < raw.len() {
                    self.cbuf.resize(raw.len(), 0);
                }
                let copy = &mut self.cbuf[..raw.len()];
                copy.copy_from_slice(raw);
                put_unit(conn, gate, &self.hdr, copy, &mut self.head)
            } else if codec == Codec::Raw {
                // Unencrypted: written straight from the block.
                put(
                    conn,
                    gate,
                    FrameKind::Data,
                    &[&self.hdr, raw],
                    len,
                    &mut self.head,
                )
            } else {
                // A replay compresses the block again: this output can be sealed in place.
                put_unit(
                    conn,
                    gate,
                    &self.hdr,
                    &mut self.cbuf[..packed],
                    &mut self.head,
                )
            }
        };
        progress.end(wrote.is_ok());
        wrote?;
        let sample = crate::send::sample::link_sample(&self.enc, &conn.conn, before);
        self.enc.wrote(started.elapsed(), sample);
        if let Some(l) = self.enc.last_level() {
            Counters::add(&self.counters.codec_units[l], 1);
        }
        Counters::add(&self.counters.units, 1);
        self.link.target.count(conn.generation);
        Counters::add(&self.counters.wire_bytes, len as u64);
        Ok(())
    }
}

/// A fresh block's share of `sent_bytes` while its frame goes out: each piece of the frame
/// counts its part of the block's raw bytes (compressed or not); a write that fails takes
/// back what it counted (the block is sent again).
struct Share<'a> {
    sent: &'a std::sync::atomic::AtomicU64,
    fresh: bool,
    raw: u64,
    wire: u64,
    counted: std::cell::Cell<u64>,
}

impl<'a> Share<'a> {
    fn new(sent: &'a std::sync::atomic::AtomicU64, fresh: bool, raw: usize, wire: usize) -> Self {
        Share {
            sent,
            fresh,
            raw: raw as u64,
            wire: (wire as u64).max(1),
            counted: std::cell::Cell::new(0),
        }
    }

    /// `n` more bytes of the frame may go.
    fn went(&self, n: usize) {
        if !self.fresh {
            return;
        }
        let have = self.counted.get();
        let part = (n as u64 * self.raw / self.wire).min(self.raw - have);
        self.counted.set(have + part);
        Counters::add(self.sent, part);
    }

    /// The frame is written (`ok`: all of it counts) or failed (none of it does).
    fn end(&self, ok: bool) {
        if !self.fresh {
            return;
        }
        let have = self.counted.get();
        match ok {
            true => Counters::add(self.sent, self.raw - have),
            false => {
                self.sent.fetch_sub(have, Ordering::Relaxed);
            }
        }
    }
}
