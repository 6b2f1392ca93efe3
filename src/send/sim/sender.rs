//! The simulator's sender: `send/mod.rs`'s manifest, `wait_idle` and `finish`,
//! `send/link.rs`'s requests and re-dials and the data streams, as a step function
//! around the real decisions of `session::watch`.

use super::receiver::Receiver;
use super::*;

/// Files queued and not yet sent before the manifest waits (the sender's bound, scaled).
const QUEUE: usize = 8;
/// A data write that moves no byte this long drops its connection (`WRITE_STALL`, ms).
const WRITE_STALL: u64 = 30_000;

/// One data stream of the sender.
#[derive(Default)]
struct Stream {
    conn: Option<usize>,
    unit: Option<u64>,
    busy_until: u64,
    failures: u32,
    /// Since when its write waits on a receiver that reads nothing.
    blocked: Option<u64>,
}

/// The sender.
pub(super) struct Sender {
    pub(super) end: Option<End>,
    /// Its connections were closed after its end.
    pub(super) closed: bool,
    /// The receiver it talks to (the chain goes on to the next).
    pub(super) rx: usize,
    pub(super) paused_until: u64,
    hops: usize,
    /// Blocked in a dial until then.
    busy_until: u64,
    patience: Patience,
    tries: Retries,
    ctl: Option<usize>,
    /// A re-dial of the control stream: its dials, the next one at.
    redial: Option<(Redial, u64)>,
    /// The request whose answer is awaited.
    awaiting: Option<Msg>,
    next_batch: u64,
    /// The walk has the next batch ready then.
    walk_at: u64,
    walk_ms: u64,
    queue: VecDeque<u64>,
    streams: Vec<Stream>,
    /// The data streams gave up on the current receiver.
    broken: bool,
    /// Units written to the current receiver, and in all (what moves).
    sent: u64,
    written: u64,
    write_ms: u64,
}

impl Sender {
    pub(super) fn new(hops: usize, streams: usize, stall: Option<u64>, write_ms: u64) -> Sender {
        let mut patience = Patience::new(0);
        patience.set_stall(stall, 0);
        Sender {
            end: None,
            closed: false,
            rx: 0,
            paused_until: 0,
            hops,
            busy_until: 0,
            patience,
            tries: Retries::new(RETRIES),
            ctl: None,
            redial: Some((Redial::new(RETRIES), 0)),
            awaiting: None,
            next_batch: 0,
            walk_at: 0,
            walk_ms: write_ms * 3,
            queue: VecDeque::new(),
            streams: (0..streams).map(|_| Stream::default()).collect(),
            broken: false,
            sent: 0,
            written: 0,
            write_ms,
        }
    }

    /// The current control connection.
    pub(super) fn ctl(&self) -> Option<usize> {
        self.ctl
    }

    pub(super) fn doing(&self) -> String {
        format!(
            "to {}, awaiting {:?}, batch {}, queued {}, redial {}, broken {}",
            self.rx,
            self.awaiting,
            self.next_batch,
            self.queue.len(),
            self.redial.is_some(),
            self.broken
        )
    }

    pub(super) fn step(
        &mut self,
        net: &mut Net,
        rcv: &mut [Receiver],
        batches: &[Vec<u64>],
    ) -> Result<(), String> {
        let now = net.now;
        if self.end.is_some() || now < self.paused_until || now < self.busy_until {
            return Ok(());
        }
        if let Some((mut rd, at)) = self.redial.take() {
            if now < at {
                self.redial = Some((rd, at));
                return Ok(());
            }
            match self.dial(net, rcv) {
                Ok(()) => {}
                Err(cost) => match rd.poll_dial() {
                    Some(wait) => self.redial = Some((rd, now + cost + wait)),
                    // `Link::reconnect`: no dial left, the receiver is gone.
                    None => self.go_on(net, rcv),
                },
            }
            return Ok(());
        }
        self.data(net, rcv);
        let Some(c) = self.ctl else {
            return Ok(());
        };
        match self.awaiting.clone() {
            Some(req) => self.read_answer(net, rcv, c, &req),
            None => self.between(net, rcv, batches),
        }
    }

    /// Dials the current receiver's control stream (Start, then the request in
    /// progress again); the time the failed dial took.
    fn dial(&mut self, net: &mut Net, rcv: &mut [Receiver]) -> Result<(), u64> {
        let now = net.now;
        let r = &mut rcv[self.rx];
        let cost = match () {
            _ if net.down() => CONNECT,
            _ if r.end.is_some() => 0,
            _ if now < r.paused_until => HANDSHAKE,
            _ if net.rng.chance(3) => 0,
            _ => {
                net.ctls.push(Ctl::default());
                let c = net.ctls.len() - 1;
                r.incoming.push(c);
                self.ctl = Some(c);
                net.send(c, true, Msg::Start);
                self.patience.handle_moved(now);
                if let Some(req) = self.awaiting.clone() {
                    self.ask(net, req);
                }
                return Ok(());
            }
        };
        self.busy_until = now + cost;
        Err(cost)
    }

    fn ask(&mut self, net: &mut Net, req: Msg) {
        let Some(c) = self.ctl else { return };
        self.patience.handle_asked(net.now);
        // A write into a broken connection shows at the next read.
        let _ = net.send(c, true, req.clone());
        self.awaiting = Some(req);
    }

    /// What the failure of the request or message in progress leads to
    /// (`Link::retry`).
    fn fail(&mut self, net: &mut Net, rcv: &mut [Receiver], failure: Failure) {
        let failure = match (failure, self.broken) {
            (Failure::Lost, true) => Failure::Gone,
            (f, _) => f,
        };
        let can = self.rx + 1 < self.hops;
        match self.tries.handle_failure(failure, can) {
            Step::Redial => {
                if let Some(c) = self.ctl.take() {
                    net.cut(c);
                }
                let mut rd = Redial::new(RETRIES);
                let wait = rd.poll_dial().unwrap_or(0);
                self.redial = Some((rd, net.now + wait));
            }
            Step::GoOn => self.go_on(net, rcv),
            Step::Fail => self.end = Some(End::Failed("the receiver was lost")),
        }
    }

    /// The current receiver failed: the next one of the chain that answers, told Start
    /// and the request in progress (`link::go_on`); the run fails when none is left.
    fn go_on(&mut self, net: &mut Net, rcv: &mut [Receiver]) {
        if let Some(c) = self.ctl.take() {
            net.cut(c);
        }
        let mut spent = 0;
        while self.rx + 1 < self.hops {
            self.rx += 1;
            (self.broken, self.sent) = (false, 0);
            for s in &mut self.streams {
                s.conn = None;
                s.failures = 0;
            }
            match self.dial(net, rcv) {
                Ok(()) => {
                    self.busy_until = net.now + spent;
                    self.tries.handle_new_receiver();
                    return;
                }
                Err(cost) => spent += cost,
            }
        }
        self.end = Some(End::Failed("no receiver left to go on with"));
    }

    /// `Link::read_answer`.
    fn read_answer(
        &mut self,
        net: &mut Net,
        rcv: &mut [Receiver],
        c: usize,
        req: &Msg,
    ) -> Result<(), String> {
        let now = net.now;
        while let Some(m) = net.recv(c, false) {
            self.patience.handle_heard(now);
            match (m, req) {
                (Msg::Keepalive | Msg::Arrived(_), _) => {}
                (Msg::Need(b, units), Msg::Entries(want)) if b == *want => {
                    self.queue.extend(units);
                    self.awaiting = None;
                    self.next_batch += 1;
                    self.walk_at = now + self.walk_ms;
                    return Ok(());
                }
                (Msg::Need(FINISH, units), Msg::Finish(_)) => {
                    self.queue.extend(units);
                    self.awaiting = None;
                    return Ok(());
                }
                (Msg::Done, Msg::Finish(_)) => {
                    self.end = Some(End::Done);
                    return Ok(());
                }
                (Msg::Error, _) if self.rx + 1 < self.hops => {
                    self.fail(net, rcv, Failure::Refused);
                    return Ok(());
                }
                (Msg::Error, _) => {
                    self.end = Some(End::Failed("the receiver said Error"));
                    return Ok(());
                }
                (m, req) => return Err(format!("the sender got {m:?} as the answer to {req:?}")),
            }
        }
        if net.ctls[c].down.read_broken(now) {
            self.fail(net, rcv, Failure::Lost);
        } else if self.broken {
            self.fail(net, rcv, Failure::Gone);
        } else if self.patience.poll_stalled(now).is_some() {
            self.end = Some(End::Failed("nothing moved for --timeout"));
        } else if self.patience.poll_silent(now) {
            self.fail(net, rcv, Failure::Lost);
        }
        Ok(())
    }

    /// Between requests: the walk, `wait_room`, `wait_idle`, heartbeats, the stall
    /// limit; then the next request.
    fn between(
        &mut self,
        net: &mut Net,
        rcv: &mut [Receiver],
        batches: &[Vec<u64>],
    ) -> Result<(), String> {
        let now = net.now;
        let writing = self
            .streams
            .iter()
            .any(|s| s.blocked.is_some() || now < s.busy_until);
        let walked = self.next_batch + u64::from(now >= self.walk_at);
        self.patience
            .handle_progress(now, [self.written, walked], writing);
        if self.patience.poll_stalled(now).is_some() {
            self.end = Some(End::Failed("nothing moved for --timeout"));
            return Ok(());
        }
        if self.patience.poll_beat(now) {
            self.patience.handle_said(now);
            self.tries = Retries::new(RETRIES);
            let c = self.ctl.unwrap_or_default();
            if !net.send(c, true, Msg::Keepalive) {
                self.fail(net, rcv, Failure::Lost);
                return Ok(());
            }
        }
        if self.broken {
            self.go_on(net, rcv);
            return Ok(());
        }
        let idle = self.queue.is_empty() && self.streams.iter().all(|s| s.unit.is_none());
        let req = match self.next_batch < batches.len() as u64 {
            true if now >= self.walk_at && self.queue.len() < QUEUE => {
                Msg::Entries(self.next_batch)
            }
            true => return Ok(()),
            false if idle => Msg::Finish(self.sent),
            false => return Ok(()),
        };
        self.tries = Retries::new(RETRIES);
        self.ask(net, req);
        Ok(())
    }

    /// The data streams (`worker` and `dial::Redial`): each writes one unit at a time
    /// to the current receiver, re-dials a broken connection with backoff and gives up
    /// on the receiver after `--retries`.
    fn data(&mut self, net: &mut Net, rcv: &[Receiver]) {
        let now = net.now;
        for i in 0..self.streams.len() {
            if self.broken || now < self.streams[i].busy_until {
                continue;
            }
            let s = &mut self.streams[i];
            if s.unit.is_none() {
                s.unit = self.queue.pop_front();
            }
            let Some(unit) = s.unit else { continue };
            let r = &rcv[self.rx];
            if s.conn.is_none() {
                let cost = match () {
                    _ if net.down() => CONNECT,
                    _ if r.end.is_some() => 0,
                    _ if now < r.paused_until => HANDSHAKE,
                    _ => {
                        net.data.push((self.rx, Wire::default()));
                        s.conn = Some(net.data.len() - 1);
                        continue;
                    }
                };
                s.failures += 1;
                self.broken = s.failures > RETRIES;
                s.busy_until = now + cost + backoff(s.failures).as_millis() as u64;
                continue;
            }
            let c = s.conn.unwrap_or_default();
            if now < r.paused_until && r.end.is_none() {
                // Its socket buffer is full: the write waits, bounded.
                let since = *s.blocked.get_or_insert(now);
                if now - since < WRITE_STALL {
                    continue;
                }
                net.data[c].1.cut_at(now, &mut net.rng);
            }
            s.blocked = None;
            let (at, latency) = (now, net.latency);
            if net.data[c].1.write(at, latency, unit) {
                s.unit = None;
                s.failures = 0;
                s.busy_until = now + self.write_ms;
                self.sent += 1;
                self.written += 1;
            } else {
                s.conn = None;
                s.failures += 1;
                self.broken = s.failures > RETRIES;
                s.busy_until = now + backoff(s.failures - 1).as_millis() as u64;
            }
        }
    }
}
