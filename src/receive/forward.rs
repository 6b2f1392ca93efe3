//! A relay's data path in a chain fan-out: every verified unit that holds data the next
//! receiver wants is re-hashed with that receiver's block key and written, re-sealed, on
//! one of the relay's own data connections to it, while the unit is still arriving at the
//! relay (pipelined per block, not per file). A whole unit keeps its header and compressed
//! body; a pack the next hop wants only part of is cut down to those files and sent raw.
//!
//! The units pass through a bounded channel to one writer thread per stream, so a slow
//! next hop holds back the relay's receiving streams, and through them the sender, rather
//! than filling memory: at most `2 × streams` units wait. Each writer opens its connection
//! to a new next hop at once, before any unit is due to it, so that a hop given nothing
//! for a while (it has everything, or what it lacks waits for `Finish`) still has its
//! sender's connections and does not take it for gone. A unit whose connection breaks,
//! or that was hashed for a hop the chain has since left behind, is dropped; the next hop
//! asks for it again after `Finish` (the normal lost-data round).

use std::collections::HashSet;
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::RwLock;
use std::time::Duration;

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};

use crate::codec::unit_hash;
use crate::error::{Error, Result};
use crate::protocol::{
    encode_data_header, hashed_parts, set_hash, Codec, DataHeader, FrameKind, Sealer, Segment,
};
use crate::session::sealer;
use crate::transport::{self, Conn, Role, Ticket};

/// How long writer threads sleep between looks at an empty queue or a missing hop.
const TICK: Duration = Duration::from_millis(100);
/// Attempts to re-dial the same hop after a data connection broke.
const REDIALS: u32 = 3;
/// Longest a write to the next hop may block: a hop that takes no byte for this long is
/// stopped, hung or cut off (the connection is dropped and re-dialed; after [`REDIALS`],
/// the chain re-forms around it). Pipe mode's relay has the same bound.
const WRITE_STALL: Duration = Duration::from_secs(10);

/// Where forwarded units go now: one hop, numbered so that units hashed for an earlier one
/// are recognised.
struct Target {
    generation: u64,
    hop: Option<(Ticket, [u8; 32])>,
}

/// The relay's forwarding state, shared by its receiving streams (which offer units), its
/// control loop (which says what the next hop wants and where it is) and the writers.
pub(super) struct Forward {
    /// Files the next hop wants data of.
    wanted: RwLock<HashSet<u64>>,
    target: RwLock<Target>,
    encrypt: bool,
    tx: Sender<(u64, Vec<u8>)>,
    rx: Receiver<(u64, Vec<u8>)>,
    /// Units queued or being written.
    pending: AtomicUsize,
    /// Units written to the current hop.
    sent: AtomicU64,
    /// The generation of a hop a writer could not reach (0: none); when it is the current
    /// one, the control loop re-forms the chain.
    broken: AtomicU64,
    stop: AtomicBool,
}

impl Forward {
    pub(super) fn new(streams: usize, encrypt: bool) -> Forward {
        let (tx, rx) = crossbeam_channel::bounded(streams.max(1) * 2);
        Forward {
            wanted: RwLock::new(HashSet::new()),
            target: RwLock::new(Target {
                generation: 0,
                hop: None,
            }),
            encrypt,
            tx,
            rx,
            pending: AtomicUsize::new(0),
            sent: AtomicU64::new(0),
            broken: AtomicU64::new(0),
            stop: AtomicBool::new(false),
        }
    }

    /// Starts `streams` writer threads.
    pub(super) fn spawn(self: &std::sync::Arc<Self>, streams: usize) -> Result<()> {
        for i in 0..streams {
            let f = std::sync::Arc::clone(self);
            std::thread::Builder::new()
                .name(format!("haul-fwd-{i}"))
                .spawn(move || f.writer())
                .map_err(|e| Error::io("starting a forwarding thread", e))?;
        }
        Ok(())
    }

    /// The next hop wants data of these files too.
    pub(super) fn want(&self, ids: impl IntoIterator<Item = u64>) {
        if let Ok(mut w) = self.wanted.write() {
            w.extend(ids);
        }
    }

    /// Sends from now on to `hop` (None: the chain ends here); units hashed for the hop
    /// before are dropped. What the new hop wants is not known yet: what the old one
    /// wanted also held what the hops after it wanted, and a receiver fails on data for a
    /// file it did not ask for. It is learned from its next `Need` (batches to come, or
    /// what it misses at `Finish`).
    pub(super) fn retarget(&self, hop: Option<Ticket>) {
        if let Ok(mut w) = self.wanted.write() {
            w.clear();
        }
        if let Ok(mut t) = self.target.write() {
            t.generation += 1;
            t.hop = hop.map(|h| {
                let key = h.secret.block_key();
                (h, key)
            });
        }
        self.sent.store(0, Ordering::Release);
    }

    /// Whether a writer found the current hop unreachable.
    pub(super) fn broken(&self) -> bool {
        let current = self.target.read().map(|t| t.generation).unwrap_or(0);
        self.broken.load(Ordering::Acquire) == current
    }

    /// Units written to the current hop (its `Finish` count).
    pub(super) fn sent(&self) -> u64 {
        self.sent.load(Ordering::Acquire)
    }

    /// Waits until every offered unit is written (or dropped).
    pub(super) fn wait_idle(&self) {
        while self.pending.load(Ordering::Acquire) > 0 && !self.stop.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Ends the writers (each closes its connection with an End frame).
    pub(super) fn stop(&self) {
        self.stop.store(true, Ordering::Release);
    }

    /// Passes on the part of a verified unit (`raw`: its raw bytes) that the next hop
    /// wants; blocks while the queue is full.
    pub(super) fn offer(&self, h: &DataHeader<'_>, raw: &[u8]) {
        let (generation, key) = match self.target.read() {
            Ok(t) => match &t.hop {
                Some((_, key)) => (t.generation, *key),
                None => return,
            },
            Err(_) => return,
        };
        let Some(payload) = self.payload(h, raw, &key) else {
            return;
        };
        self.pending.fetch_add(1, Ordering::AcqRel);
        if self.tx.send((generation, payload)).is_err() {
            self.pending.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// The unit as the next hop gets it: only the segments of files it wants, hashed with
    /// its key; None when it wants none of them.
    fn payload(&self, h: &DataHeader<'_>, raw: &[u8], key: &[u8; 32]) -> Option<Vec<u8>> {
        let wanted = self.wanted.read().ok()?;
        let segs: Vec<Segment> = h.segments().collect();
        let keep: Vec<bool> = segs.iter().map(|s| wanted.contains(&s.file)).collect();
        drop(wanted);
        if !keep.contains(&true) {
            return None;
        }
        let [fixed, table] = h.hashed();
        if !keep.contains(&false) {
            // All of it: the same header and body, hashed for the next hop.
            let hash = unit_hash(key, [fixed, table], raw);
            let mut p = Vec::with_capacity(fixed.len() + 32 + table.len() + h.body.len());
            p.extend_from_slice(fixed);
            p.extend_from_slice(&hash);
            p.extend_from_slice(table);
            p.extend_from_slice(h.body);
            return Some(p);
        }
        // Part of a pack of small files: those it wants, uncompressed.
        let (mut chosen, mut bytes, mut pos) = (Vec::new(), Vec::new(), 0usize);
        for (s, k) in segs.iter().zip(&keep) {
            let len = if s.keep { 0 } else { s.len as usize };
            if *k {
                chosen.push(*s);
                bytes.extend_from_slice(raw.get(pos..pos + len)?);
            }
            pos += len;
        }
        let mut p = Vec::with_capacity(64 + chosen.len() * 20 + bytes.len());
        encode_data_header(&mut p, Codec::Raw, bytes.len() as u32, &chosen);
        let hash = unit_hash(key, hashed_parts(&p), &bytes);
        set_hash(&mut p, &hash);
        p.extend_from_slice(&bytes);
        Some(p)
    }

    /// One writer: takes units and writes them to the current hop, (re)dialing as needed;
    /// while it has none to write, it holds a connection to the current hop open.
    fn writer(&self) {
        let mut conn: Option<(u64, Conn, Sealer)> = None;
        // The hop this writer last opened a connection to ahead of any unit.
        let mut opened = 0u64;
        loop {
            let (generation, payload) = match self.rx.recv_timeout(TICK) {
                Ok(u) => u,
                Err(RecvTimeoutError::Timeout) if !self.stop.load(Ordering::Acquire) => {
                    self.open(&mut conn, &mut opened);
                    continue;
                }
                Err(_) => break,
            };
            self.write(&mut conn, generation, &payload);
            self.pending.fetch_sub(1, Ordering::AcqRel);
        }
        if let Some((_, mut c, mut s)) = conn {
            let _ = c.write_all(&s.header(FrameKind::End, 0));
            let _ = c.shutdown_write();
        }
    }

    /// Opens a connection to the current hop before it is given any unit, once per hop. A
    /// receiver with no data connection that gets nothing for its `--timeout` takes its
    /// sender for gone and quits without a word, and the next hop may be given nothing
    /// for far longer: it has everything so far (a re-run that only an earlier replica
    /// needs), or the chain re-formed around a failed hop before it and what it missed
    /// waits for `Finish`. An open connection tells it that this relay is there. Failing
    /// here is no failure of the hop: the first unit for it dials again.
    fn open(&self, conn: &mut Option<(u64, Conn, Sealer)>, opened: &mut u64) {
        let (generation, hop) = match self.target.read() {
            Ok(t) => (t.generation, t.hop.as_ref().map(|(h, _)| h.clone())),
            Err(_) => return,
        };
        let Some(hop) = hop else { return };
        if *opened == generation || conn.as_ref().is_some_and(|(g, _, _)| *g == generation) {
            return;
        }
        *opened = generation;
        if let Ok(c) = connect(&hop, self.encrypt) {
            let s = sealer(&c);
            *conn = Some((generation, c, s));
        }
    }

    /// Writes one unit hashed for hop `generation`; drops it when that hop is no longer
    /// the target or cannot be reached.
    fn write(&self, conn: &mut Option<(u64, Conn, Sealer)>, generation: u64, payload: &[u8]) {
        for attempt in 0..=REDIALS {
            let hop = match self.target.read() {
                Ok(t) if t.generation == generation => t.hop.as_ref().map(|(h, _)| h.clone()),
                _ => None,
            };
            let Some(hop) = hop else { return };
            if conn.as_ref().is_some_and(|(g, _, _)| *g != generation) {
                *conn = None;
            }
            if conn.is_none() {
                if attempt > 0 {
                    std::thread::sleep(Duration::from_millis(250 << attempt.min(3)));
                }
                match connect(&hop, self.encrypt) {
                    Ok(c) => {
                        let s = sealer(&c);
                        *conn = Some((generation, c, s));
                    }
                    Err(_) => continue,
                }
            }
            if let Some((_, c, s)) = conn.as_mut() {
                let mut frame = Vec::with_capacity(payload.len() + 64);
                frame.extend_from_slice(&s.header(FrameKind::Data, payload.len()));
                frame.extend_from_slice(payload);
                if c.write_all(&frame).and_then(|()| c.flush()).is_ok() {
                    self.sent.fetch_add(1, Ordering::AcqRel);
                    return;
                }
            }
            *conn = None;
        }
        self.broken.store(generation, Ordering::Release);
    }
}

/// A data connection to `hop`, its writes bounded by [`WRITE_STALL`].
fn connect(hop: &Ticket, encrypt: bool) -> Result<Conn> {
    let c = transport::connect(hop, Role::Data, encrypt)?;
    c.set_write_timeout(Some(WRITE_STALL))
        .map_err(crate::session::lost)?;
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::Decoder;

    fn unit(key: &[u8; 32], segs: &[Segment], raw: &[u8]) -> Vec<u8> {
        let mut p = Vec::new();
        encode_data_header(&mut p, Codec::Raw, raw.len() as u32, segs);
        let hash = unit_hash(key, hashed_parts(&p), raw);
        set_hash(&mut p, &hash);
        p.extend_from_slice(raw);
        p
    }

    fn seg(file: u64, offset: u64, len: u32) -> Segment {
        Segment {
            file,
            offset,
            len,
            keep: false,
        }
    }

    #[test]
    fn forwards_what_the_next_hop_wants_hashed_with_its_key() {
        let (k1, k2) = ([1u8; 32], [2u8; 32]);
        let f = Forward::new(1, false);
        f.retarget(Some(Ticket {
            addrs: vec![],
            fingerprint: [0; 32],
            secret: crate::transport::Secret::from_bytes(k2),
        }));
        let key2 = f.target.read().unwrap().hop.as_ref().unwrap().1;
        let segs = [seg(1, 0, 3), seg(2, 0, 2), seg(3, 0, 4)];
        let p = unit(&k1, &segs, b"aaabbcccc");
        let h = DataHeader::parse(&p).unwrap();
        assert!(
            f.payload(&h, b"aaabbcccc", &key2).is_none(),
            "nothing wanted"
        );

        f.want([1, 2, 3]);
        let whole = f.payload(&h, b"aaabbcccc", &key2).unwrap();
        let wh = DataHeader::parse(&whole).unwrap();
        assert_eq!(
            Decoder::new(key2).decode(&wh).unwrap().bytes(),
            b"aaabbcccc"
        );
        assert!(
            Decoder::new(k1).decode(&wh).is_err(),
            "hashed for the next hop"
        );

        let g = Forward::new(1, false);
        g.want([1, 3]);
        let part = g.payload(&h, b"aaabbcccc", &key2).unwrap();
        let ph = DataHeader::parse(&part).unwrap();
        assert_eq!(Decoder::new(key2).decode(&ph).unwrap().bytes(), b"aaacccc");
        let files: Vec<u64> = ph.segments().map(|s| s.file).collect();
        assert_eq!(files, vec![1, 3]);
    }
}
