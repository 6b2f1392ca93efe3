//! Pipe mode, sending side: one byte stream (standard input, a file, a command's output)
//! over N data connections, as fast as files and as safe.
//!
//! One thread reads the input in blocks, hashing the whole stream as it goes; the blocks
//! go to the data streams in turn (any stream carries any block), which compress, hash
//! and frame them exactly as file data. The receiver writes strictly in order and says
//! how far it got (`StreamAck`): the sender never holds more than the window beyond what
//! the consumer has written, so a slow consumer stops the reading (and, through its pipe,
//! the producer), and memory stays bounded on both sides.
//!
//! Blocks stay in a replay buffer until the receiver has them. A data stream that
//! breaks re-dials and sends again what it had in flight; a break only the receiver saw
//! is reported with `StreamLost`, and the blocks it lists as missing go out again on any
//! stream. Duplicates are harmless: the receiver keeps one copy of each offset.

mod source;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::{select, Receiver, Sender};

use super::dial::{backoff, gave_up, put, DataConn, Redial};
use super::link::{Link, Polled};
use crate::codec::{unit_hash, Compression, Encoder};
use crate::error::{Error, Result};
use crate::progress::{Counters, Progress};
use crate::protocol::{
    encode_data_header, hashed_parts, set_hash, Codec, Control, FrameKind, ProtocolError, Segment,
};
use crate::transport::{Conn, Role, TransportError};

pub use source::{describe_status, is_dash, PipeFrom};
use source::{Input, Producer};

/// How to send a stream.
#[derive(Clone, Debug)]
pub struct PipeOptions {
    /// Data connections.
    pub streams: usize,
    /// Compression per block.
    pub compress: Compression,
    /// Block size in bytes.
    pub block_size: u64,
    /// Most stream bytes held in memory (read but not yet with the receiver's consumer).
    pub window: u64,
    /// How often a dropped connection is re-dialed before giving up.
    pub retries: u32,
    /// Draw a progress bar (when stderr is a terminal).
    pub progress: bool,
    /// The stream's expected length, if known (for percent and ETA).
    pub size: Option<u64>,
}

/// What the sender reports once the receiver confirmed the stream.
#[derive(Debug)]
pub struct PipeReport {
    /// Stream length.
    pub bytes: u64,
    /// BLAKE3 of the whole stream (the receiver computed the same).
    pub digest: [u8; 32],
    /// Wire bytes, units, reconnects.
    pub counters: Arc<Counters>,
    /// When the transfer started.
    pub started: Instant,
}

/// How often the driver looks at the reader and the streams between control messages.
const POLL: Duration = Duration::from_millis(20);
/// How often an idle stream checks whether the transfer stopped.
const TICK: Duration = Duration::from_millis(200);

/// One block of the stream.
struct Block {
    offset: u64,
    data: Vec<u8>,
}

impl Block {
    fn end(&self) -> u64 {
        self.offset + self.data.len() as u64
    }
}

/// What the reader, the streams and the driver share.
struct Flow {
    state: Mutex<FlowState>,
    moved: Condvar,
    /// Bytes arrived at the receiver without a gap (mirrors `state.have`, read lock-free).
    have: AtomicU64,
    /// The transfer is over (mirrors `state.stop`).
    stopped: AtomicBool,
}

#[derive(Default)]
struct FlowState {
    /// Bytes with the consumer.
    written: u64,
    have: u64,
    /// Bytes that may be in flight beyond `written`; 0 until the receiver said.
    window: u64,
    /// Bytes read from the input.
    read: u64,
    /// Blocks read and not yet known to have arrived, in offset order.
    replay: VecDeque<Arc<Block>>,
    stop: bool,
}

impl Flow {
    fn new() -> Flow {
        Flow {
            state: Mutex::new(FlowState::default()),
            moved: Condvar::new(),
            have: AtomicU64::new(0),
            stopped: AtomicBool::new(false),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, FlowState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The receiver's account: prune what arrived, let the reader go on.
    fn ack(&self, written: u64, have: u64, window: u64, own: u64) {
        let mut g = self.lock();
        g.written = g.written.max(written);
        g.have = g.have.max(have);
        g.window = window.min(own);
        let have = g.have;
        while g.replay.front().is_some_and(|b| b.end() <= have) {
            g.replay.pop_front();
        }
        self.have.store(have, Ordering::Release);
        self.moved.notify_all();
    }

    fn stop(&self) {
        self.lock().stop = true;
        self.stopped.store(true, Ordering::Release);
        self.moved.notify_all();
    }
}

/// Sends the stream from `from`. `dial` opens one authenticated connection of a role.
pub fn send_pipe<D>(
    from: &PipeFrom,
    opts: &PipeOptions,
    key: [u8; 32],
    dial: D,
) -> Result<PipeReport>
where
    D: Fn(Role) -> Result<Conn> + Sync,
{
    let (input, mut producer) = Input::open(from)?;
    let started = Instant::now();
    let counters = Arc::new(Counters::default());
    if let Some(n) = opts.size {
        counters.total_bytes.store(n, Ordering::Relaxed);
    }
    let progress = Progress::start_stream(Arc::clone(&counters), opts.progress);
    let start = Control::StreamStart {
        streams: opts.streams as u16,
        block_size: opts.block_size as u32,
        window: opts.window,
    };
    let mut link = Link::open(&dial, start, opts.retries, &counters)?;
    let flow = Arc::new(Flow::new());
    let (work_tx, work_rx) = crossbeam_channel::unbounded::<Arc<Block>>();
    let (again_tx, again_rx) = crossbeam_channel::unbounded::<Arc<Block>>();
    // Not a scoped thread: a read from a terminal or an idle pipe cannot be interrupted,
    // and a failed transfer must not wait for the producer's next byte.
    let (read_tx, read_rx) = crossbeam_channel::bounded(1);
    {
        let (flow, counters, block) = (Arc::clone(&flow), Arc::clone(&counters), opts.block_size);
        std::thread::Builder::new()
            .name("haul-pipe-read".into())
            .spawn(move || {
                let r = read_loop(input, &flow, &work_tx, block as usize, &counters);
                let _ = read_tx.send(r);
            })
            .map_err(|e| Error::io("starting the reading thread", e))?;
    }

    let result = std::thread::scope(|s| {
        let mut workers = Vec::new();
        for i in 0..opts.streams {
            let (flow, counters, dial, work_rx, again_rx) =
                (&flow, &counters, &dial, work_rx.clone(), again_rx.clone());
            let h = std::thread::Builder::new()
                .name(format!("haul-pipe-{i}"))
                .spawn_scoped(s, move || {
                    let redial = || dial(Role::Data);
                    let link = Redial {
                        dial: &redial,
                        retries: opts.retries,
                        stream: i,
                    };
                    let mut w = Stream::new(&link, key, opts.compress, flow, counters);
                    let r = w.run(&work_rx, &again_rx);
                    if r.is_err() {
                        flow.stop();
                    }
                    r
                })
                .map_err(|e| Error::io("starting a stream thread", e))?;
            workers.push(h);
        }
        drop((work_rx, again_rx));
        let mut driver = Driver {
            link: &mut link,
            flow: &flow,
            again: again_tx,
            own_window: opts.window,
            counters: &counters,
            end: None,
        };
        let outcome = driver.run(&read_rx, &mut producer, &workers);
        flow.stop();
        drop(driver);
        let mut worker_err = None;
        for h in workers {
            match h.join() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    worker_err.get_or_insert(e);
                }
                Err(_) => {
                    worker_err.get_or_insert(Error::io(
                        "stream thread",
                        std::io::Error::other("panicked"),
                    ));
                }
            }
        }
        match (outcome, worker_err) {
            (Ok(end), _) => Ok(end),
            (Err(Error::Transport(_)), Some(w)) => Err(link.remote_reason().unwrap_or(w)),
            (Err(e), _) => Err(e),
        }
    });
    progress.finish();
    match result {
        Ok((bytes, digest)) => {
            link.close();
            Ok(PipeReport {
                bytes,
                digest,
                counters,
                started,
            })
        }
        Err(e) => {
            if !matches!(e, Error::Remote { .. } | Error::Transport(_)) {
                link.tell_error(&e);
            }
            Err(e)
        }
    }
}

/// Reads the input into blocks while the window allows; returns the stream's length and
/// BLAKE3 at its end.
fn read_loop(
    mut input: Input,
    flow: &Flow,
    work: &Sender<Arc<Block>>,
    block: usize,
    counters: &Counters,
) -> Result<(u64, [u8; 32])> {
    let mut hasher = blake3::Hasher::new();
    loop {
        let offset = {
            let mut g = flow.lock();
            loop {
                if g.stop {
                    return Err(Error::io(
                        format!("reading {}", input.what()),
                        std::io::Error::other("the transfer stopped"),
                    ));
                }
                if g.window > 0 && g.read + block as u64 <= g.written + g.window {
                    break g.read;
                }
                g = flow
                    .moved
                    .wait_timeout(g, Duration::from_millis(200))
                    .map(|(g, _)| g)
                    .unwrap_or_else(|p| p.into_inner().0);
            }
        };
        let mut data = vec![0u8; block];
        let n = input.fill(&mut data)?;
        data.truncate(n);
        if n > 0 {
            hasher.update(&data);
            Counters::add(&counters.read_bytes, n as u64);
            let b = Arc::new(Block { offset, data });
            {
                let mut g = flow.lock();
                g.replay.push_back(Arc::clone(&b));
                g.read += n as u64;
            }
            if work.send(b).is_err() {
                return Err(Error::io(
                    format!("reading {}", input.what()),
                    std::io::Error::other("the transfer stopped"),
                ));
            }
        }
        if n < block {
            return Ok((offset + n as u64, *hasher.finalize().as_bytes()));
        }
    }
}

/// The control side of a stream: acks, losses, the end.
struct Driver<'a, 'l> {
    link: &'a mut Link<'l>,
    flow: &'a Flow,
    again: Sender<Arc<Block>>,
    own_window: u64,
    counters: &'a Counters,
    /// Length and digest, once the input ended (sent as StreamEnd).
    end: Option<(u64, [u8; 32])>,
}

impl Driver<'_, '_> {
    fn run(
        &mut self,
        read: &Receiver<Result<(u64, [u8; 32])>>,
        producer: &mut Producer,
        workers: &[std::thread::ScopedJoinHandle<'_, Result<()>>],
    ) -> Result<(u64, [u8; 32])> {
        loop {
            if self.end.is_none() {
                if let Ok(r) = read.try_recv() {
                    let (len, digest) = r?;
                    // The producer's verdict comes before the end is announced: a command
                    // that failed must not look like a complete stream.
                    producer.finish()?;
                    self.end = Some((len, digest));
                    self.link.tell(&Control::StreamEnd { len, digest })?;
                }
            }
            if workers.iter().any(|w| w.is_finished()) {
                return Err(crate::session::lost(std::io::Error::other(
                    "a data stream could not be re-established",
                )));
            }
            match self.link.poll(POLL)? {
                Polled::Nothing => {}
                Polled::Reconnected => {
                    if let Some((len, digest)) = self.end {
                        self.link.tell(&Control::StreamEnd { len, digest })?;
                    }
                }
                Polled::Msg(Control::StreamAck {
                    written,
                    have,
                    window,
                }) => {
                    self.flow.ack(written, have, window, self.own_window);
                    self.counters.done_bytes.store(written, Ordering::Relaxed);
                }
                Polled::Msg(Control::StreamLost { have, got }) => self.resend(have, &got),
                Polled::Msg(Control::Done(summary)) => {
                    let Some(end) = self.end else {
                        return Err(
                            ProtocolError::Unexpected("Done before StreamEnd".into()).into()
                        );
                    };
                    if summary.bytes != end.0 {
                        return Err(ProtocolError::Malformed("Done with another length").into());
                    }
                    self.counters.done_bytes.store(end.0, Ordering::Relaxed);
                    return Ok(end);
                }
                Polled::Msg(Control::Error { code, message }) => {
                    return Err(Error::Remote {
                        side: "receiver",
                        message,
                        code,
                    })
                }
                Polled::Msg(other) => {
                    return Err(ProtocolError::Unexpected(other.name().into()).into())
                }
            }
        }
    }

    /// Queues again every block from `have` on that is not among `got`.
    fn resend(&mut self, have: u64, got: &[u64]) {
        let lost: Vec<Arc<Block>> = {
            let g = self.flow.lock();
            g.replay
                .iter()
                .filter(|b| b.end() > have && got.binary_search(&b.offset).is_err())
                .cloned()
                .collect()
        };
        if !lost.is_empty() {
            crate::progress::warn(&format!(
                "re-sending {} block(s) lost with a dropped connection",
                lost.len()
            ));
        }
        for b in lost {
            let _ = self.again.send(b);
        }
    }
}

/// One data stream of a pipe transfer.
struct Stream<'a> {
    link: &'a Redial<'a>,
    conn: Option<DataConn>,
    key: [u8; 32],
    enc: Encoder,
    flow: &'a Flow,
    counters: &'a Counters,
    /// Blocks written on the current connection that may not have arrived yet.
    outstanding: VecDeque<Arc<Block>>,
    cbuf: Vec<u8>,
    hdr: Vec<u8>,
    head: Vec<u8>,
}

impl<'a> Stream<'a> {
    fn new(
        link: &'a Redial<'a>,
        key: [u8; 32],
        compress: Compression,
        flow: &'a Flow,
        counters: &'a Counters,
    ) -> Stream<'a> {
        Stream {
            link,
            conn: None,
            key,
            enc: Encoder::new(compress),
            flow,
            counters,
            outstanding: VecDeque::new(),
            cbuf: Vec::new(),
            hdr: Vec::new(),
            head: Vec::new(),
        }
    }

    /// Sends blocks (lost ones first) until both queues are closed or the transfer stops.
    fn run(&mut self, work: &Receiver<Arc<Block>>, again: &Receiver<Arc<Block>>) -> Result<()> {
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
            if b.end() <= self.flow.have.load(Ordering::Acquire) {
                continue;
            }
            self.send(b)?;
        }
        if let Some(c) = self.conn.as_mut() {
            let _ = put(c, FrameKind::End, &[], 0, &mut self.head);
            let _ = c.0.shutdown_write();
        }
        Ok(())
    }

    /// Sends `b`; after a broken connection, re-dials and first sends again what the old
    /// one had in flight.
    fn send(&mut self, b: Arc<Block>) -> Result<()> {
        let mut failures = 0u32;
        let mut why: Option<Error> = None;
        loop {
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
                        return Err(match why {
                            Some(w) => gave_up(&w, Some(e)),
                            None => e,
                        })
                    }
                    Err(e) => {
                        failures += 1;
                        if failures > self.link.retries {
                            return Err(match why {
                                Some(w) => gave_up(&w, Some(e)),
                                None => e,
                            });
                        }
                        why.get_or_insert(e);
                        std::thread::sleep(backoff(failures));
                        continue;
                    }
                }
            }
            let r = if why.is_some() {
                self.replay().and_then(|()| self.write(&b))
            } else {
                self.write(&b)
            };
            match r {
                Ok(()) => {
                    self.outstanding.push_back(b);
                    let have = self.flow.have.load(Ordering::Acquire);
                    self.outstanding.retain(|o| o.end() > have);
                    return Ok(());
                }
                Err(e) => {
                    self.conn = None;
                    failures += 1;
                    if failures > self.link.retries {
                        return Err(gave_up(&e, None));
                    }
                    std::thread::sleep(backoff(failures - 1));
                    why = Some(e);
                }
            }
        }
    }

    /// Sends again, on a new connection, what the old one may have lost.
    fn replay(&mut self) -> Result<()> {
        let have = self.flow.have.load(Ordering::Acquire);
        self.outstanding.retain(|o| o.end() > have);
        let blocks: Vec<Arc<Block>> = self.outstanding.iter().cloned().collect();
        for o in blocks {
            self.write(&o)?;
        }
        Ok(())
    }

    /// Compresses, hashes and writes one block as a data unit of file 0.
    fn write(&mut self, b: &Block) -> Result<()> {
        let Some(conn) = self.conn.as_mut() else {
            return Err(crate::session::lost(std::io::Error::other(
                "data stream not connected",
            )));
        };
        let raw = &b.data[..];
        let codec = self.enc.encode(raw, &mut self.cbuf);
        let body: &[u8] = if codec == Codec::Raw { raw } else { &self.cbuf };
        let seg = Segment {
            file: 0,
            offset: b.offset,
            len: raw.len() as u32,
            keep: false,
        };
        encode_data_header(&mut self.hdr, codec, raw.len() as u32, &[seg]);
        let hash = unit_hash(&self.key, hashed_parts(&self.hdr), raw);
        set_hash(&mut self.hdr, &hash);
        let len = self.hdr.len() + body.len();
        put(
            conn,
            FrameKind::Data,
            &[&self.hdr, body],
            len,
            &mut self.head,
        )?;
        Counters::add(&self.counters.units, 1);
        Counters::add(&self.counters.wire_bytes, len as u64);
        Ok(())
    }
}
