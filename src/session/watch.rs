//! The decisions of file mode's control conversation, without I/O or clocks (STYLE.md 1,
//! 14): when the sender says `Keepalive`, when a silent receiver is lost, when nothing has
//! moved for `--timeout`, whether a failed request re-dials, goes on with the next
//! receiver of a chain or fails; on the receiver's side, when a silent sender is gone,
//! how long a dropped control connection is waited for, when the data after `Finish` has
//! settled, and which answer a repeated batch gets.
//!
//! The real drivers (`send::link`, `receive`) and the deterministic simulator of this
//! conversation (`send::sim`) both call these, so what the simulator checks is the code
//! that runs. Callers pass the time in milliseconds on a clock of their own; nothing here
//! sleeps, reads or writes. Not here: the messages' order (`protocol`), dialing and
//! reading (the drivers), a chain's bookkeeping ([`super::Successors`]).

/// Longest silence of the receiver while its answer is awaited (ms): one busy on it says
/// `Keepalive` every second (`receive::heartbeat`), so one silent this long is stopped,
/// hung or cut off.
pub const SILENCE: u64 = 30_000;
/// How often the sender says `Keepalive` while it works between requests (ms).
pub const HEARTBEAT: u64 = 1_000;
/// With no `--timeout`, how long the sender still says `Keepalive` while nothing moves
/// (ms): then it falls silent and the receiver's own silence rule decides.
pub const UNMOVED_BEATS: u64 = 300_000;
/// After `Finish`, nothing arriving for this long (no unit being written) means what is
/// still missing was lost with a dropped connection (ms).
pub const SETTLE: u64 = 3_000;
/// Most rounds of "Finish → here is what is still missing" before the receiver gives up.
pub const MAX_ROUNDS: u32 = 50;

/// The sender's clocks: when it last said something, when it last heard the receiver
/// while an answer is awaited, and when something last moved (for `--timeout`).
#[derive(Debug, Clone)]
pub struct Patience {
    /// `--timeout` (ms): the run ends when nothing moved this long (None: never).
    stall: Option<u64>,
    /// When something last moved, and the movement counters then.
    moved: (u64, [u64; 2]),
    /// When the control stream was last written to.
    said: u64,
    /// When the receiver was last heard while its answer is awaited.
    heard: u64,
}

impl Patience {
    /// Clocks that start at `now`, with no stall limit.
    pub fn new(now: u64) -> Patience {
        Patience {
            stall: None,
            moved: (now, [0; 2]),
            said: now,
            heard: now,
        }
    }

    /// Sets `--timeout` (ms; None: none); the limit counts from `now`.
    pub fn set_stall(&mut self, stall: Option<u64>, now: u64) {
        self.stall = stall;
        self.moved.0 = now;
    }

    /// The sender wrote to the control stream (a request, a message, a heartbeat).
    pub fn handle_said(&mut self, now: u64) {
        self.said = now;
    }

    /// A request was written: its answer is awaited from now.
    pub fn handle_asked(&mut self, now: u64) {
        self.said = now;
        self.heard = now;
    }

    /// The receiver said something (any message): heard, and something moved.
    pub fn handle_heard(&mut self, now: u64) {
        self.heard = now;
        self.moved.0 = now;
    }

    /// Something moved that the counters do not show (a reconnect, the chain going on).
    pub fn handle_moved(&mut self, now: u64) {
        self.moved.0 = now;
    }

    /// The counters of what moves (`[wire bytes written, steps walked]`) and whether a
    /// unit is being written now (its write is bounded): either counts as movement.
    pub fn handle_progress(&mut self, now: u64, movement: [u64; 2], writing: bool) {
        if movement != self.moved.1 || writing {
            self.moved = (now, movement);
        }
    }

    /// `--timeout` in seconds, once nothing has moved for it.
    pub fn poll_stalled(&self, now: u64) -> Option<u64> {
        let limit = self.stall?;
        (now.saturating_sub(self.moved.0) >= limit).then_some(limit / 1000)
    }

    /// Whether to say `Keepalive` now (between requests, never while an answer is
    /// awaited): nothing said for [`HEARTBEAT`], and something moved within `--timeout`
    /// ([`UNMOVED_BEATS`] without one), so that a sender stuck on its sources falls silent.
    pub fn poll_beat(&self, now: u64) -> bool {
        now.saturating_sub(self.said) >= HEARTBEAT
            && now.saturating_sub(self.moved.0) < self.stall.unwrap_or(UNMOVED_BEATS)
    }

    /// Whether the receiver has been silent for [`SILENCE`] while its answer is awaited:
    /// lost (re-dial and repeat the request).
    pub fn poll_silent(&self, now: u64) -> bool {
        now.saturating_sub(self.heard) >= SILENCE
    }
}

/// How a request failed, as far as what comes next is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// The control connection broke or the receiver fell silent: re-dial it.
    Lost,
    /// The receiver is gone whatever its control stream says: its data streams could not
    /// be re-established, or something else answers at its address now.
    Gone,
    /// The receiver answered `Error`.
    Refused,
}

/// What a failed request leads to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Re-dial the same receiver (then repeat the request).
    Redial,
    /// Report the receiver failed and go on with the next one of the chain (then repeat).
    GoOn,
    /// Fail the run with the error.
    Fail,
}

/// The sender's re-dials of one request on one receiver (`--retries`).
#[derive(Debug, Clone)]
pub struct Retries {
    retries: u32,
    attempts: u32,
}

impl Retries {
    /// A request not yet retried.
    pub fn new(retries: u32) -> Retries {
        Retries {
            retries,
            attempts: 0,
        }
    }

    /// What to do after `failure`, when `can_go_on` (a receiver comes after this one).
    pub fn handle_failure(&mut self, failure: Failure, can_go_on: bool) -> Step {
        let step = match failure {
            Failure::Lost if self.attempts < self.retries => {
                self.attempts += 1;
                return Step::Redial;
            }
            _ => Step::GoOn,
        };
        match can_go_on {
            true => step,
            false => Step::Fail,
        }
    }

    /// The request goes to another receiver now: its re-dials start again.
    pub fn handle_new_receiver(&mut self) {
        self.attempts = 0;
    }
}

/// The dials of one re-dial of the control stream: `--retries` of them, the first at once,
/// then with [`super::backoff`]; when all fail the receiver is gone.
#[derive(Debug, Clone)]
pub struct Redial {
    retries: u32,
    dialed: u32,
}

impl Redial {
    /// A re-dial with `retries` dials.
    pub fn new(retries: u32) -> Redial {
        Redial { retries, dialed: 0 }
    }

    /// How long to wait (ms) before the next dial, or None when none is left (the
    /// receiver is gone: [`Failure::Gone`]).
    pub fn poll_dial(&mut self) -> Option<u64> {
        if self.dialed >= self.retries {
            return None;
        }
        let wait = super::backoff(self.dialed).as_millis() as u64;
        self.dialed += 1;
        Some(wait)
    }
}

/// The receiver's watch on its sender: silence on the control stream with no data, and
/// a dropped control connection not replaced.
#[derive(Debug, Clone)]
pub struct SenderWatch {
    /// `--timeout` (ms).
    timeout: u64,
    /// When the sender was last heard on the control stream (or last answered).
    heard: u64,
    /// Since when the control connection is dropped and not replaced.
    dropped: Option<u64>,
}

impl SenderWatch {
    /// A watch with `timeout` (ms) that starts at `now`.
    pub fn new(timeout: u64, now: u64) -> SenderWatch {
        SenderWatch {
            timeout,
            heard: now,
            dropped: None,
        }
    }

    /// The sender said something, or was answered (its turn starts now).
    pub fn handle_heard(&mut self, now: u64) {
        self.heard = now;
    }

    /// Whether the sender is gone: silent on its control stream for `--timeout`, no data
    /// for as long (`idle`: ms since a data connection started or ended or a unit
    /// arrived), and no unit being written here (`busy`, this end's own work). Its data
    /// connections standing open prove nothing (a stopped sender keeps them).
    pub fn poll_gone(&self, now: u64, idle: u64, busy: bool) -> bool {
        now.saturating_sub(self.heard) > self.timeout && idle > self.timeout && !busy
    }

    /// The control connection dropped at `now` (if not already): a new one is waited for.
    pub fn handle_dropped(&mut self, now: u64) {
        self.dropped.get_or_insert(now);
    }

    /// A new control connection replaced the dropped one.
    pub fn handle_reconnected(&mut self, now: u64) {
        self.dropped = None;
        self.heard = now;
    }

    /// Whether the dropped control connection has been waited for `--timeout`: the
    /// sender vanished.
    pub fn poll_vanished(&self, now: u64) -> bool {
        self.dropped
            .is_some_and(|d| now.saturating_sub(d) > self.timeout)
    }
}

/// After `Finish`: whether the data has settled, so that what is still missing can be
/// asked for. `incomplete`: files still waiting for data; `received`: units received
/// since the sender's control connection; `units`: what its `Finish` says it wrote;
/// `idle`: ms since anything arrived; `busy`: a unit being written here; `waited`: ms
/// since `Finish` came; `timeout`: `--timeout` (ms).
pub fn settled(
    incomplete: usize,
    received: u64,
    units: u64,
    idle: u64,
    busy: bool,
    waited: u64,
    timeout: u64,
) -> bool {
    incomplete == 0 || received >= units || (!busy && idle >= SETTLE) || waited > timeout
}

/// The receiver's answers to the last batch of the manifest, by its first id: a sender
/// that lost its control connection repeats its request, and a repeat is answered from
/// here, not applied twice.
#[derive(Debug, Clone)]
pub struct Answers<T> {
    last: Option<(u64, Vec<T>)>,
}

impl<T> Default for Answers<T> {
    fn default() -> Self {
        Answers { last: None }
    }
}

impl<T: Clone> Answers<T> {
    /// The answers to repeat when a batch starting at `first` is the last one again.
    pub fn repeat(&self, first: Option<u64>) -> Option<Vec<T>> {
        match (first, &self.last) {
            (Some(f), Some((cf, replies))) if f == *cf => Some(replies.clone()),
            _ => None,
        }
    }

    /// Keeps `replies`, the answers to the batch starting at `first` (an empty batch is
    /// applied again harmlessly and is not kept).
    pub fn keep(&mut self, first: Option<u64>, replies: &[T]) {
        if let Some(f) = first {
            self.last = Some((f, replies.to_vec()));
        }
    }

    /// Forgets the last batch's answers (`Finish` came: the manifest is over).
    pub fn clear(&mut self) {
        self.last = None;
    }
}

/// Writes the messages of one answer with `write` (true: written; false: the write
/// failed and a new control connection replaced the old one), stopping after a failed
/// one: the sender repeats its request on its new connection and gets the whole answer
/// again (from [`Answers`], or anew after `Finish`). Had the rest gone on the new
/// connection too, the sender would read two answers to one request and take the second
/// for the answer to its next one.
pub fn answer<T, E>(replies: &[T], mut write: impl FnMut(&T) -> Result<bool, E>) -> Result<(), E> {
    for reply in replies {
        if !write(reply)? {
            break;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lost_request_redials_its_retries_then_goes_on_or_fails() {
        let mut r = Retries::new(2);
        assert_eq!(r.handle_failure(Failure::Lost, true), Step::Redial);
        assert_eq!(r.handle_failure(Failure::Lost, true), Step::Redial);
        assert_eq!(r.handle_failure(Failure::Lost, true), Step::GoOn);
        r.handle_new_receiver();
        assert_eq!(r.handle_failure(Failure::Lost, false), Step::Redial);
        assert_eq!(r.handle_failure(Failure::Refused, false), Step::Fail);
        assert_eq!(r.handle_failure(Failure::Gone, true), Step::GoOn);
        let mut d = Redial::new(3);
        assert_eq!(
            [d.poll_dial(), d.poll_dial(), d.poll_dial(), d.poll_dial()],
            [Some(0), Some(250), Some(500), None]
        );
    }

    #[test]
    fn an_answer_whose_write_failed_is_not_finished_on_the_new_connection() {
        let mut written = Vec::new();
        let r = answer(&["items", "arrived", "need"], |m| {
            written.push(*m);
            Ok::<_, ()>(*m != "items")
        });
        assert_eq!((r, written), (Ok(()), vec!["items"]));
    }

    #[test]
    fn the_sender_beats_only_while_something_moves() {
        let mut p = Patience::new(0);
        p.set_stall(Some(10_000), 0);
        assert!(!p.poll_beat(500));
        assert!(p.poll_beat(1_000));
        p.handle_said(1_000);
        p.handle_progress(1_500, [1, 0], false);
        assert!(p.poll_beat(2_000));
        assert!(!p.poll_beat(11_500), "nothing moved for --timeout");
        assert_eq!(p.poll_stalled(11_500), Some(10));
        p.handle_asked(12_000);
        assert!(!p.poll_silent(12_000 + SILENCE - 1));
        assert!(p.poll_silent(12_000 + SILENCE));
    }

    #[test]
    fn a_receiver_waits_for_a_silent_sender_and_a_dropped_connection_for_its_timeout() {
        let mut w = SenderWatch::new(10_000, 0);
        assert!(!w.poll_gone(10_001, 5_000, false), "data came");
        assert!(!w.poll_gone(10_001, 10_001, true), "a unit being written");
        assert!(w.poll_gone(10_001, 10_001, false));
        w.handle_dropped(20_000);
        w.handle_dropped(25_000);
        assert!(!w.poll_vanished(30_000));
        assert!(w.poll_vanished(30_001));
        w.handle_reconnected(30_001);
        assert!(!w.poll_vanished(50_000));
        let mut a = Answers::default();
        a.keep(Some(7), &[1, 2]);
        assert_eq!(a.repeat(Some(7)), Some(vec![1, 2]));
        assert_eq!(a.repeat(Some(8)), None);
        assert_eq!(a.repeat(None), None);
    }
}
