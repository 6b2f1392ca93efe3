//! A receiver in a chain fan-out that passes the transfer on: the control side. It dials
//! the next receiver with the rest of the chain, forwards each manifest batch and answers
//! upstream with the union of its own and the next receiver's needs (a file the two want in
//! different ways is asked for whole; a re-run where only one replica is incomplete
//! resumes like any run), forwards `Protect`, `Forget` and `Finish`, and collects what
//! became of every receiver after it.
//!
//! When the next receiver fails (vanishes, or says Error) the chain re-forms around it:
//! the relay dials the receiver after it with the rest of the chain, gives it the current
//! manifest batch again (a receiver answers a repeated batch from its cache) and every
//! `Forget` so far; what that receiver missed meanwhile it asks for after `Finish`. The
//! failed one is reported upstream in `Replicas` at once (before the answer to any later
//! batch), so that a sender taking over from this relay does not dial it again. The
//! bookkeeping of who comes next is `session::Successors`, which the sender shares.
//!
//! Who may relay ([`allowed`]): `haul recv --relay`, a far end whose `Receive` or
//! `ReceiveStream` says `relay` (as every `copy --also` destination's does), and a local
//! copy's or a pull's own receiver. Any other receiver answers a chain with `Error` (exit
//! 2, naming `--relay`) before it dials anything.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use super::forward::Forward;
use crate::error::{Error, Result};
use crate::protocol::{
    Chain, Control, Entry, Filter, ProtocolError, Replica, Summary, SyncOptions, Want, WantKind,
};
use crate::session::{is_tick, lost, Channel, Successors};
use crate::transport::{self, Role};

/// Longest silence of the next hop while its answer is awaited: a hop busy on it says
/// `Keepalive` every second (`heartbeat`), so one silent this long is stopped, hung or cut
/// off, and the chain re-forms around it (pipe mode's relay has the same bound).
const SILENCE: std::time::Duration = std::time::Duration::from_secs(10);

/// Refuses a chain unless this receiver was told it may relay (`recv --relay`, a far end
/// of `copy --also`): passing the transfer on means dialing the addresses the sender's
/// tickets name, which a ticket holder could otherwise point anywhere.
pub(super) fn allowed(relay: bool, chain: &Chain) -> Result<()> {
    match (relay, chain.hops.first()) {
        (false, Some(next)) => Err(Error::Usage(format!(
            "the sender asked this receiver to pass the transfer on to {} (a chain \
             fan-out), but it relays only when started with `haul recv --relay`",
            crate::progress::escape(&next.label)
        ))),
        _ => Ok(()),
    }
}

/// Runs `work`, this receiver's own (hashing for deltas, settling and the fsyncs at
/// `Finish`), saying `Keepalive` to the next hop of `relay` every second meanwhile: it
/// waits on this relay then and, hearing nothing for its `--timeout`, would take it for
/// stopped (docs/design.md, *Liveness*).
pub(super) fn heard<T>(relay: &mut Option<Relay>, work: impl FnOnce() -> T) -> T {
    match relay.as_mut().and_then(|r| r.chan.as_mut()) {
        Some(c) => super::heartbeat::busy(c, work),
        None => work(),
    }
}

/// What the next receiver said to `Finish`.
pub(super) enum Answer {
    /// It is complete (or there is no next receiver any more).
    Done,
    /// It still needs this.
    Need(Vec<Want>),
}

/// The downstream half of a relay.
pub(super) struct Relay {
    /// Receivers after this one, nearest (the current next hop) first, and what became
    /// of those left behind.
    succ: Successors,
    /// What the next hop gets as `Start`.
    start: Control,
    chan: Option<Channel>,
    protect: Option<Filter>,
    forgotten: Vec<u64>,
    /// The manifest batch whose `Need` is awaited (an `Entries`).
    current: Option<Control>,
    /// Files that arrived whole here, not yet reported upstream (see [`Relay::arrived`]).
    own: HashSet<u64>,
    /// Files the next hop reported arrived (there and at every hop after it), not yet
    /// arrived here.
    down: HashSet<u64>,
    pub(super) forward: Arc<Forward>,
}

impl Relay {
    /// Sets up forwarding to `chain` (validated) and dials its first reachable hop.
    pub(super) fn start(
        chain: Chain,
        streams: u16,
        block_size: u32,
        options: SyncOptions,
    ) -> Result<Relay> {
        chain.check()?;
        let forward = Arc::new(Forward::new(streams.into(), chain.encrypt));
        forward.spawn(streams.into())?;
        // Asked for `Items` as this one was (they are dropped here: the sender lists what
        // changes at the first), so that they go on if the sender goes on with it.
        let start = Control::Start {
            streams,
            block_size,
            options,
        };
        let mut relay = Relay {
            succ: Successors::new(chain),
            start,
            chan: None,
            protect: None,
            forgotten: Vec::new(),
            current: None,
            own: HashSet::new(),
            down: HashSet::new(),
            forward,
        };
        relay.connect_next();
        Ok(relay)
    }

    /// Dials the first hop that answers, dropping (and reporting) those that do not, and
    /// tells it everything it must know, the manifest batch in progress included.
    fn connect_next(&mut self) {
        let told = Told {
            start: &self.start,
            protect: self.protect.as_ref(),
            forgotten: &self.forgotten,
            current: self.current.as_ref(),
        };
        let encrypt = self.succ.encrypt();
        match self.succ.connect(|ticket, rest| {
            let conn = transport::connect(ticket, Role::Control, encrypt)?;
            told.open(Channel::new(conn), rest)
        }) {
            Some((chan, ticket)) => {
                self.chan = Some(chan);
                self.forward.retarget(Some(ticket));
            }
            None => {
                self.chan = None;
                self.forward.retarget(None);
            }
        }
    }

    /// The current next hop failed with `e`: reports it and leaves it out of the chain.
    fn drop_hop(&mut self, e: &Error) {
        self.succ.fail(e);
        self.chan = None;
    }

    /// The next hop failed: re-forms the chain around it.
    fn reform(&mut self, e: &Error) {
        self.drop_hop(e);
        self.connect_next();
    }

    /// Whether a data stream found the next hop unreachable (see [`Relay::check`]).
    pub(super) fn broken(&self) -> bool {
        self.chan.is_some() && self.forward.broken()
    }

    /// Re-forms the chain when a data stream found the next hop unreachable.
    pub(super) fn check(&mut self) {
        if self.chan.is_some() && self.forward.broken() {
            let e = Error::Transport(transport::TransportError::Io(std::io::Error::other(
                "its data streams broke and it cannot be dialed again",
            )));
            self.reform(&e);
        }
    }

    /// Writes `msg` to the next hop (re-forming the chain if it failed).
    pub(super) fn tell(&mut self, msg: &Control) {
        match msg {
            Control::Protect(p) => self.protect = Some(p.clone()),
            Control::Forget(ids) => self.forgotten.extend(ids),
            _ => {}
        }
        if let Some(chan) = self.chan.as_mut() {
            if let Err(e) = chan.write(msg) {
                // The re-formed chain gets it from `dial` (Protect and Forget so far).
                self.reform(&e);
            }
        }
    }

    /// Sends a manifest batch on (before it is applied here, so both work at once).
    pub(super) fn send_batch(&mut self, batch: Vec<Entry>) {
        let msg = Control::Entries(batch);
        if let Some(chan) = self.chan.as_mut() {
            if let Err(e) = chan.write(&msg) {
                self.current = Some(msg);
                return self.reform(&e);
            }
        }
        self.current = Some(msg);
    }

    /// Files that arrived whole here (`ids`) and before: those the next hop reported
    /// arrived too (its `Arrived` speaks for the hops after it as well) are returned, to
    /// be reported upstream, so that the sender forgets a file only once every hop has it
    /// (after a hop fails, the one dialed instead had it already); all of them once no
    /// hop is left after this one.
    pub(super) fn arrived(&mut self, ids: Vec<u64>) -> Vec<u64> {
        self.own.extend(ids);
        if self.succ.front().is_none() {
            self.down.clear();
            return self.own.drain().collect();
        }
        let both: Vec<u64> = self
            .own
            .iter()
            .filter(|id| self.down.contains(id))
            .copied()
            .collect();
        for id in &both {
            self.own.remove(id);
            self.down.remove(id);
        }
        both
    }

    /// The next hop's `Need` for the batch `send_batch` sent; what it wants is forwarded
    /// from now on.
    pub(super) fn batch_need(&mut self) -> Vec<Want> {
        let need = loop {
            let Some(chan) = self.chan.as_mut() else {
                break Vec::new();
            };
            match answer(chan, &mut self.succ, &mut self.down) {
                Ok(Control::Need(n)) => break n,
                Ok(other) => self.reform(&unexpected(other)),
                Err(e) => self.reform(&e),
            }
        };
        self.current = None;
        self.forward.want(need.iter().map(|w| w.id));
        need
    }

    /// Sends `Finish` on once every unit offered so far is written, and returns the next
    /// hop's answer; when it is done, its report and the chain's after it are kept.
    pub(super) fn finish(&mut self, failed: &[u64], unlisted: u64) -> Answer {
        loop {
            self.check();
            self.forward.wait_idle();
            let units = self.forward.sent();
            let Some(chan) = self.chan.as_mut() else {
                return Answer::Done;
            };
            let finish = Control::Finish {
                failed: failed.to_vec(),
                units,
                unlisted,
            };
            let r = chan
                .write(&finish)
                .and_then(|()| answer(chan, &mut self.succ, &mut self.down));
            match r {
                Ok(Control::Need(n)) => {
                    self.forward.want(n.iter().map(|w| w.id));
                    return Answer::Need(n);
                }
                Ok(Control::Done(summary)) => {
                    self.done(summary);
                    return Answer::Done;
                }
                Ok(other) => self.reform(&unexpected(other)),
                Err(e) => self.reform(&e),
            }
        }
    }

    /// The next hop is complete: records it and what it said of those after it, and lets
    /// it go.
    fn done(&mut self, summary: Summary) {
        self.succ.done(summary);
        if let Some(mut c) = self.chan.take() {
            let _ = c.shutdown_write();
        }
        self.forward.retarget(None);
        self.forward.stop();
    }

    /// What became of every receiver after this one (for `Replicas`).
    pub(super) fn replicas(&self) -> Vec<Replica> {
        self.succ.replicas()
    }

    /// What became of the receivers after this one, when that changed since the last
    /// call (a hop failed, or the next one said so of one after it): upstream learns it at
    /// once, so a sender that takes over from this relay does not dial a hop left behind.
    pub(super) fn news(&mut self) -> Option<Vec<Replica>> {
        self.succ.take_news()
    }

    /// Leaves the chain after this receiver to whoever goes on with it: closes the
    /// connections to the next hop without a word.
    pub(super) fn leave(&mut self) {
        if let Some(mut c) = self.chan.take() {
            c.abort();
        }
        self.forward.stop();
    }

    /// Tells the next hop that the transfer failed here, and stops forwarding.
    pub(super) fn abort(&mut self, e: &Error) {
        if let Some(chan) = self.chan.as_mut() {
            let _ = chan.write(&Control::Error {
                code: e.exit_code(),
                message: format!("the receiver before this one failed: {e}"),
            });
        }
        self.forward.stop();
    }
}

/// What a newly dialed next hop is told before anything else.
struct Told<'a> {
    start: &'a Control,
    protect: Option<&'a Filter>,
    forgotten: &'a [u64],
    /// The manifest batch in progress.
    current: Option<&'a Control>,
}

impl Told<'_> {
    /// Opens the conversation on `chan` with a hop whose chain is `rest`.
    fn open(&self, mut chan: Channel, rest: Chain) -> Result<Channel> {
        chan.write(self.start)?;
        // The last hop too gets the nonce it proves its outcome with.
        if !rest.hops.is_empty() || rest.nonce.is_some() {
            chan.write(&Control::Chain(rest))?;
        }
        if let Some(p) = self.protect {
            chan.write(&Control::Protect(p.clone()))?;
        }
        if !self.forgotten.is_empty() {
            chan.write(&Control::Forget(self.forgotten.to_vec()))?;
        }
        if let Some(b) = self.current {
            chan.write(b)?;
        }
        Ok(chan)
    }
}

/// The next message from a hop that is not `Items` (dropped: the sender lists the first
/// receiver's), `Arrived` (files it and every hop after it have whole: added to `down`),
/// `Replicas` (its account of the hops after it, at any time: kept in `succ`) or
/// `Keepalive` (it is busy on the answer); a hop silent for [`SILENCE`] is lost.
fn answer(chan: &mut Channel, succ: &mut Successors, down: &mut HashSet<u64>) -> Result<Control> {
    loop {
        let msg = match chan.read(Some(SILENCE)) {
            Err(e) if is_tick(&e) => {
                return Err(lost(std::io::Error::other(format!(
                    "it said nothing for {} s while its answer was awaited (stopped, hung \
                     or cut off)",
                    SILENCE.as_secs()
                ))))
            }
            other => other?,
        };
        match msg {
            Control::Items(_) | Control::Keepalive => {}
            Control::Arrived(ids) => down.extend(ids),
            Control::Replicas(r) => succ.heard(r),
            // Its proof, passed on with its Done in `Replicas`.
            Control::Proof(p) => succ.proved(p),
            Control::Error { code, message } => {
                return Err(Error::Remote {
                    side: "receiver",
                    message,
                    code,
                })
            }
            other => return Ok(other),
        }
    }
}

fn unexpected(m: Control) -> Error {
    ProtocolError::Unexpected(m.name().into()).into()
}

/// What to ask upstream for: everything either this receiver or the next wants. A file
/// both want in different ways (say, a delta here and all of it there) is asked for
/// whole: whole data serves every kind of want.
pub(super) fn union(local: Vec<Want>, next: Vec<Want>) -> Vec<Want> {
    let mut at: HashMap<u64, usize> = HashMap::new();
    let mut out = local;
    for (i, w) in out.iter().enumerate() {
        at.insert(w.id, i);
    }
    for w in next {
        match at.get(&w.id) {
            None => {
                at.insert(w.id, out.len());
                out.push(w);
            }
            Some(&i) if out[i].what != w.what => out[i].what = WantKind::All,
            Some(_) => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::Hop;

    fn want(id: u64, what: WantKind) -> Want {
        Want { id, what }
    }

    #[test]
    fn a_hops_arrived_and_items_are_passed_over() {
        // The last hop reports files it has whole (for a sender to forget them); a relay
        // that took that for its answer dropped a healthy hop ("unexpected message").
        let (a, b) = crate::transport::Conn::pair().unwrap();
        let (mut hop, mut relay) = (Channel::new(a), Channel::new(b));
        hop.write(&Control::Arrived(vec![1, 2, 3])).unwrap();
        hop.write(&Control::Items(Vec::new())).unwrap();
        hop.write(&Control::Need(vec![want(4, WantKind::All)]))
            .unwrap();
        let mut down = HashSet::new();
        match answer(&mut relay, &mut Successors::default(), &mut down).unwrap() {
            Control::Need(n) => assert_eq!(n, vec![want(4, WantKind::All)]),
            other => panic!("answered {}", other.name()),
        }
        assert_eq!(down, HashSet::from([1, 2, 3]));
    }

    #[test]
    fn a_file_is_reported_arrived_once_here_and_after_here() {
        let hop = Hop {
            label: "next".into(),
            ticket: "not dialed".into(),
        };
        let chain = Chain {
            hops: vec![hop],
            encrypt: true,
            nonce: None,
        };
        let mut relay = Relay {
            succ: Successors::new(chain),
            start: Control::Finish {
                failed: Vec::new(),
                units: 0,
                unlisted: 0,
            },
            chan: None,
            protect: None,
            forgotten: Vec::new(),
            current: None,
            own: HashSet::new(),
            down: HashSet::from([2, 3]),
            forward: Arc::new(Forward::new(1, true)),
        };
        let mut got = relay.arrived(vec![1, 2]);
        got.sort();
        assert_eq!(got, [2], "1 is not after here yet");
        relay.down.insert(1);
        assert_eq!(relay.arrived(vec![]), [1]);
        assert!(relay.arrived(vec![4]).is_empty());
        // No hop left after this one: what is here is everywhere it is going.
        relay
            .succ
            .fail(&crate::session::lost(std::io::Error::other("gone")));
        assert_eq!(relay.arrived(vec![5]).len(), 2);
        assert!(relay.own.is_empty() && relay.down.is_empty());
    }

    #[test]
    fn union_asks_for_what_either_wants() {
        let local = vec![
            want(1, WantKind::All),
            want(2, WantKind::Ranges(vec![(0, 5)])),
            want(3, WantKind::Ranges(vec![(0, 5)])),
        ];
        let next = vec![
            want(2, WantKind::Ranges(vec![(0, 5)])),
            want(3, WantKind::Ranges(vec![(5, 9)])),
            want(4, WantKind::Ranges(vec![(1, 2)])),
        ];
        assert_eq!(
            union(local, next),
            vec![
                want(1, WantKind::All),
                want(2, WantKind::Ranges(vec![(0, 5)])),
                want(3, WantKind::All),
                want(4, WantKind::Ranges(vec![(1, 2)])),
            ]
        );
        assert!(union(Vec::new(), Vec::new()).is_empty());
    }
}
