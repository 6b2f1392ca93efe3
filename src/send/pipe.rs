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
//!
//! In a chain fan-out every receiver acknowledges no more than the chain after it has,
//! so the replay buffer also holds what the second receiver lacks: when the first is
//! gone, the link goes on with the second, and every kept block from that one's first
//! `StreamAck` on goes out again (a receiver that lacks bytes no longer kept is failed
//! in turn rather than given a gap).

mod flow;
#[cfg(test)]
pub(super) mod sim;
mod source;
mod stream;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};

use super::dial::Redial;
use super::link::{streams_broke, Link, Polled};
use super::pace::Pacer;
use super::report::{has_chain, successors};
use super::target::Target;
use crate::codec::tree::{block_cv, is_tree_block, TreeHash};
use crate::codec::Compression;
use crate::error::{unless_panicked, Error, Result};
use crate::progress::{Counters, Progress};
use crate::protocol::{Chain, Control, ProtocolError, Replica};
use crate::transport::{Conn, Role};

use flow::{Block, Flow, Pool};
pub use source::{describe_status, is_dash, PipeFrom};
use source::{Input, Producer};
use stream::Stream;

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
    /// Bandwidth cap in bytes per second of wire bytes, all streams together.
    pub limit: Option<u64>,
    /// `--keep-cache`: leave what is read from a file in the page cache.
    pub keep_cache: bool,
    /// A chain fan-out: the receivers after the first, in order (None: one receiver).
    pub chain: Option<Chain>,
    /// How messages and the report name the first receiver (in a chain fan-out).
    pub label: String,
    /// `--cc`: the congestion control of the data connections (None: BBR where offered).
    pub congestion: Option<String>,
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
    /// A chain fan-out: the chain the first receiver got.
    pub chain: Option<Chain>,
    /// A chain fan-out: what became of each receiver (the first included when it failed
    /// or answered), as the sender and the receivers reported it.
    pub replicas: Vec<Replica>,
    /// The congestion control of the data connections and why (None: not TCP).
    pub congestion: Option<(String, String)>,
}

/// How often the driver looks at the reader and the streams between control messages.
const POLL: Duration = Duration::from_millis(20);
/// How often the driver says it is still there when it has nothing else to say (well
/// inside the receiver's `--timeout`, at least 1 s).
const KEEPALIVE: Duration = Duration::from_millis(500);
/// How long the receiver may say nothing before its control connection counts as dead.
const SILENCE: Duration = Duration::from_secs(30);

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
    let (input, mut producer) = Input::open(from, opts.keep_cache)?;
    let started = Instant::now();
    let counters = Arc::new(Counters::default());
    if let Some(n) = opts.size {
        counters.total_bytes.store(n, Ordering::Relaxed);
    }
    let pace = Arc::new(Pacer::new(Arc::clone(&counters), opts.limit));
    let _control = super::pace::control::listen(&pace);
    let pace = &*pace;
    let progress = Progress::start_stream(Arc::clone(&counters), opts.progress);
    // Blocks of a power-of-two size are subtrees of the stream's BLAKE3 tree (codec::tree).
    let block_size = tree_block(opts.block_size);
    // The chain goes down with hop tickets and this run's nonce (`send::vouch`).
    let (chain, vouching) = super::vouch::prepare(&opts.chain)?;
    let start = Control::StreamStart {
        streams: opts.streams as u16,
        block_size: block_size as u32,
        window: opts.window,
        chain: chain.clone().unwrap_or_default(),
    };
    let encrypt = chain.as_ref().is_none_or(|c| c.encrypt);
    let target = Target::new(&dial, key, has_chain(&chain), encrypt);
    target.use_congestion(opts.congestion.as_deref())?;
    let succ = successors(&opts.label, &chain);
    let mut link = Link::open(&target, start, opts.retries, &counters, succ)?;
    let flow = Arc::new(Flow::new());
    let (work_tx, work_rx) = crossbeam_channel::unbounded::<Arc<Block>>();
    let (again_tx, again_rx) = crossbeam_channel::unbounded::<Arc<Block>>();
    // Not a scoped thread: a read from a terminal or an idle pipe cannot be interrupted,
    // and a failed transfer must not wait for the producer's next byte.
    let (read_tx, read_rx) = crossbeam_channel::bounded(1);
    {
        let (flow, counters, block, window) = (
            Arc::clone(&flow),
            Arc::clone(&counters),
            block_size,
            opts.window,
        );
        std::thread::Builder::new()
            .name("haul-pipe-read".into())
            .spawn(move || {
                let r = unless_panicked("reading thread", || {
                    read_loop(input, &flow, &work_tx, (block as usize, window), &counters)
                });
                let _ = read_tx.send(r);
            })
            .map_err(|e| Error::io("starting the reading thread", e))?;
    }

    let result = std::thread::scope(|s| {
        let mut workers = Vec::new();
        for i in 0..opts.streams {
            let (flow, counters, target, work_rx, again_rx) =
                (&flow, &counters, &target, work_rx.clone(), again_rx.clone());
            let h = std::thread::Builder::new()
                .name(format!("haul-pipe-{i}"))
                .spawn_scoped(s, move || {
                    let link = Redial {
                        target,
                        retries: opts.retries,
                        stream: i,
                        pace,
                    };
                    let mut w = Stream::new(&link, opts.compress, opts.streams, flow, counters);
                    let r = w.run(&work_rx, &again_rx);
                    if r.is_err() {
                        flow.stop();
                    }
                    r
                })
                .map_err(|e| Error::io("starting a stream thread", e))?;
            workers.push(h);
        }
        drop(again_rx);
        // Not 0 when the first receiver could not be reached at all.
        let generation = link.generation();
        let mut driver = Driver {
            link: &mut link,
            flow: &flow,
            again: again_tx,
            work: work_rx,
            own_window: opts.window,
            counters: &counters,
            end: None,
            told: Instant::now(),
            heard: Instant::now(),
            generation,
            moved: false,
        };
        let outcome = driver.run(&read_rx, &mut producer, &workers);
        flow.stop();
        target.stop();
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
            let replicas =
                link.settled(|r| vouching.as_ref().is_some_and(|v| v.proven(r, &digest)));
            drop(link);
            Ok(PipeReport {
                bytes,
                digest,
                counters,
                started,
                chain: opts.chain.clone(),
                replicas,
                congestion: target.congestion(),
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

/// The stream's block size: `--block-size` rounded down to a power of two (at least
/// 64 KiB by the configuration's bounds), which the stream's hash needs.
fn tree_block(block_size: u64) -> u64 {
    let b = if block_size.is_power_of_two() {
        block_size
    } else {
        1u64 << (63 - block_size.leading_zeros())
    };
    debug_assert!(is_tree_block(b));
    b
}

/// Reads the input into blocks while the window allows; returns the stream's length and
/// BLAKE3 at its end.
fn read_loop(
    mut input: Input,
    flow: &Flow,
    work: &Sender<Arc<Block>>,
    (block, window): (usize, u64),
    counters: &Counters,
) -> Result<(u64, [u8; 32])> {
    let mut tree = TreeHash::new();
    let pool = Arc::new(Pool::new(window, block as u64));
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
        let mut data = pool.take(block);
        let n = input.fill(&mut data)?;
        data.truncate(n);
        if n > 0 {
            // The block's one hashing on this side: its chaining value authenticates it
            // (the streams' unit hashes cover it) and builds the stream's BLAKE3.
            if offset == 0 {
                tree.first(&data);
            }
            let cv = block_cv(offset, &data);
            tree.push(cv);
            Counters::add(&counters.read_bytes, n as u64);
            let b = Arc::new(Block {
                offset,
                data,
                cv,
                pool: Arc::clone(&pool),
                again: std::sync::atomic::AtomicBool::new(false),
            });
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
            let digest = tree.finish().ok_or_else(|| {
                Error::io(
                    format!("reading {}", input.what()),
                    std::io::Error::other("the stream's hash is incomplete"),
                )
            })?;
            return Ok((offset + n as u64, digest));
        }
    }
}

/// The control side of a stream: acks, losses, the end.
struct Driver<'a, 'l> {
    link: &'a mut Link<'l>,
    flow: &'a Flow,
    again: Sender<Arc<Block>>,
    /// The blocks read and not yet taken by a stream (the driver drains it when every
    /// kept block goes out again).
    work: Receiver<Arc<Block>>,
    own_window: u64,
    counters: &'a Counters,
    /// Length and digest, once the input ended (sent as StreamEnd).
    end: Option<(u64, [u8; 32])>,
    /// When we last wrote on the control connection, and last heard on it.
    told: Instant,
    heard: Instant,
    /// The receiver the link talks to (see `Link::generation`).
    generation: u64,
    /// A chain fan-out went on with the next receiver, whose first `StreamAck` is awaited.
    moved: bool,
}

impl Driver<'_, '_> {
    fn run(
        &mut self,
        read: &Receiver<Result<(u64, [u8; 32])>>,
        producer: &mut Producer,
        workers: &[std::thread::ScopedJoinHandle<'_, Result<()>>],
    ) -> Result<(u64, [u8; 32])> {
        loop {
            self.follow()?;
            if self.end.is_none() {
                if let Ok(r) = read.try_recv() {
                    let (len, digest) = r?;
                    // The producer's verdict comes before the end is announced: a command
                    // that failed must not look like a complete stream.
                    producer.finish()?;
                    self.end = Some((len, digest));
                    self.link.tell(&Control::StreamEnd { len, digest })?;
                    self.told = Instant::now();
                }
            }
            if workers.iter().any(|w| w.is_finished()) {
                return Err(crate::session::lost(std::io::Error::other(
                    "a data stream could not be re-established",
                )));
            }
            if self.link.data_broken() {
                // Its data streams gave up on it and wait for the chain to go on.
                self.link.fail_over(streams_broke())?;
                continue;
            }
            if self.told.elapsed() >= KEEPALIVE {
                // A producer that has not written yet (a backup waiting for a checkpoint)
                // must not look like a vanished sender.
                self.link.tell(&Control::Keepalive)?;
                self.told = Instant::now();
            }
            if self.heard.elapsed() >= SILENCE {
                // The receiver acknowledges at least every few seconds: a control
                // connection silent this long is dead without having said so.
                let why = crate::session::lost(std::io::Error::other(format!(
                    "nothing from the receiver for {} s",
                    SILENCE.as_secs()
                )));
                self.link.reconnect(&why)?;
                self.reconnected()?;
                continue;
            }
            let polled = self.link.poll(POLL)?;
            if !matches!(polled, Polled::Nothing) {
                self.heard = Instant::now();
            }
            match polled {
                Polled::Nothing => {}
                Polled::Reconnected => self.reconnected()?,
                Polled::Msg(Control::StreamAck {
                    written,
                    have,
                    window,
                }) if self.moved => self.take_over(written, have, window)?,
                Polled::Msg(Control::StreamAck {
                    written,
                    have,
                    window,
                }) => {
                    self.flow.ack(written, have, window, self.own_window);
                    self.counters.done_bytes.store(written, Ordering::Relaxed);
                }
                Polled::Msg(Control::StreamLost { have, got }) => self.resend(have, &got),
                // A chain fan-out: what became of the receivers after the first.
                Polled::Msg(Control::Replicas(r)) => self.link.heard(r),
                Polled::Msg(Control::Proof(p)) => self.link.proved(p),
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
                    self.link.done(&summary);
                    return Ok(end);
                }
                Polled::Msg(Control::Error { code, message }) => {
                    // In a chain the others go on without this one (its consumer failed).
                    let failed = self.link.fail_over(Error::Remote {
                        side: "receiver",
                        message,
                        code,
                    });
                    match (failed, self.end) {
                        (Ok(()), _) => {}
                        // It failed at its end and reported the receivers after it
                        // complete first: the stream is delivered to them.
                        (Err(_), Some(end)) if self.link.delivered() => return Ok(end),
                        (Err(e), _) => return Err(e),
                    }
                }
                Polled::Msg(other) => {
                    return Err(ProtocolError::Unexpected(other.name().into()).into())
                }
            }
        }
    }

    /// After the link went on with the next receiver of a chain: it must learn the end,
    /// and its first acknowledgement says where it takes over.
    fn follow(&mut self) -> Result<()> {
        let now = self.link.generation();
        if now == self.generation {
            return Ok(());
        }
        self.generation = now;
        self.moved = true;
        self.reconnected()
    }

    /// The first account of the receiver the chain went on with: the stream goes on from
    /// what it has, every kept block after that sent again; if it lacks bytes no longer
    /// kept, it fails in turn.
    fn take_over(&mut self, written: u64, have: u64, window: u64) -> Result<()> {
        if !self.flow.take_over(written, have, window, self.own_window) {
            let kept = self.flow.kept_from();
            return self.link.fail_over(Error::io(
                "going on with the next receiver",
                std::io::Error::other(format!(
                    "it needs the stream from byte {have}, but the sender keeps it only \
                     from byte {kept}"
                )),
            ));
        }
        self.moved = false;
        self.counters.done_bytes.store(written, Ordering::Relaxed);
        // Every kept block from its `have` on goes out again; those still queued go out
        // in that turn, not twice.
        while self.work.try_recv().is_ok() {}
        self.resend(have, &[]);
        Ok(())
    }

    /// A new control connection: it must learn the end again, if there was one.
    fn reconnected(&mut self) -> Result<()> {
        self.heard = Instant::now();
        if let Some((len, digest)) = self.end {
            self.link.tell(&Control::StreamEnd { len, digest })?;
        }
        Ok(())
    }

    /// Queues again every block from `have` on that is not among `got`.
    fn resend(&mut self, have: u64, got: &[u64]) {
        let lost = self.flow.lost_since(have, got);
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
