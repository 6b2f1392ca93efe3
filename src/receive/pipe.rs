//! Pipe mode, receiving side: blocks of one byte stream arrive on N data connections in
//! any order; they are verified as file data is, held in a reorder window, and handed to
//! the consumer (standard output, a file, a command) strictly in order, each byte once.
//!
//! Memory is bounded by the window (the smaller of both sides' `--buffer`): a block
//! beyond `written + window` is a protocol violation, and `StreamAck` tells the sender how
//! far it may go. A slow consumer thus holds back the sender, which holds back the
//! producer. A data connection that breaks is reported with `StreamLost`, listing the
//! blocks held beyond the gap, so the sender re-sends exactly the rest. At the end the
//! BLAKE3 of everything written must equal the sender's, and the consumer must succeed
//! (a file is durable and in place; a command exited 0) before `Done` is said.

mod reader;
mod relay;
mod relay_data;
mod sink;
mod slots;
mod syncer;
mod window;

use std::io;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError};

use super::integrity::{first_start, Forgeries, DATA_CONN_SLACK};
use crate::codec::tree::{is_tree_block, TreeHash};
use crate::error::{Error, Result};
use crate::progress::{Counters, Progress};
use crate::protocol::{Chain, Control, ProtocolError, Summary, MAX_BLOCK, MAX_STREAMS};
use crate::session::stream::Asks;
use crate::session::{is_forged, is_tick, lost, Channel};
use crate::transport::{Conn, Role};

use reader::spawn_reader;
use relay::StreamRelay;
pub use sink::{Output, PipeTo};
use window::{Shared, TICK};

/// How often the control loop wakes to send acknowledgements.
const POLL: Duration = Duration::from_millis(10);
/// How often each side says it is still there when nothing else moves.
const KEEPALIVE: Duration = Duration::from_secs(1);
/// How long a new control connection has to say StreamStart.
const REPLACE_WAIT: Duration = Duration::from_secs(5);

/// How to receive a stream.
#[derive(Clone, Copy, Debug)]
pub struct PipeRecvOptions {
    /// Most stream bytes held in memory (arrived, not yet with the consumer).
    pub window: u64,
    /// Draw a progress bar (when stderr is a terminal).
    pub progress: bool,
    /// Give up when the sender is gone this long.
    pub timeout: Duration,
    /// Whether to pass the stream on to the receivers a chain fan-out names (see
    /// `ReceiveOptions::relay`); otherwise such a `StreamStart` is refused.
    pub relay: bool,
    /// Give up when no sender came this long (None: wait until one comes).
    pub first: Option<Duration>,
    /// This receiver's outcome key, for its proof in a chain fan-out (see
    /// `ReceiveOptions::outcome_key`).
    pub outcome_key: Option<[u8; 32]>,
}

/// What the receiver reports once the stream is delivered.
#[derive(Debug)]
pub struct PipeRecvReport {
    /// Stream length.
    pub bytes: u64,
    /// BLAKE3 of the whole stream.
    pub digest: [u8; 32],
    /// Wire bytes, units.
    pub counters: Arc<Counters>,
    /// When the first connection arrived.
    pub started: Instant,
    /// Connections that replaced dropped ones.
    pub reconnects: u64,
}

/// Receives one stream into `out`. `incoming` yields authenticated connections; the first
/// control connection must open with `StreamStart`.
pub fn receive_pipe(
    out: Output,
    key: [u8; 32],
    incoming: Receiver<(Conn, Role)>,
    opts: PipeRecvOptions,
) -> Result<PipeRecvReport> {
    let mut early = Vec::new();
    let waits = (opts.first, opts.timeout);
    let (mut control, (streams, block, window, chain), forged) =
        first_start(&incoming, waits, &mut early, read_stream_start)?;
    let started = Instant::now();
    let window = window.min(opts.window);
    if window < 2 * u64::from(block) {
        let e = Error::Usage(format!(
            "the stream buffer ({}) must hold at least two blocks ({} each); raise --buffer \
             or lower the sender's --block-size",
            crate::progress::human(window),
            crate::progress::human(u64::from(block))
        ));
        say_error(&mut control, &e);
        return Err(e);
    }
    let counters = Arc::new(Counters::default());
    let bar = Progress::start_stream(Arc::clone(&counters), opts.progress);
    let shared = Arc::new(Shared::new(
        key,
        u64::from(block),
        window,
        !chain.hops.is_empty(),
        Forgeries::starting_at(forged),
        usize::from(streams) + DATA_CONN_SLACK,
        Arc::clone(&counters),
    ));
    // A chain fan-out: this receiver proves its outcome (bound to the sender's nonce)...
    let nonce = chain.nonce;
    // ...and all but the last pass the stream on.
    let relay = match chain.hops.is_empty() {
        true => None,
        false => match super::relay::allowed(opts.relay, &chain)
            .and_then(|()| StreamRelay::start(chain, (streams, block, window)))
        {
            Ok(r) => Some(r),
            Err(e) => {
                say_error(&mut control, &e);
                return Err(e);
            }
        },
    };
    for c in early {
        spawn_reader(&shared, c);
    }
    let (control_tx, control_rx) = super::integrity::ControlQueue::new();
    {
        let shared = Arc::clone(&shared);
        std::thread::Builder::new()
            .name("haul-dispatch".into())
            .spawn(move || {
                while !shared.abort.load(Ordering::Acquire) {
                    match incoming.recv_timeout(TICK) {
                        Ok((c, Role::Data)) => spawn_reader(&shared, c),
                        Ok((_, Role::Probe | Role::ProbeData)) => {}
                        Ok((c, Role::Control)) => {
                            shared.control_conns.fetch_add(1, Ordering::Relaxed);
                            if !control_tx.offer(c) {
                                break;
                            }
                        }
                        Err(RecvTimeoutError::Timeout) => {}
                        Err(RecvTimeoutError::Disconnected) => break,
                    }
                }
            })
            .map_err(|e| Error::io("starting the dispatch thread", e))?;
    }
    let writer = {
        let (shared, relay) = (Arc::clone(&shared), relay.clone());
        std::thread::Builder::new()
            .name("haul-pipe-write".into())
            .spawn(move || write_loop(out, &shared, relay.as_deref()))
            .map_err(|e| Error::io("starting the writing thread", e))?
    };
    let mut session = Session {
        shared: &shared,
        control,
        control_rx,
        timeout: opts.timeout,
        acked: None,
        acked_at: Instant::now(),
        asks: Asks::new(shared.now_ms()),
        relay: relay.as_deref(),
    };
    let result = session.run(&|| writer.is_finished());
    if result.is_err() {
        shared.abort.store(true, Ordering::Release);
        shared.arrived.notify_all();
    }
    let written = writer.join();
    let mut result = match (result, written) {
        (Ok(()), Ok(Ok(Some(end)))) => Ok(end),
        // The writer's own error is the precise one (the consumer's, the digest's).
        (_, Ok(Err(e))) => Err(e),
        (Err(e), _) => Err(e),
        (Ok(()), Ok(Ok(None))) => Err(Error::io(
            "writing the stream",
            io::Error::other("stopped before its end"),
        )),
        (Ok(()), Err(_)) => Err(Error::io(
            "writing the stream",
            io::Error::other("panicked"),
        )),
    };
    if let (Ok(_), Some(r)) = (&result, relay.as_deref()) {
        // Whole and durable here; the sender hears so once the chain after this one
        // answered too (acknowledging no further than it got meanwhile).
        if let Err(e) = session.run(&|| r.finished()) {
            result = Err(e);
        }
    }
    if let (Err(e), Some(r)) = (&result, relay.as_deref()) {
        // Failed only at the very end (its file's final rename, its command's exit
        // status), after every block went on: the chain after this one is whole and
        // finishes first, so its outcome is known when this receiver's error is told
        // (a replica that finished meanwhile could not be dialed by the sender again).
        let all_in = {
            let w = shared.lock();
            w.end.is_some_and(|(len, _)| len == w.written)
        };
        if all_in && is_own(e) {
            let _ = session.run(&|| r.finished());
        }
    }
    shared.abort.store(true, Ordering::Release);
    shared.arrived.notify_all();
    bar.finish();
    if let Some(r) = relay.as_deref() {
        match &result {
            // What failed upstream fails the chain after this receiver too.
            Err(e) if !is_own(e) => r.abort(e),
            // This receiver's own failure (its consumer, its disk) is its alone: the
            // connections to the next hop just close, and the receiver before this one,
            // told so, re-forms the chain around it.
            _ => r.stop(),
        }
    }
    let reconnects = (shared.data_conns.load(Ordering::Relaxed) as u64)
        .saturating_sub(u64::from(streams))
        + (shared.control_conns.load(Ordering::Relaxed) as u64).saturating_sub(1);
    match result {
        Ok((bytes, digest)) => {
            let summary = Summary {
                files: 0,
                bytes,
                ..Summary::default()
            };
            if let Some(r) = relay.as_deref() {
                let _ = session.control.write(&Control::Replicas(r.replicas()));
            }
            if let (Some(key), Some(nonce)) = (opts.outcome_key, nonce) {
                let p = crate::protocol::vouch::proof(&key, &nonce, &digest, &summary);
                let _ = session.control.write(&Control::Proof(p));
            }
            let _ = session.control.write(&Control::Done(summary));
            let _ = session.control.shutdown_write();
            Ok(PipeRecvReport {
                bytes,
                digest,
                counters,
                started,
                reconnects,
            })
        }
        Err(e) => {
            if !matches!(e, Error::Transport(_) | Error::Remote { .. }) {
                // What became of the hops after this one first: the sender (or relay)
                // before keeps a hop this one saw complete and leaves out one it left
                // behind, then re-forms the chain around this one.
                if let Some(r) = relay.as_deref() {
                    let _ = session.control.write(&Control::Replicas(r.replicas()));
                }
                say_error(&mut session.control, &e);
            }
            Err(e)
        }
    }
}

/// Whether `e` is this receiver's own failure (its consumer, its disk), not one that came
/// from upstream (the sender's error, a lost or broken conversation), which fails the
/// chain after this receiver too.
fn is_own(e: &Error) -> bool {
    !matches!(
        e,
        Error::Remote { .. } | Error::Transport(_) | Error::Protocol(_)
    )
}

fn say_error(control: &mut Channel, e: &Error) {
    let _ = control.write(&Control::Error {
        code: e.exit_code(),
        message: e.to_string(),
    });
    let _ = control.shutdown_write();
}

/// Reads a control connection's first message, which must be a sensible StreamStart.
fn read_stream_start(control: &mut Channel) -> Result<(u16, u32, u64, Chain)> {
    parse_stream_start(control.read(Some(super::integrity::FIRST_FRAME))?)
}

/// Checks a StreamStart's fields (the chain's bounds are checked where it is used).
fn parse_stream_start(msg: Control) -> Result<(u16, u32, u64, Chain)> {
    match msg {
        Control::StreamStart {
            streams,
            block_size,
            window,
            chain,
        } => {
            if streams == 0
                || streams > MAX_STREAMS
                || block_size < 4096
                || block_size as usize > MAX_BLOCK
                || !is_tree_block(u64::from(block_size))
            {
                return Err(ProtocolError::Malformed(
                    "stream count or block size out of range (blocks are a power of two)",
                )
                .into());
            }
            Ok((streams, block_size, window, chain))
        }
        Control::Start { .. } => Err(Error::Usage(
            "the sender sends files, but this receiver writes one stream; receive files \
             with `haul recv DIR`, or send a stream with `haul send -`"
                .into(),
        )),
        other => Err(ProtocolError::Unexpected(other.name().into()).into()),
    }
}

/// Hands blocks to the consumer in order; at the end checks the digest and finishes it.
/// `None` when the transfer stopped for another reason first.
fn write_loop(
    mut out: Output,
    shared: &Arc<Shared>,
    relay: Option<&StreamRelay>,
) -> Result<Option<(u64, [u8; 32])>> {
    // The readers hashed each block (its chaining value); here they only merge, in order.
    let mut tree = TreeHash::new();
    loop {
        let next = {
            let mut w = shared.lock();
            loop {
                if shared.abort.load(Ordering::Acquire) {
                    return Ok(None);
                }
                let at = w.written;
                if let Some(b) = w.blocks.remove(&at) {
                    break Some((at, b));
                }
                if w.end.is_some_and(|(len, _)| len == at) {
                    break None;
                }
                w = shared
                    .arrived
                    .wait_timeout(w, TICK)
                    .map(|(w, _)| w)
                    .unwrap_or_else(|p| p.into_inner().0);
            }
        };
        let Some((at, b)) = next else { break };
        // A consumer that takes its time is not a vanished sender.
        shared.writing.store(true, Ordering::Release);
        let r = out.write_all(b.bytes());
        shared.writing.store(false, Ordering::Release);
        r?;
        if tree.blocks() == 0 {
            tree.first(b.bytes());
        }
        tree.push(b.cv);
        let n = b.range.len() as u64;
        match relay {
            // Kept for the next hop (its buffer comes back once that hop has it).
            Some(r) => r.push(at, b, shared),
            None => shared.recycle_held(b),
        }
        Counters::add(&shared.counters.done_bytes, n);
        shared.lock().written += n;
        shared.touch();
        shared.moved();
    }
    let (len, digest) = shared
        .lock()
        .end
        .ok_or_else(|| Error::io("writing the stream", io::Error::other("no end")))?;
    if tree.finish() != Some(digest) {
        return Err(Error::Tampered {
            count: 1,
            last: "the stream's BLAKE3 does not match the sender's".into(),
        });
    }
    out.finish()?;
    Ok(Some((len, digest)))
}

/// The control side of a stream.
struct Session<'a> {
    shared: &'a Shared,
    control: Channel,
    control_rx: Receiver<Conn>,
    timeout: Duration,
    /// The last (written, have, window) acknowledged, and when.
    acked: Option<(u64, u64, u64)>,
    acked_at: Instant,
    /// When to ask for blocks again (`StreamLost`).
    asks: Asks,
    /// A chain fan-out: the receivers after this one, which the acknowledgements wait for.
    relay: Option<&'a StreamRelay>,
}

impl Session<'_> {
    /// Runs until `done` (the writer finished; then the chain after this receiver) is
    /// true (`Ok`) or the transfer fails.
    fn run(&mut self, done: &dyn Fn() -> bool) -> Result<()> {
        loop {
            if let Some(e) = self.shared.take_fatal() {
                return Err(e);
            }
            if done() {
                return Ok(());
            }
            if let Ok(c) = self.control_rx.try_recv() {
                self.replace_control(c)?;
            }
            self.report()?;
            match self.control.read(Some(POLL)) {
                Ok(Control::StreamEnd { len, digest }) => self.end(len, digest)?,
                // A producer that has not written yet is not a vanished sender.
                Ok(Control::Keepalive) => self.shared.touch(),
                Ok(Control::Error { code, message }) => {
                    return Err(Error::Remote {
                        side: "sender",
                        message,
                        code,
                    })
                }
                Ok(other) => return Err(ProtocolError::Unexpected(other.name().into()).into()),
                Err(e) if is_tick(&e) => {
                    if self.shared.idle_for() > self.timeout
                        && !self.shared.writing.load(Ordering::Acquire)
                    {
                        return Err(lost(io::Error::other(format!(
                            "no data from the sender for {} s",
                            self.timeout.as_secs()
                        ))));
                    }
                }
                Err(e @ Error::Transport(_)) => {
                    if is_forged(&e) {
                        self.control.abort();
                        (self.shared.forged).note(
                            "control",
                            &self.control.conn().peer_desc(),
                            &e,
                        )?;
                    }
                    self.await_control()?;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Tells the sender how far the stream got, when that changed, and which blocks to
    /// send again after a data connection broke.
    fn report(&mut self) -> Result<()> {
        if self.shared.lost.swap(false, Ordering::AcqRel) {
            self.asks.handle_broken();
        }
        self.asks
            .handle_moved(self.shared.moved_ms.load(Ordering::Relaxed));
        let (written, have, awaiting) = {
            let w = self.shared.lock();
            let whole = w.end.is_some_and(|(len, _)| w.have >= len);
            (w.written, w.have, !whole)
        };
        // Lost blocks are this receiver's own; progress is the chain's after it too.
        let (written, have_all) = match self.relay {
            Some(r) => r.clamp(written, have),
            None => (written, have),
        };
        let window = match self.relay {
            Some(r) => r.window(self.shared.window),
            None => self.shared.window,
        };
        // Also repeated while nothing moves: the sender's sign that we are still here.
        if self.acked != Some((written, have_all, window)) || self.acked_at.elapsed() >= KEEPALIVE {
            self.send(&Control::StreamAck {
                written,
                have: have_all,
                window,
            })?;
            self.acked = Some((written, have_all, window));
            self.acked_at = Instant::now();
        }
        // After a break, a new control connection or a stall: which blocks to send again
        // (see `session::stream` for why once is not enough).
        if self.asks.poll_ask(self.shared.now_ms(), awaiting) {
            let (have, got) = {
                let w = self.shared.lock();
                (w.have, w.got())
            };
            self.send(&Control::StreamLost { have, got })?;
        }
        Ok(())
    }

    fn end(&mut self, len: u64, digest: [u8; 32]) -> Result<()> {
        if !self.shared.lock().set_end(len, digest)? {
            return Ok(());
        }
        if let Some(r) = self.relay {
            r.end(len, digest);
        }
        self.shared.arrived.notify_all();
        Ok(())
    }

    /// Writes on the control stream; a failed write waits for the sender to reconnect.
    fn send(&mut self, msg: &Control) -> Result<()> {
        match self.control.write(msg) {
            Ok(()) => Ok(()),
            Err(Error::Transport(_)) => self.await_control(),
            Err(e) => Err(e),
        }
    }

    /// A new control connection: it opens with the same StreamStart; the sender learns
    /// where the stream stands from a fresh acknowledgement. `false` when it did not.
    fn replace_control(&mut self, c: Conn) -> Result<bool> {
        let mut c = Channel::new(c);
        match c.read(Some(REPLACE_WAIT)).and_then(parse_stream_start) {
            Ok(_) => {
                crate::progress::warn("the sender reconnected its control stream");
                self.control = c;
                self.acked = None;
                self.asks.handle_control_replaced();
                Ok(true)
            }
            Err(e) if is_forged(&e) => (self.shared.forged)
                .note("control", &c.conn().peer_desc(), &e)
                .map(|()| false),
            Err(_) => Ok(false),
        }
    }

    /// The control connection dropped: waits up to `timeout` for a new one.
    fn await_control(&mut self) -> Result<()> {
        let deadline = Instant::now() + self.timeout;
        while Instant::now() < deadline {
            if let Some(e) = self.shared.take_fatal() {
                return Err(e);
            }
            match self.control_rx.recv_timeout(TICK) {
                Ok(c) => {
                    if self.replace_control(c)? {
                        return Ok(());
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => break,
            }
        }
        Err(lost(io::Error::other(
            "the sender vanished mid-stream (killed, or the network dropped) and did not \
             reconnect: re-run both ends (haul recv, then haul send with its new ticket; a \
             copy: the same command); a \
             stream starts again from its first byte",
        )))
    }
}
