//! A stream receiver in a chain fan-out that passes the stream on: every block, once
//! written to this receiver's own consumer, is kept and forwarded (re-hashed with the next
//! receiver's key, `relay_data`) to the next receiver, which acknowledges it as any
//! receiver acknowledges a sender.
//!
//! Flow control stays bounded on every hop: what this receiver acknowledges upstream is
//! the smaller of its own progress and the next hop's (`clamp`), so the sender never runs
//! more than one window ahead of the slowest hop. The blocks kept here are those written
//! and not yet arrived at the next hop; with the blocks still in the reorder window they
//! lie within one window of the acknowledged point, so a relay holds at most one window.
//!
//! When the next hop fails (its control stream breaks or says Error, or its data streams
//! cannot be dialed again) the chain re-forms around it: the hop after it is dialed with
//! the rest of the chain, says where it stands in its first `StreamAck`, and gets every
//! kept block from there. The failed hop reported what *both* had (the minimum), so the
//! blocks it lacks are still here; should one not be (a protocol violation upstream), that
//! hop fails cleanly instead of getting a gap. Nothing here touches the consumer. The
//! bookkeeping of who comes next is `session::Successors`, which the sender shares.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};

use super::window::{Held, Shared};
use crate::error::{Error, Result};
use crate::protocol::{Chain, Control, Hop, ProtocolError, Replica, Summary};
use crate::session::{is_tick, Channel, Successors};
use crate::transport::{self, Role, Ticket, TransportError};

/// How long the control loop waits for the next hop's messages at a time.
const POLL: Duration = Duration::from_millis(20);
/// How often the relay says it is still there when it has nothing else to say.
const KEEPALIVE: Duration = Duration::from_millis(500);
/// How long the next hop may say nothing (it acknowledges every second) before it counts
/// as gone: well within the receiver's default `--timeout` (30 s), so the hop after it
/// is still waiting when the chain re-forms.
const SILENCE: Duration = Duration::from_secs(10);
/// Times the next hop is dialed again after its control connection was cut (the backoff
/// of a sender's re-dial between tries) before it counts as failed.
const REDIALS: u32 = 5;
/// How long `abort` waits for the control loop to tell the next hop.
const ABORT_WAIT: Duration = Duration::from_secs(2);

/// One block written here and kept for the next hop; its buffer goes back to the
/// receiver's pool when the last holder drops it.
pub(super) struct Fwd {
    pub(super) offset: u64,
    pub(super) held: Held,
    shared: Arc<Shared>,
}

impl Fwd {
    pub(super) fn end(&self) -> u64 {
        self.offset + self.held.range.len() as u64
    }
}

impl Drop for Fwd {
    fn drop(&mut self) {
        if let Some(p) = self.held.packed.take() {
            self.shared.recycle(p.body);
        }
        self.shared.recycle(std::mem::take(&mut self.held.buf));
    }
}

/// The next hop as the data writers see it.
#[derive(Clone)]
pub(super) struct Target {
    /// Changes with every hop, so a writer knows its connection is to an old one.
    pub(super) generation: u64,
    pub(super) ticket: Ticket,
    pub(super) key: [u8; 32],
}

#[derive(Default)]
struct State {
    /// Receivers after this one, the current next hop first, and what became of those
    /// left behind.
    succ: Successors,
    target: Option<Target>,
    generation: u64,
    /// The generation whose data streams could not be re-established.
    broken: u64,
    /// The current hop's window, once it acknowledged.
    window: Option<u64>,
    /// The chain's (written, have) after this receiver, as last acknowledged.
    below: (u64, u64),
    /// Blocks written here and not known to have arrived at the next hop, in order.
    kept: VecDeque<Arc<Fwd>>,
    /// Every kept block before this has been handed to the writers.
    released: u64,
    /// Everything before this was dropped from `kept`.
    pruned: u64,
    end: Option<(u64, [u8; 32])>,
    /// Nothing more to pass on: the next hops are done or gone.
    finished: bool,
    /// The transfer failed here: what to tell the next hop.
    abort: Option<(i32, String)>,
    closed: bool,
}

/// The downstream half of a stream relay.
pub(super) struct StreamRelay {
    state: Mutex<State>,
    moved: Condvar,
    pub(super) work_tx: Sender<Arc<Fwd>>,
    pub(super) work_rx: Receiver<Arc<Fwd>>,
    pub(super) stop: AtomicBool,
    pub(super) encrypt: bool,
    start: (u16, u32, u64),
}

impl StreamRelay {
    /// Starts passing the stream on to `chain` (checked here): `streams` data connections,
    /// blocks of `block`, at most `window` bytes ahead of what the next hop has written.
    pub(super) fn start(
        chain: Chain,
        (streams, block, window): (u16, u32, u64),
    ) -> Result<Arc<StreamRelay>> {
        chain.check()?;
        let encrypt = chain.encrypt;
        let (work_tx, work_rx) = crossbeam_channel::unbounded();
        let relay = Arc::new(StreamRelay {
            state: Mutex::new(State {
                succ: Successors::new(chain),
                ..State::default()
            }),
            moved: Condvar::new(),
            work_tx,
            work_rx,
            stop: AtomicBool::new(false),
            encrypt,
            start: (streams, block, window),
        });
        {
            let r = Arc::clone(&relay);
            std::thread::Builder::new()
                .name("haul-relay".into())
                .spawn(move || r.control())
                .map_err(|e| Error::io("starting the relay thread", e))?;
        }
        for i in 0..streams {
            let r = Arc::clone(&relay);
            std::thread::Builder::new()
                .name(format!("haul-relay-{i}"))
                .spawn(move || r.writer())
                .map_err(|e| Error::io("starting a relay stream", e))?;
        }
        Ok(relay)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A block written here (in order): kept for the next hop.
    pub(super) fn push(&self, offset: u64, held: Held, shared: &Arc<Shared>) {
        let b = Arc::new(Fwd {
            offset,
            held,
            shared: Arc::clone(shared),
        });
        let mut st = self.lock();
        if st.finished {
            return;
        }
        st.kept.push_back(b);
        self.release(&mut st);
    }

    /// What to acknowledge upstream, given this receiver's own (written, have): no more
    /// than the chain after it has.
    pub(super) fn clamp(&self, written: u64, have: u64) -> (u64, u64) {
        let st = self.lock();
        if st.finished {
            return (written, have);
        }
        (written.min(st.below.0), have.min(st.below.1))
    }

    /// The window to grant upstream: no wider than the next hop's.
    pub(super) fn window(&self, own: u64) -> u64 {
        let st = self.lock();
        match st.window {
            Some(w) if !st.finished => own.min(w),
            _ => own,
        }
    }

    /// The sender said where the stream ends.
    pub(super) fn end(&self, len: u64, digest: [u8; 32]) {
        self.lock().end.get_or_insert((len, digest));
    }

    /// Whether every hop after this one is done or gone.
    pub(super) fn finished(&self) -> bool {
        self.lock().finished
    }

    /// What became of every receiver after this one.
    pub(super) fn replicas(&self) -> Vec<Replica> {
        self.lock().succ.replicas()
    }

    /// The transfer failed here: tells the next hop (briefly waiting for that) and stops.
    pub(super) fn abort(&self, e: &Error) {
        let deadline = Instant::now() + ABORT_WAIT;
        let mut st = self.lock();
        st.abort = Some((
            e.exit_code(),
            format!("the receiver before this one failed: {e}"),
        ));
        while !st.closed && Instant::now() < deadline {
            st = self
                .moved
                .wait_timeout(st, POLL)
                .map(|(g, _)| g)
                .unwrap_or_else(|p| p.into_inner().0);
        }
        drop(st);
        self.stop.store(true, Ordering::Release);
    }

    /// Ends the threads (the writers close their connections with an End frame).
    pub(super) fn stop(&self) {
        self.stop.store(true, Ordering::Release);
    }

    /// The current next hop, if any (for the writers).
    pub(super) fn target(&self) -> Option<(Target, u64)> {
        let st = self.lock();
        st.target.clone().map(|t| (t, st.below.1))
    }

    /// A writer could not reach hop `generation`.
    pub(super) fn broke(&self, generation: u64) {
        self.lock().broken = generation;
    }

    /// Hands the writers every kept block the next hop may take now, in order.
    fn release(&self, st: &mut State) {
        let Some(window) = st.window else { return };
        if st.target.is_none() {
            return;
        }
        let limit = st.below.0.saturating_add(window);
        let from = st.released;
        for b in st.kept.iter().filter(|b| b.offset >= from) {
            if b.end() > limit {
                break;
            }
            st.released = b.end();
            let _ = self.work_tx.send(Arc::clone(b));
        }
    }

    /// The next hop's acknowledgement (`first`: its first since it was dialed, which says
    /// where it stands after a re-form).
    fn acked(&self, first: bool, written: u64, have: u64, window: u64) -> Result<()> {
        let mut st = self.lock();
        if first {
            if have < st.pruned {
                return Err(Error::io(
                    "re-forming the chain",
                    std::io::Error::other(format!(
                        "it needs the stream from byte {have}, but this relay keeps it only \
                         from byte {}",
                        st.pruned
                    )),
                ));
            }
            // Where it stands now (the hop before it reported no more than this); blocks
            // queued for the hop before are handed over again from here.
            while self.work_rx.try_recv().is_ok() {}
            st.released = have;
            st.below = (written, have);
        }
        st.below = (st.below.0.max(written), st.below.1.max(have));
        st.window = Some(window);
        let have = st.below.1;
        while st.kept.front().is_some_and(|b| b.end() <= have) {
            if let Some(b) = st.kept.pop_front() {
                st.pruned = b.end();
            }
        }
        st.released = st.released.max(have);
        self.release(&mut st);
        Ok(())
    }

    /// A data connection to the next hop broke: hands the blocks it lacks to the writers
    /// again (those not yet handed over go in their turn).
    fn resend(&self, have: u64, got: &[u64]) {
        let st = self.lock();
        for b in st.kept.iter() {
            if b.end() > have && b.offset < st.released && got.binary_search(&b.offset).is_err() {
                let _ = self.work_tx.send(Arc::clone(b));
            }
        }
    }

    /// Dials the first hop that answers, dropping (and reporting) those that do not;
    /// None when no hop is left.
    fn connect_next(&self) -> Option<Channel> {
        loop {
            let (hop, rest) = {
                let st = self.lock();
                (st.succ.front()?.clone(), st.succ.rest())
            };
            match self.dial(&hop, rest) {
                Ok((chan, ticket)) => {
                    self.aim(ticket);
                    return Some(chan);
                }
                Err(e) => self.drop_hop(&e),
            }
        }
    }

    fn dial(&self, hop: &Hop, rest: Chain) -> Result<(Channel, Ticket)> {
        let ticket = Ticket::parse(&hop.ticket)?;
        let conn = transport::connect(&ticket, Role::Control, self.encrypt)?;
        let mut chan = Channel::new(conn);
        let (streams, block_size, window) = self.start;
        chan.write(&Control::StreamStart {
            streams,
            block_size,
            window,
            chain: rest,
        })?;
        Ok((chan, ticket))
    }

    /// The current next hop failed with `e`: reports it and leaves it out of the chain.
    fn drop_hop(&self, e: &Error) {
        if self.stop.load(Ordering::Acquire) {
            // This receiver failed and left the chain: what its next hop does now (it
            // takes the connection of the receiver before this one) is not a failure.
            return;
        }
        let mut st = self.lock();
        st.succ.fail(e);
        st.target = None;
        st.window = None;
    }

    /// The next hop (and the chain after it) is done, or no hop is left.
    fn close(&self, done: Option<Summary>) {
        let mut st = self.lock();
        if let Some(summary) = done {
            st.succ.done(summary);
        }
        st.succ.clear();
        st.target = None;
        st.finished = true;
        st.closed = true;
        st.kept.clear();
        drop(st);
        self.stop.store(true, Ordering::Release);
        self.moved.notify_all();
    }

    /// The control loop: dials, acknowledges, re-forms, and ends with the chain's answer.
    fn control(&self) {
        let mut chan: Option<Channel> = None;
        let mut hop = HopState::default();
        // The current hop's connection was cut: tries so far, and why.
        let mut redial: Option<(u32, Error)> = None;
        loop {
            let abort = self.lock().abort.clone();
            if let Some((code, message)) = abort {
                if let Some(c) = chan.as_mut() {
                    let _ = c.write(&Control::Error { code, message });
                }
                return self.close(None);
            }
            if self.stop.load(Ordering::Acquire) && !self.lock().finished {
                return self.close(None);
            }
            if chan.is_none() {
                // Tries count until the hop acknowledges on a new connection, so a hop
                // that keeps dropping it right away runs out of them.
                let next = match &redial {
                    Some((tries, why)) => self.redial_next(*tries, why),
                    None => self.connect_next(),
                };
                match next {
                    Some(c) => {
                        chan = Some(c);
                        hop = HopState::default();
                    }
                    None => return self.close(None),
                }
            }
            let Some(c) = chan.as_mut() else { continue };
            match self.step(c, &mut hop) {
                Ok(Some(summary)) => {
                    let _ = c.shutdown_write();
                    return self.close(Some(summary));
                }
                Ok(None) => {
                    if hop.acked {
                        redial = None;
                    }
                }
                Err(e) => {
                    c.abort();
                    chan = None;
                    // A connection the network cut is dialed again, as the sender does;
                    // a hop that went silent, refused or failed is left out at once.
                    let tries = redial.as_ref().map_or(0, |r| r.0);
                    if !hop.silent && is_cut(&e) && tries < REDIALS {
                        crate::progress::warn(&format!(
                            "the control connection to the next receiver broke ({e}); \
                             dialing it again"
                        ));
                        redial = Some((tries + 1, e));
                    } else {
                        redial = None;
                        self.drop_hop(&e);
                    }
                }
            }
        }
    }

    /// Dials the current next hop again (its connection was cut: `why`), from try
    /// `tries` on with the sender's backoff; after the last try it counts as failed and
    /// the chain goes on with the one after it.
    fn redial_next(&self, tries: u32, why: &Error) -> Option<Channel> {
        let mut last = None;
        for t in tries..=REDIALS {
            let until = Instant::now() + crate::session::backoff(t);
            while Instant::now() < until {
                if self.stop.load(Ordering::Acquire) || self.lock().abort.is_some() {
                    return None;
                }
                std::thread::sleep(POLL);
            }
            let (hop, rest) = {
                let st = self.lock();
                (st.succ.front()?.clone(), st.succ.rest())
            };
            match self.dial(&hop, rest) {
                Ok((chan, ticket)) => {
                    self.aim(ticket);
                    return Some(chan);
                }
                // Refused (killed, or the link still down) may mend within the tries; a
                // handshake that never came (a stopped hop) or a refusal will not.
                Err(e)
                    if !is_cut(&e)
                        && !matches!(e, Error::Transport(TransportError::Connect { .. })) =>
                {
                    last = Some(e);
                    break;
                }
                Err(e) => last = Some(e),
            }
        }
        let e =
            last.unwrap_or_else(|| crate::session::lost(std::io::Error::other(why.to_string())));
        self.drop_hop(&e);
        self.connect_next()
    }

    /// A new control connection to the next hop, of `ticket`: its data connections and
    /// its first acknowledgement start afresh.
    fn aim(&self, ticket: Ticket) {
        let mut st = self.lock();
        st.generation += 1;
        let key = ticket.secret.block_key();
        st.target = Some(Target {
            generation: st.generation,
            ticket,
            key,
        });
        st.window = None;
    }

    /// One round with the current hop: say what it must know, take what it says. Its
    /// summary once it is done.
    fn step(&self, c: &mut Channel, hop: &mut HopState) -> Result<Option<Summary>> {
        let (end, broken) = {
            let st = self.lock();
            let current = st.target.as_ref().map(|t| t.generation);
            (st.end, current.is_some() && current == Some(st.broken))
        };
        if broken {
            return Err(crate::session::lost(std::io::Error::other(
                "its data streams broke and it cannot be dialed again",
            )));
        }
        if let (false, Some((len, digest))) = (hop.told_end, end) {
            c.write(&Control::StreamEnd { len, digest })?;
            hop.told_end = true;
            hop.told = Instant::now();
        }
        if hop.told.elapsed() >= KEEPALIVE {
            c.write(&Control::Keepalive)?;
            hop.told = Instant::now();
        }
        if hop.heard.elapsed() >= SILENCE {
            hop.silent = true;
            return Err(crate::session::lost(std::io::Error::other(format!(
                "nothing from it for {} s",
                SILENCE.as_secs()
            ))));
        }
        let msg = match c.read(Some(POLL)) {
            Ok(m) => m,
            Err(e) if is_tick(&e) => return Ok(None),
            Err(e) => return Err(e),
        };
        hop.heard = Instant::now();
        match msg {
            Control::StreamAck {
                written,
                have,
                window,
            } => {
                self.acked(!hop.acked, written, have, window)?;
                hop.acked = true;
            }
            Control::StreamLost { have, got } => self.resend(have, &got),
            Control::Replicas(r) => self.lock().succ.heard(r),
            // Its proof, passed on with its Done in `Replicas`.
            Control::Proof(p) => self.lock().succ.proved(p),
            Control::Done(summary) => match end {
                Some((len, _)) if summary.bytes == len => return Ok(Some(summary)),
                _ => return Err(ProtocolError::Malformed("Done before the stream's end").into()),
            },
            Control::Error { code, message } => {
                return Err(Error::Remote {
                    side: "receiver",
                    message,
                    code,
                })
            }
            other => return Err(ProtocolError::Unexpected(other.name().into()).into()),
        }
        Ok(None)
    }
}

/// A connection the network broke (reset, aborted, closed), which dialing again may
/// mend; not a hop that refused us, answered with an error or broke the protocol.
fn is_cut(e: &Error) -> bool {
    matches!(e, Error::Transport(TransportError::Io(_)))
}

/// What the control loop knows of the current hop's conversation.
struct HopState {
    acked: bool,
    /// It said nothing for [`SILENCE`] (stopped, or partitioned): not dialed again.
    silent: bool,
    told_end: bool,
    told: Instant,
    heard: Instant,
}

impl Default for HopState {
    fn default() -> HopState {
        HopState {
            acked: false,
            silent: false,
            told_end: false,
            told: Instant::now(),
            heard: Instant::now(),
        }
    }
}

#[cfg(test)]
#[path = "relay_tests.rs"]
mod tests;
