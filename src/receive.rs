//! The receiver driver: answers the manifest on the control connection and runs one
//! blocking worker per data connection (frame → decompress → verify → pwrite; a local
//! copy's lane: unit → pwrite).
//!
//! Connections may drop and come back during a transfer: a data connection that ends
//! without its End frame only ends its worker (the sender re-dials; anything lost is
//! asked for again after `Finish`), and a control connection that drops is replaced by
//! the next one the sender opens (it replays its last request, which is answered from a
//! cache, not applied twice). Only when nothing arrives for `timeout` does the receiver
//! give up. Every fatal failure (disk full, verification failure, protocol violation)
//! ends the transfer with one `Control::Error` to the sender; partial files and their
//! journals stay for a later run.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError};

mod data;
mod forward;
mod heartbeat;
mod integrity;
mod lane;
mod listing;
pub mod pipe;
pub mod probe;
mod relay;
mod report;
mod shared;

pub use report::{ReceiveOptions, ReceiveReport};

use crate::error::{Error, Result};
use crate::progress::{Counters, Printer, Progress};
use crate::protocol::vouch::{self, ManifestDigest};
use crate::protocol::{check_batch, Control, Item, Listing, ProtocolError, Summary, SyncOptions};
use crate::session::watch::{self, Answers, SenderWatch, MAX_ROUNDS};
use crate::session::{is_forged, is_tick, lost, Channel};
use crate::store::Store;
use crate::transport::{Accepted, Conn, Role};
use data::{settle, spawn_data_worker};
use integrity::{read_start, Forgeries, DATA_CONN_SLACK};
use relay::{union, Answer, Relay};
use shared::{ms, Shared, TICK};

/// The connections a listener accepts, as `receive` takes them: each with its role, in
/// the order they arrive. Probes are closed at once: only a waiting `haul recv DIR`
/// answers them ([`probe::incoming_answering_probes`]).
/// At most [`integrity::QUEUED_CONNS`] wait to be taken; more are closed at once.
pub fn incoming(accepted: Receiver<Accepted>) -> Result<Receiver<(Conn, Role)>> {
    let (mut queue, rx) = integrity::ConnQueue::new();
    std::thread::Builder::new()
        .name("haul-incoming".into())
        .spawn(move || {
            for a in accepted {
                if matches!(a.role, Role::Probe | Role::ProbeData) {
                    continue;
                }
                if !queue.offer(a.conn, a.role) {
                    break;
                }
            }
        })
        .map_err(|e| Error::io("starting the listener thread", e))?;
    Ok(rx)
}

/// Serves one transfer into `store`. `incoming` yields authenticated connections; the
/// first control connection starts the transfer.
pub fn receive(
    store: Store,
    key: [u8; 32],
    incoming: Receiver<(Conn, Role)>,
    opts: ReceiveOptions,
) -> Result<ReceiveReport> {
    let mut early_data = Vec::new();
    let first = (opts.first, opts.timeout);
    let (control, (streams, block_size, options), forged) =
        match integrity::first_start(&incoming, first, &mut early_data, read_start) {
            Ok(s) => s,
            Err(e) => {
                // No transfer began: DIR, if this run made it, goes again (while empty).
                store.remove_made();
                return Err(e);
            }
        };
    let started = Instant::now();
    store.configure(u64::from(block_size), options, key);
    store.collect_items(options.items || opts.listing.is_on());
    let store = Arc::new(store);
    store.start();
    let counters = Arc::clone(&store.stats);
    let bar = Progress::start(Arc::clone(&counters), opts.progress);
    let shared = Arc::new(Shared {
        store: Arc::clone(&store),
        key,
        abort: AtomicBool::new(false),
        fatal: Mutex::new(None),
        active: AtomicUsize::new(0),
        max_active: usize::from(streams) + DATA_CONN_SLACK,
        surplus_warned: AtomicBool::new(false),
        data_conns: AtomicUsize::new(0),
        control_conns: AtomicUsize::new(1),
        last_activity: Mutex::new(Instant::now()),
        units: std::sync::atomic::AtomicU64::new(0),
        busy: AtomicUsize::new(0),
        forged: Forgeries::starting_at(forged),
        forward: std::sync::OnceLock::new(),
    });
    let (control_tx, control_rx) = integrity::ControlQueue::new();
    for c in early_data {
        spawn_data_worker(&shared, c);
    }
    spawn_dispatcher(Arc::clone(&shared), incoming, control_tx)?;

    let mut session = Session {
        shared: &shared,
        control,
        control_rx,
        timeout: opts.timeout,
        answers: Answers::default(),
        listing: opts.listing,
        send_items: options.items,
        printer: bar.printer(),
        start: (streams, block_size, options),
        relay: None,
        may_relay: opts.relay,
        outcome_key: opts.outcome_key,
        nonce: None,
        manifest: ManifestDigest::default(),
        finished: None,
        units_base: 0,
        watch: SenderWatch::new(ms(opts.timeout), 0),
        clock: Instant::now(),
    };
    let result = session.run(&counters);
    if let (Err(e), Some(r)) = (&result, session.relay.as_mut()) {
        match e {
            // What failed upstream fails the chain after this receiver too.
            Error::Remote { .. } | Error::Transport(_) | Error::Protocol(_) => r.abort(e),
            // This receiver's own failure (its disk, its destination) is its alone: the
            // next hop's connections just close, and the sender (or the relay) before
            // this one, told so, goes on with it.
            _ => r.leave(),
        }
    }
    if let Some(f) = shared.forward.get() {
        f.stop();
    }
    shared.abort.store(true, Ordering::Relaxed);
    bar.finish();
    let reconnects = (shared.data_conns.load(Ordering::Relaxed) as u64)
        .saturating_sub(u64::from(streams))
        + (shared.control_conns.load(Ordering::Relaxed) as u64).saturating_sub(1);
    match result {
        Ok((summary, sender_failed)) => {
            session.say_done(&summary);
            Ok(ReceiveReport {
                summary,
                sender_failed,
                counters,
                started,
                reconnects,
            })
        }
        Err(e) => {
            // Whatever stopped us, what is durable now is kept for the next run.
            store.save_progress();
            if !matches!(e, Error::Transport(_)) {
                session.say_error(&e);
            }
            Err(e)
        }
    }
}

/// Hands data connections to new workers and control connections to the control loop,
/// for as long as the transfer runs.
fn spawn_dispatcher(
    shared: Arc<Shared>,
    incoming: Receiver<(Conn, Role)>,
    control_tx: integrity::ControlQueue,
) -> Result<()> {
    std::thread::Builder::new()
        .name("haul-dispatch".into())
        .spawn(move || {
            while !shared.abort.load(Ordering::Relaxed) {
                match incoming.recv_timeout(TICK) {
                    Ok((c, Role::Data)) => spawn_data_worker(&shared, c),
                    // Probes never reach a transfer (`incoming` keeps them out).
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
        .map(|_| ())
        .map_err(|e| Error::io("starting the dispatch thread", e))
}

/// The control side of one transfer.
struct Session<'a> {
    shared: &'a Shared,
    control: Channel,
    control_rx: Receiver<Conn>,
    timeout: Duration,
    /// The answers to the last Entries batch, for a sender that repeats it.
    answers: Answers<Control>,
    /// What to print here per change.
    listing: Listing,
    /// Whether the sender asked for `Items`.
    send_items: bool,
    /// Prints without tearing the progress bar.
    printer: Printer,
    /// The sender's Start: streams, block size, options.
    start: (u16, u32, SyncOptions),
    /// In a chain fan-out: the receivers this one passes the transfer on to.
    relay: Option<Relay>,
    /// Whether this receiver may relay (`ReceiveOptions::relay`).
    may_relay: bool,
    /// `ReceiveOptions::outcome_key`.
    outcome_key: Option<[u8; 32]>,
    /// A chain fan-out: the sender's nonce, which this receiver's proof is bound to.
    nonce: Option<[u8; 32]>,
    /// Every batch of the manifest applied here, for that proof.
    manifest: ManifestDigest,
    /// This store's summary, once it is complete (a relay may wait for the next hop).
    finished: Option<Summary>,
    /// Data frames received before the current sender's control connection: its
    /// `Finish` counts only the units it wrote (a relay that re-formed the chain around a
    /// failed hop, a sender that went on from a failed first receiver).
    units_base: u64,
    /// When a silent sender is gone and a dropped control connection given up on
    /// (`session::watch`), on the clock of `clock`.
    watch: SenderWatch,
    clock: Instant,
}

impl Session<'_> {
    /// Milliseconds on this session's clock, for `session::watch`.
    fn now(&self) -> u64 {
        ms(self.clock.elapsed())
    }

    /// Handles requests until the transfer is complete; returns the summary and how many
    /// files the sender could not read.
    fn run(&mut self, counters: &Counters) -> Result<(Summary, u64)> {
        let store = &self.shared.store;
        let mut rounds = 0u32;
        loop {
            if let Some(e) = self.shared.take_fatal().or_else(|| store.take_error()) {
                return Err(e);
            }
            if let Some(r) = self.relay.as_mut().filter(|r| r.broken()) {
                // Dialing around the failed hop takes a while: heard.
                heartbeat::busy(&mut self.control, || r.check());
            }
            if let Some(news) = self.relay.as_mut().and_then(Relay::news) {
                self.reply(&Control::Replicas(news))?;
            }
            let Some(msg) = self.next_msg()? else {
                continue;
            };
            match msg {
                Control::Start { .. } => {}
                // The sender is there (its walk or its data streams are busy): heard, and
                // passed on, so the next hop hears its relay too.
                Control::Keepalive => {
                    if let Some(r) = self.relay.as_mut() {
                        r.tell(&Control::Keepalive);
                    }
                }
                Control::Entries(entries) => {
                    check_batch(&entries)?;
                    let first = entries.first().map(|e| e.id);
                    if let Some(replies) = self.answers.repeat(first) {
                        watch::answer(&replies, |r| self.write_or_await(r))?;
                        continue;
                    }
                    self.manifest.batch(&entries);
                    let relay = &mut self.relay;
                    // Deltas hash big files, the next hop may take its time: heard.
                    let need = heartbeat::busy(&mut self.control, || {
                        if let Some(r) = relay.as_mut() {
                            r.send_batch(entries.clone());
                        }
                        listing::count_entries(counters, &entries);
                        let mut need = relay::heard(relay, || store.apply_entries(entries))?;
                        integrity::check_pending(store.incomplete())?;
                        if let Some(r) = relay.as_mut() {
                            let next = r.batch_need();
                            store.ignore(next.iter().map(|w| w.id));
                            need = union(need, next);
                        }
                        Ok::<_, Error>(need)
                    })?;
                    let mut replies = self.items(store.take_items());
                    replies.extend(self.arrived(store.take_arrived()));
                    // A hop left behind is told before the answer: a sender that takes
                    // over from here must not dial it for later batches it never saw.
                    if let Some(news) = self.relay.as_mut().and_then(Relay::news) {
                        replies.push(Control::Replicas(news));
                    }
                    replies.push(Control::Need(need));
                    self.answers.keep(first, &replies);
                    watch::answer(&replies, |r| self.write_or_await(r))?;
                }
                Control::Chain(chain) if self.relay.is_none() => {
                    relay::allowed(self.may_relay, &chain)?;
                    self.nonce = self.nonce.or(chain.nonce);
                    if chain.hops.is_empty() {
                        // The last hop: only the nonce.
                        continue;
                    }
                    let (streams, block_size, options) = self.start;
                    crate::session::check_not_self(&chain, &self.shared.key)?;
                    // Dialing around hops that do not answer takes a while.
                    let r = heartbeat::busy(&mut self.control, || {
                        Relay::start(chain, streams, block_size, options)
                    })?;
                    let _ = self.shared.forward.set(Arc::clone(&r.forward));
                    self.relay = Some(r);
                }
                Control::Chain(_) => {}
                Control::Forget(ids) => {
                    store.discard(&ids)?;
                    if let Some(r) = self.relay.as_mut() {
                        r.tell(&Control::Forget(ids));
                    }
                }
                Control::Protect(rules) => {
                    if let Some(r) = self.relay.as_mut() {
                        r.tell(&Control::Protect(rules.clone()));
                    }
                    store.protect(rules)
                }
                Control::Finish {
                    failed,
                    units,
                    unlisted,
                } => {
                    store.discard(&failed)?;
                    let (shared, base, timeout) = (self.shared, self.units_base, self.timeout);
                    let (finished, relay) = (&mut self.finished, &mut self.relay);
                    // Settling, the fsyncs and the next hop's own Finish: heard.
                    let missing = heartbeat::busy(&mut self.control, || {
                        let mut missing = relay::heard(relay, || {
                            settle(shared, base, timeout, units)?;
                            let missing = match finished {
                                Some(_) => Vec::new(),
                                None => store.missing(),
                            };
                            if missing.is_empty() && finished.is_none() {
                                *finished = Some(store.finish()?);
                            }
                            Ok::<_, Error>(missing)
                        })?;
                        if let Some(r) = relay.as_mut() {
                            if let Answer::Need(next) = r.finish(&failed, unlisted) {
                                store.ignore(next.iter().map(|w| w.id));
                                missing = union(missing, next);
                            }
                        }
                        Ok::<_, Error>(missing)
                    })?;
                    let mut replies = self.items(store.take_items());
                    if missing.is_empty() {
                        // After a reconnect the rest goes on the new connection: the
                        // sender's repeated Finish is answered Done again (`say_done`).
                        for reply in &replies {
                            self.reply(reply)?;
                        }
                        if let Some(r) = &self.relay {
                            self.reply(&Control::Replicas(r.replicas()))?;
                        }
                        let summary = self.finished.take().unwrap_or_default();
                        return Ok((summary, failed.len() as u64 + unlisted));
                    }
                    rounds += 1;
                    if rounds > MAX_ROUNDS {
                        let e = lost(io::Error::other(format!(
                            "data kept getting lost in transit ({MAX_ROUNDS} rounds of asking \
                             again); giving up: check the network and re-run to resume"
                        )));
                        // The control connection is alive (a Finish just came): say why,
                        // or the sender would see only a dropped connection.
                        self.say_error(&e);
                        return Err(e);
                    }
                    self.answers.clear();
                    replies.extend(self.arrived(store.take_arrived()));
                    replies.push(Control::Need(missing));
                    watch::answer(&replies, |r| self.write_or_await(r))?;
                }
                Control::Error { code, message } => {
                    return Err(Error::Remote {
                        side: "sender",
                        message,
                        code,
                    })
                }
                other => return Err(ProtocolError::Unexpected(other.name().into()).into()),
            }
        }
    }

    /// `Arrived` messages for `ids`; a relay of a chain fan-out reports only files every
    /// hop after it has too (a later hop may still ask for the others through it).
    fn arrived(&mut self, ids: Vec<u64>) -> Vec<Control> {
        match self.relay.as_mut() {
            None => listing::arrived(ids),
            Some(r) => listing::arrived(r.arrived(ids)),
        }
    }

    /// Prints `items` here when this side lists them, and returns the `Items` messages
    /// for the sender when it asked.
    fn items(&self, items: Vec<Item>) -> Vec<Control> {
        for i in &items {
            if let Some(line) = self.listing.line(i) {
                self.printer.say(&line, self.listing.stderr);
            }
        }
        match self.send_items {
            true => listing::messages(items),
            false => Vec::new(),
        }
    }

    /// The next control message; `None` after a timeout tick or a reconnect. Waits for a
    /// replacement when the control connection drops.
    fn next_msg(&mut self) -> Result<Option<Control>> {
        match self.control.read(Some(TICK)) {
            Ok(m) => {
                let now = self.now();
                self.watch.handle_heard(now);
                Ok(Some(m))
            }
            Err(ref e) if is_tick(e) => {
                // A sender says `Keepalive` every second while it works.
                let idle = ms(self.shared.idle_for());
                let busy = self.shared.busy.load(Ordering::Acquire) != 0;
                if self.watch.poll_gone(self.now(), idle, busy) {
                    return Err(lost(io::Error::other(format!(
                        "the sender said nothing and sent no data for {} s (stopped, hung \
                         or cut off; --timeout): re-run to resume, what arrived is kept",
                        self.timeout.as_secs()
                    ))));
                }
                Ok(None)
            }
            Err(e @ Error::Transport(_)) => {
                self.forged(&e)?;
                self.await_control()?;
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// When `e` is a control frame that failed verification: counts it and drops the
    /// connection, so a sender waiting for our answer re-dials at once.
    fn forged(&mut self, e: &Error) -> Result<()> {
        if !is_forged(e) {
            return Ok(());
        }
        self.control.abort();
        (self.shared.forged).note("control", &self.control.conn().peer_desc(), e)
    }

    /// The control connection dropped: waits up to `timeout` for the sender to open a
    /// new one, which starts with Start again.
    fn await_control(&mut self) -> Result<()> {
        let now = self.now();
        self.watch.handle_dropped(now);
        loop {
            if let Some(e) = self.shared.take_fatal() {
                return Err(e);
            }
            match self.control_rx.recv_timeout(TICK) {
                Ok(c) => {
                    let mut c = Channel::new(c);
                    match read_start(&mut c) {
                        Ok(_) => {
                            self.control = c;
                            let now = self.now();
                            self.watch.handle_reconnected(now);
                            self.units_base = self.shared.units.load(Ordering::Acquire);
                            crate::progress::warn("the sender reconnected its control stream");
                            return Ok(());
                        }
                        Err(e) if is_forged(&e) => {
                            (self.shared.forged).note("control", &c.conn().peer_desc(), &e)?
                        }
                        Err(e) if is_tick(&e) => {
                            crate::progress::warn(&integrity::silent_first(&c))
                        }
                        Err(_) => {}
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => break,
            }
            if self.watch.poll_vanished(self.now()) {
                break;
            }
        }
        Err(lost(io::Error::other(
            "the sender vanished mid-transfer (killed, or the network dropped) and did not \
             reconnect: re-run both ends (haul recv, then haul send with its new ticket; a \
             copy: the same command); \
             what arrived is kept and not sent again",
        )))
    }

    /// Answers on the control stream; a failed write waits for a reconnect (the sender
    /// will repeat its request).
    fn reply(&mut self, msg: &Control) -> Result<()> {
        self.write_or_await(msg).map(|_| ())
    }

    /// Writes `msg`: true when written, false when the write failed and a new control
    /// connection replaced the old one.
    fn write_or_await(&mut self, msg: &Control) -> Result<bool> {
        match self.control.write(msg) {
            Ok(()) => {
                // The sender's turn starts now (this answer may have taken long).
                let now = self.now();
                self.watch.handle_heard(now);
                Ok(true)
            }
            Err(Error::Transport(_)) => self.await_control().map(|()| false),
            Err(e) => Err(e),
        }
    }

    /// Sends Done and waits (briefly) for the sender to close, so it can read it; a
    /// sender that asks again after reconnecting gets it again.
    fn say_done(&mut self, summary: &Summary) {
        // A receiver of a chain fan-out proves its outcome to the sender, through any relay.
        let proof = match (self.outcome_key, self.nonce) {
            (Some(key), Some(nonce)) => {
                let p = vouch::proof(&key, &nonce, &self.manifest.digest(), summary);
                Some(Control::Proof(p))
            }
            _ => None,
        };
        let done = Control::Done(summary.clone());
        let deadline = Instant::now() + Duration::from_secs(5);
        let say = |c: &mut Channel| {
            if let Some(p) = &proof {
                let _ = c.write(p);
            }
            let _ = c.write(&done);
        };
        say(&mut self.control);
        while Instant::now() < deadline {
            match self.control.read(Some(TICK)) {
                Ok(Control::Finish { .. }) => say(&mut self.control),
                Ok(_) => {}
                Err(ref e) if is_tick(e) => {}
                Err(_) => match self.control_rx.try_recv() {
                    Ok(c) => {
                        let mut c = Channel::new(c);
                        if read_start(&mut c).is_ok() {
                            self.control = c;
                        }
                    }
                    Err(_) => break,
                },
            }
        }
    }

    /// Tells the sender why the transfer failed and lets it read that before closing.
    fn say_error(&mut self, e: &Error) {
        let _ = self.control.write(&Control::Error {
            code: e.exit_code(),
            message: e.to_string(),
        });
        let _ = self.control.shutdown_write();
        let deadline = Instant::now() + Duration::from_secs(2);
        while Instant::now() < deadline {
            match self.control.read(Some(TICK)) {
                Ok(_) => {}
                Err(ref e) if is_tick(e) => {}
                Err(_) => break,
            }
        }
    }
}
