//! The control connection of the sender, re-dialed when it drops: a new one starts with
//! Start and repeats the request in progress (the receiver answers repeats from its
//! cache, so nothing is applied twice).
//!
//! In a chain fan-out, when the first receiver is gone (re-dialing fails, its data
//! streams cannot be re-established, or it says Error) the sender does what a relay does
//! for a failed next hop (`session::Successors`): it reports it, dials the receiver after
//! it with the rest of the chain, tells it what a new hop is told (Start and the chain,
//! `Protect` and every `Forget` so far; a stream's StreamStart) and repeats the request
//! in progress; the data streams follow (`target`).

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::dial::{backoff, gave_up};
use super::target::Target;
use crate::error::{Error, Result};
use crate::plan::walk::Source;
use crate::progress::Counters;
use crate::protocol::vouch::ManifestDigest;
use crate::protocol::{Chain, Control, Item, Replica, Summary};
use crate::session::watch::{Failure, Patience, Redial, Retries, Step, SILENCE};
use crate::session::{is_tick, lost, Channel, Successors};
use crate::transport::{self, Role, TransportError};

/// How often a wait for an answer looks whether the data streams gave up on the receiver.
const TICK: Duration = Duration::from_secs(1);

/// What [`Link::poll`] found.
pub(super) enum Polled {
    /// A message.
    Msg(Control),
    /// Nothing in time.
    Nothing,
    /// The connection dropped and a new one (opened with Start again) replaced it: say
    /// again what the new one must know.
    Reconnected,
}

/// The control connection, re-dialed when it drops: a new one starts with Start and
/// repeats the request in progress (the receiver answers repeats from its cache).
pub(super) struct Link<'a> {
    target: &'a Target<'a>,
    start: Control,
    chan: Channel,
    retries: u32,
    counters: &'a Counters,
    /// Where the receiver's `Items` go (printed for `-v`/`-i`).
    on_items: Option<&'a (dyn Fn(Vec<Item>) + Sync)>,
    /// Files the receiver said arrived whole (`Control::Arrived`), not yet taken.
    arrived: Vec<u64>,
    /// A chain fan-out: the first receiver (now) and those after it.
    succ: Option<Successors>,
    /// What a new first receiver is told after its start: `Protect`, every `Forget`.
    told: Vec<Control>,
    /// The sources, as a stalled walk names them.
    sources: String,
    /// When to beat, when the receiver is silent too long, when nothing moved for
    /// `--timeout` (`session::watch`), on the clock of `clock`.
    patience: Patience,
    clock: Instant,
    /// Every `Entries` batch sent (once each), which a receiver's proof covers.
    manifest: ManifestDigest,
}

impl<'a> Link<'a> {
    /// Dials the first receiver through `target`; `succ`: a chain fan-out's receivers
    /// (the first included).
    pub(super) fn open(
        target: &'a Target<'a>,
        start: Control,
        retries: u32,
        counters: &'a Counters,
        succ: Option<Successors>,
    ) -> Result<Link<'a>> {
        let mut succ = succ;
        let hello_first = hello(
            &start,
            succ.as_ref().map(Successors::rest).unwrap_or_default(),
        );
        let first = || {
            target.dial(Role::Control).and_then(|d| {
                let mut chan = Channel::new(d.conn);
                hello_first.iter().try_for_each(|m| chan.write(m))?;
                Ok(chan)
            })
        };
        let mut chan = first();
        // A listener under a flood may drop us before the handshake ends (exit 8 or 5 on
        // the first try); retry those, not a refusal of the ticket or nobody listening.
        for attempt in 1..=retries {
            match chan {
                Err(Error::Transport(TransportError::Handshake(_) | TransportError::Io(_))) => {
                    std::thread::sleep(backoff(attempt));
                    chan = first();
                }
                _ => break,
            }
        }
        // A first receiver of a chain that cannot be reached at all is a failed hop from
        // the start: the chain starts at the next one (nothing was sent yet).
        let chan = match chan {
            Err(e @ (Error::Transport(_) | Error::Host { .. } | Error::Remote { .. }))
                if succ.as_ref().is_some_and(Successors::has_more) =>
            {
                go_on(&mut succ, &start, &[], target, e)?
            }
            chan => chan?,
        };
        Ok(Link {
            target,
            start,
            chan,
            retries,
            counters,
            on_items: None,
            arrived: Vec::new(),
            succ,
            told: Vec::new(),
            sources: String::new(),
            patience: Patience::new(0),
            clock: Instant::now(),
            manifest: ManifestDigest::default(),
        })
    }

    /// Ends the run when nothing moves for `limit` (`--timeout`): no data byte written,
    /// no step of the walk of `sources` and no word from the receiver. Checked while an
    /// answer is awaited and by [`Link::check_stall`] and [`Link::check_walk`].
    pub(super) fn set_stall(&mut self, limit: Option<Duration>, sources: &[Source]) {
        let names: Vec<String> = sources
            .iter()
            .map(|s| crate::progress::shown_path(&s.path))
            .collect();
        self.sources = names.join(", ");
        let now = self.now();
        self.patience
            .set_stall(limit.map(|l| l.as_millis() as u64), now);
    }

    /// Milliseconds on this link's clock, for `session::watch`.
    fn now(&self) -> u64 {
        self.clock.elapsed().as_millis() as u64
    }

    /// Tells the watch what moved: the wire bytes written (a unit being written counts:
    /// its write is bounded, see `Target::bound_writes`) and the steps of the walk so far.
    fn look(&mut self) -> u64 {
        let now = self.now();
        let movement = [
            self.counters.wire_bytes.load(Ordering::Relaxed),
            self.counters.walked.load(Ordering::Relaxed),
        ];
        let writing = self.target.writing();
        self.patience.handle_progress(now, movement, writing);
        now
    }

    /// Something moved: the stall limit counts from now.
    fn moved_now(&mut self) {
        let now = self.now();
        self.patience.handle_moved(now);
    }

    /// `--timeout` in seconds, once nothing has moved for it (no data byte written, no
    /// step of the walk, no word from the receiver).
    fn stalled(&mut self) -> Option<u64> {
        let now = self.look();
        self.patience.poll_stalled(now)
    }

    /// The stall limit's error once nothing has moved for it.
    pub(super) fn check_stall(&mut self) -> Result<()> {
        match self.stalled() {
            None => Ok(()),
            Some(secs) => Err(Error::TimedOut(format!(
                "nothing moved for {secs} s (--timeout): no data could be sent and the \
                 receiver said nothing; check it and the network, then re-run to resume"
            ))),
        }
    }

    /// [`Link::check_stall`] while the walk is awaited: what did not move is the walk
    /// itself, waiting on the file system.
    pub(super) fn check_walk(&mut self) -> Result<()> {
        match self.stalled() {
            None => Ok(()),
            Some(secs) => Err(Error::TimedOut(format!(
                "reading {}: no progress for {secs} s (--timeout): the walk waits on the file \
                 system (a hung network mount?); check it, then re-run to resume",
                self.sources
            ))),
        }
    }

    /// Says `Keepalive` when nothing was said for `watch::HEARTBEAT`: called wherever the sender
    /// waits on its own work (the walk, the work queue), never while an answer is awaited
    /// (the receiver is busy then and reads nothing). It speaks only for work that moves:
    /// a sender whose walk waits on a hung file system falls silent after `--timeout`
    /// (`watch::UNMOVED_BEATS` without one), so that the receiver does not wait on it for good.
    /// A broken control stream is re-dialed as for any message.
    pub(super) fn beat(&mut self) -> Result<()> {
        let now = self.look();
        match self.patience.poll_beat(now) {
            true => self.tell(&Control::Keepalive),
            false => Ok(()),
        }
    }

    /// Hands the receiver's `Items` to `f` (they may precede any answer).
    pub(super) fn on_items(&mut self, f: &'a (dyn Fn(Vec<Item>) + Sync)) {
        self.on_items = Some(f);
    }

    /// Files the receiver said arrived whole since the last call: they will never be
    /// asked for again.
    pub(super) fn take_arrived(&mut self) -> Vec<u64> {
        std::mem::take(&mut self.arrived)
    }

    /// The next message that is not `Items` (those go to `on_items`), `Arrived` (kept for
    /// `take_arrived`), `Replicas` (kept for the report) or `Keepalive` (the receiver is
    /// busy on the answer). A receiver whose data streams could not be re-established is
    /// lost, whatever its control stream says; so is one silent for `watch::SILENCE`.
    fn read_answer(&mut self) -> Result<Control> {
        loop {
            let msg = match self.chan.read(Some(TICK)) {
                Ok(m) => m,
                Err(e) if is_tick(&e) => {
                    if self.target.is_broken() {
                        return Err(streams_broke());
                    }
                    self.check_stall()?;
                    if self.patience.poll_silent(self.now()) {
                        return Err(silent());
                    }
                    continue;
                }
                Err(e) => return Err(e),
            };
            let now = self.now();
            self.patience.handle_heard(now);
            match msg {
                Control::Keepalive => {}
                Control::Items(items) => {
                    if let Some(f) = self.on_items {
                        f(items);
                    }
                }
                Control::Arrived(ids) => self.arrived.extend(ids),
                Control::Replicas(r) => self.heard(r),
                Control::Proof(p) => self.proved(p),
                other => return Ok(other),
            }
        }
    }

    /// The first receiver's proof of its outcome (the sender sees that outcome itself).
    pub(super) fn proved(&mut self, proof: [u8; 32]) {
        if let Some(s) = self.succ.as_mut() {
            s.proved(proof);
        }
    }

    /// The first receiver's account of the receivers after it.
    pub(super) fn heard(&mut self, replicas: Vec<Replica>) {
        if let Some(s) = self.succ.as_mut() {
            s.heard(replicas);
        }
    }

    /// The (current) first receiver answered Done.
    pub(super) fn done(&mut self, summary: &Summary) {
        if let Some(s) = self.succ.as_mut() {
            s.done(summary.clone());
        }
    }

    /// What became of every receiver of a chain fan-out (empty for one receiver), a
    /// `Done` heard of (not seen) standing only when `proven` (`Successors::settle`).
    pub(super) fn settled(&self, proven: impl Fn(&Replica) -> bool) -> Vec<Replica> {
        self.succ
            .as_ref()
            .map(|s| s.settle(proven))
            .unwrap_or_default()
    }

    /// The digest of the manifest sent so far (`protocol::vouch`).
    pub(super) fn manifest_digest(&self) -> [u8; 32] {
        self.manifest.digest()
    }

    /// Whether a receiver comes after the current first one (so the run can go on if it
    /// fails).
    pub(super) fn can_fail_over(&self) -> bool {
        self.succ.as_ref().is_some_and(Successors::has_more)
    }

    /// Whether a receiver of a chain fan-out is complete though the chain has no one
    /// left to go on with: the failed first had reported it done before its error.
    pub(super) fn delivered(&self) -> bool {
        self.succ.as_ref().is_some_and(Successors::any_done)
    }

    /// Which receiver the connections go to (changes when the chain moves on).
    pub(super) fn generation(&self) -> u64 {
        self.target.generation()
    }

    /// Whether the data streams gave up on the current receiver (and, in a chain, wait
    /// for the link to go on with the next).
    pub(super) fn data_broken(&self) -> bool {
        self.target.is_broken()
    }

    /// The first receiver failed with `e`: reports it and goes on with the receiver after
    /// it (the first of them that answers), which is told what it must know; `e` when no
    /// receiver is left to go on with.
    pub(super) fn fail_over(&mut self, e: Error) -> Result<()> {
        self.chan = go_on(&mut self.succ, &self.start, &self.told, self.target, e)?;
        self.moved_now();
        Ok(())
    }

    /// After the control stream failed with `e`: a new one to the same receiver, or,
    /// when that receiver is gone, to the next in the chain.
    fn recover(&mut self, e: Error) -> Result<()> {
        if self.target.is_broken() {
            return self.fail_over(e);
        }
        self.reconnect(&e)
    }

    /// Re-dials after a failure, with backoff (`watch::Redial`); goes on with the next
    /// receiver of a chain when that fails.
    pub(super) fn reconnect(&mut self, why: &Error) -> Result<()> {
        let mut last = None;
        let mut redial = Redial::new(self.retries);
        while let Some(wait) = redial.poll_dial() {
            std::thread::sleep(Duration::from_millis(wait));
            match self.target.dial(Role::Control).and_then(|d| {
                let mut chan = Channel::new(d.conn);
                chan.write(&self.start).map(|()| chan)
            }) {
                Ok(c) => {
                    crate::progress::warn(&format!("control stream reconnected ({why})"));
                    Counters::add(&self.counters.reconnects, 1);
                    self.chan = c;
                    self.moved_now();
                    return Ok(());
                }
                // Something else answers at the receiver's address now (it was restarted,
                // or its port was reused): our receiver is gone, which is a lost connection,
                // not a wrong ticket. Retrying will not help.
                Err(e @ Error::Transport(TransportError::AuthRejected))
                | Err(e @ Error::Transport(TransportError::PeerUnauthenticated)) => {
                    return self.fail_over(gave_up(why, Some(e)))
                }
                Err(e) => last = Some(e),
            }
        }
        // Report the loss (a network failure), with why re-dialing did not help.
        self.fail_over(gave_up(why, last))
    }

    /// After a message failed with `e` on the control stream: what `tries` decides
    /// (`watch::Retries`): a new control stream, the next receiver of a chain, or `e`.
    fn retry(&mut self, e: Error, tries: &mut Retries) -> Result<()> {
        let before = self.target.generation();
        let failure = match &e {
            Error::Transport(_) if self.target.is_broken() => Failure::Gone,
            Error::Transport(_) => Failure::Lost,
            Error::Remote { .. } => Failure::Refused,
            _ => return Err(e),
        };
        match tries.handle_failure(failure, self.can_fail_over()) {
            Step::Redial => self.reconnect(&e)?,
            Step::GoOn => self.fail_over(e)?,
            Step::Fail => return Err(e),
        }
        if self.target.generation() != before {
            tries.handle_new_receiver();
        }
        Ok(())
    }

    /// Sends `msg` and reads the answer, reconnecting and repeating as needed. In a
    /// chain, an `Error` answer fails the first receiver over to the next.
    pub(super) fn request(&mut self, msg: &Control) -> Result<Control> {
        if let Control::Entries(entries) = msg {
            self.manifest.batch(entries);
        }
        let mut tries = Retries::new(self.retries);
        loop {
            let r = self.chan.write(msg).and_then(|()| {
                let now = self.now();
                self.patience.handle_asked(now);
                self.read_answer()
            });
            match r {
                Ok(Control::Error { code, message }) if self.can_fail_over() => {
                    let e = Error::Remote {
                        side: "receiver",
                        message,
                        code,
                    };
                    self.retry(e, &mut tries)?;
                }
                Ok(reply) => return Ok(reply),
                Err(e) => self.retry(e, &mut tries)?,
            }
        }
    }

    /// Sends `msg`, which has no answer, reconnecting as needed.
    pub(super) fn tell(&mut self, msg: &Control) -> Result<()> {
        if self.succ.is_some() && matches!(msg, Control::Protect(_) | Control::Forget(_)) {
            self.told.push(msg.clone());
        }
        let mut tries = Retries::new(self.retries);
        loop {
            let now = self.now();
            self.patience.handle_said(now);
            match self.chan.write(msg) {
                Ok(()) => return Ok(()),
                Err(e) => self.retry(e, &mut tries)?,
            }
        }
    }

    /// Waits up to `timeout` for the next message.
    pub(super) fn poll(&mut self, timeout: Duration) -> Result<Polled> {
        match self.chan.read(Some(timeout)) {
            Ok(m) => {
                self.moved_now();
                Ok(Polled::Msg(m))
            }
            Err(e) if is_tick(&e) => {
                self.check_stall()?;
                Ok(Polled::Nothing)
            }
            Err(e @ Error::Transport(_)) => {
                self.recover(e)?;
                Ok(Polled::Reconnected)
            }
            Err(e) => Err(e),
        }
    }

    /// After a stream failed: did the receiver send an Error explaining why?
    pub(super) fn remote_reason(&mut self) -> Option<Error> {
        match self.chan.read(Some(Duration::from_secs(2))) {
            Ok(Control::Error { code, message }) => Some(Error::Remote {
                side: "receiver",
                message,
                code,
            }),
            _ => None,
        }
    }

    pub(super) fn tell_error(&mut self, e: &Error) {
        let _ = self.chan.write(&Control::Error {
            code: e.exit_code(),
            message: e.to_string(),
        });
    }

    pub(super) fn close(&mut self) {
        let _ = self.chan.shutdown_write();
    }
}

/// The first receiver failed with `e`: reports it (`succ`) and dials the receiver after it
/// (the first of them that answers), telling it `start` with the rest of the chain and
/// then `told`, and points `target` at it; `e` when no receiver is left.
fn go_on(
    succ: &mut Option<Successors>,
    start: &Control,
    told: &[Control],
    target: &Target<'_>,
    e: Error,
) -> Result<Channel> {
    let Some(succ) = succ.as_mut().filter(|s| s.has_more()) else {
        return Err(e);
    };
    succ.fail(&e);
    let encrypt = succ.encrypt();
    let opened = succ.connect(|ticket, rest| {
        let conn = transport::connect(ticket, Role::Control, encrypt)?;
        let mut chan = Channel::new(conn);
        for m in hello(start, rest).iter().chain(told) {
            chan.write(m)?;
        }
        Ok(chan)
    });
    match opened {
        Some((chan, ticket)) => {
            target.retarget(ticket);
            Ok(chan)
        }
        None => Err(e),
    }
}

/// What a new first receiver gets first: the sender's start, with the chain after it.
fn hello(start: &Control, rest: Chain) -> Vec<Control> {
    match start {
        Control::StreamStart {
            streams,
            block_size,
            window,
            ..
        } => vec![Control::StreamStart {
            streams: *streams,
            block_size: *block_size,
            window: *window,
            chain: rest,
        }],
        start if rest.hops.is_empty() && rest.nonce.is_none() => vec![start.clone()],
        start => vec![start.clone(), Control::Chain(rest)],
    }
}

/// A receiver silent for `watch::SILENCE` while its answer was awaited: a lost connection
/// (re-dialed; exit 5 when that does not help).
fn silent() -> Error {
    lost(std::io::Error::other(format!(
        "the receiver said nothing for {} s while its answer was awaited (stopped, hung or \
         cut off)",
        SILENCE / 1000
    )))
}

/// A receiver whose data streams could not be re-established.
pub(super) fn streams_broke() -> Error {
    lost(std::io::Error::other(
        "its data streams broke and it cannot be dialed again",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{Hop, SyncOptions};

    #[test]
    fn a_new_first_receiver_gets_the_rest_of_the_chain() {
        let rest = Chain {
            hops: vec![Hop {
                label: "h3".into(),
                ticket: "t3".into(),
            }],
            encrypt: true,
            nonce: None,
        };
        let start = Control::Start {
            streams: 2,
            block_size: 1 << 20,
            options: SyncOptions::default(),
        };
        assert_eq!(
            hello(&start, rest.clone()),
            vec![start.clone(), Control::Chain(rest.clone())]
        );
        let last = Chain::default();
        assert_eq!(hello(&start, last.clone()), vec![start]);
        let stream = Control::StreamStart {
            streams: 2,
            block_size: 1 << 20,
            window: 1 << 26,
            chain: Chain::default(),
        };
        match &hello(&stream, rest.clone())[..] {
            [Control::StreamStart { chain, window, .. }] => {
                assert_eq!(chain, &rest);
                assert_eq!(*window, 1 << 26);
            }
            other => panic!("{other:?}"),
        }
    }
}
