//! The simulator's receiver: `receive.rs`'s `Session` (and `first_start`, `settle`,
//! `say_done`) as a step function around the real decisions of `session::watch`.

use super::*;

/// One receiver (`receive.rs`'s `Session`).
pub(super) struct Receiver {
    pub(super) id: usize,
    pub(super) end: Option<End>,
    /// Its connections were closed after its end.
    pub(super) closed: bool,
    /// Every control connection it took.
    taken: Vec<usize>,
    /// Its control connection failed: a new one is awaited.
    dropped: bool,
    pub(super) paused_until: u64,
    /// Batches applied, in order.
    pub(super) applied: u64,
    /// Control connections dialed to it, not yet taken.
    pub(super) incoming: Vec<usize>,
    watch: SenderWatch,
    timeout: u64,
    answers: Answers<Msg>,
    ctl: Option<usize>,
    /// Work on an answer: done then, and the replies it gives.
    work: Option<(u64, Vec<Msg>)>,
    /// Replies not yet written (the rest of one answer).
    replies: VecDeque<Msg>,
    /// `Finish` being settled: since when, the units the sender says it wrote.
    settling: Option<(u64, u64)>,
    /// Saying `Done` until then.
    saying: Option<u64>,
    rounds: u32,
    wanted: BTreeSet<u64>,
    got: BTreeSet<u64>,
    told_arrived: usize,
    received: u64,
    base: u64,
    last_data: u64,
    beat_at: u64,
    work_ms: u64,
}

impl Receiver {
    pub(super) fn new(id: usize, timeout: u64, work_ms: u64) -> Receiver {
        Receiver {
            id,
            end: None,
            closed: false,
            taken: Vec::new(),
            dropped: false,
            paused_until: 0,
            applied: 0,
            incoming: Vec::new(),
            watch: SenderWatch::new(timeout, 0),
            timeout,
            answers: Answers::default(),
            ctl: None,
            work: None,
            replies: VecDeque::new(),
            settling: None,
            saying: None,
            rounds: 0,
            wanted: BTreeSet::new(),
            got: BTreeSet::new(),
            told_arrived: 0,
            received: 0,
            base: 0,
            last_data: 0,
            beat_at: 0,
            work_ms,
        }
    }

    pub(super) fn ended(&self, _net: &Net) -> bool {
        self.end.is_some()
    }

    /// Every control connection dialed to it.
    pub(super) fn ctls(&self) -> impl Iterator<Item = &usize> {
        self.taken.iter().chain(&self.incoming)
    }

    pub(super) fn doing(&self) -> String {
        format!(
            "{}: {:?}, applied {}, work {:?}, settling {:?}, replies {:?}",
            self.id, self.end, self.applied, self.work, self.settling, self.replies
        )
    }

    /// Applies batch `b` (in order): its units are wanted.
    pub(super) fn apply(&mut self, b: u64, batches: &[Vec<u64>]) {
        self.applied = b + 1;
        if let Some(units) = batches.get(b as usize) {
            self.wanted
                .extend(units.iter().filter(|u| !self.got.contains(u)));
        }
    }

    /// Batch `b` as its relay passes it on: applied and answered (to the relay), so that
    /// a sender that goes on with this receiver and repeats it gets that answer.
    pub(super) fn forwarded(&mut self, b: u64, batches: &[Vec<u64>]) {
        self.apply(b, batches);
        let need = batches.get(b as usize).cloned().unwrap_or_default();
        self.answers.keep(Some(b), &[Msg::Need(b, need)]);
    }

    pub(super) fn missing(&self, batches: &[Vec<u64>]) -> Vec<u64> {
        let all = batches.iter().take(self.applied as usize).flatten();
        all.filter(|u| !self.got.contains(u)).copied().collect()
    }

    pub(super) fn step(&mut self, net: &mut Net, batches: &[Vec<u64>]) -> Result<(), String> {
        let now = net.now;
        if self.end.is_some() || now < self.paused_until {
            return Ok(());
        }
        self.data(net);
        let Some(c) = self.ctl.filter(|_| !self.dropped) else {
            return self.await_control(net);
        };
        if let Some(until) = self.saying.filter(|_| !net.ctls[c].up.read_broken(now)) {
            return self.say_done(net, c, until);
        }
        // The work on an answer runs to its end whatever became of the connection
        // (`heartbeat::busy`); only its replies find out.
        if (self.work.is_some() || self.settling.is_some()) && now >= self.beat_at {
            self.beat_at = now + BEAT;
            let _ = net.send(c, false, Msg::Keepalive);
        }
        if let Some((until, replies)) = self.work.take() {
            if now < until {
                self.work = Some((until, replies));
                return Ok(());
            }
            self.replies.extend(replies);
        }
        if let Some((since, units)) = self.settling {
            let received = self.received.saturating_sub(self.base);
            let idle = now - self.last_data;
            let waited = now - since;
            let incomplete = self.missing(batches).len();
            if !watch::settled(
                incomplete,
                received,
                units,
                idle,
                false,
                waited,
                self.timeout,
            ) {
                return Ok(());
            }
            self.settling = None;
            let missing = self.missing(batches);
            if missing.is_empty() {
                self.saying = Some(now + SAY_DONE);
                let _ = net.send(c, false, Msg::Done);
                return Ok(());
            }
            self.rounds += 1;
            if self.rounds > MAX_ROUNDS {
                let _ = net.send(c, false, Msg::Error);
                self.end = Some(End::Failed("data kept getting lost"));
                return Ok(());
            }
            self.answers.clear();
            let arrived = self.arrived();
            self.replies.extend(arrived);
            self.replies.push_back(Msg::Need(FINISH, missing));
        }
        // `Session::answer`: a failed write waits for a new control connection, and
        // the rest of that answer is not written (the sender asks again).
        // (What `answer` wrote after a failure would go on the new connection: kept
        // for it.)
        let replies: Vec<Msg> = self.replies.drain(..).collect();
        let (mut failed, mut rest) = (false, VecDeque::new());
        let _ = watch::answer(&replies, |m| {
            if failed {
                rest.push_back(m.clone());
                return Ok::<_, ()>(true);
            }
            failed = !net.send(c, false, m.clone());
            Ok(!failed)
        });
        self.replies = rest;
        if failed {
            self.dropped = true;
            return self.await_control(net);
        }
        if !replies.is_empty() {
            self.watch.handle_heard(now);
        }
        if net.ctls[c].up.read_broken(now) {
            self.dropped = true;
            return self.await_control(net);
        }
        let Some(m) = net.recv(c, true) else {
            if self.watch.poll_gone(now, now - self.last_data, false) {
                self.end = Some(End::Failed("the sender said nothing and sent no data"));
            }
            return Ok(());
        };
        self.watch.handle_heard(now);
        match m {
            Msg::Start | Msg::Keepalive => {}
            Msg::Entries(b) => {
                if let Some(replies) = self.answers.repeat(Some(b)) {
                    self.replies.extend(replies);
                    return Ok(());
                }
                if b != self.applied {
                    return Err(format!(
                        "receiver {} got batch {b} after {}",
                        self.id, self.applied
                    ));
                }
                self.apply(b, batches);
                let mut replies = self.arrived();
                let need = batches.get(b as usize).cloned().unwrap_or_default();
                replies.push(Msg::Need(b, need));
                self.answers.keep(Some(b), &replies);
                let busy = net.rng.range(0, 4) * self.work_ms * 20;
                self.work = Some((now + busy, replies));
                self.beat_at = now + BEAT;
            }
            Msg::Finish(units) => {
                self.settling = Some((now, units));
                self.beat_at = now + BEAT;
            }
            Msg::Error => self.end = Some(End::Failed("the sender said Error")),
            m => return Err(format!("receiver {} got {m:?}", self.id)),
        }
        Ok(())
    }

    /// `Arrived` before an answer when files arrived since the last one.
    fn arrived(&mut self) -> Vec<Msg> {
        let n = self.got.len();
        if n == self.told_arrived {
            return Vec::new();
        }
        self.told_arrived = n;
        vec![Msg::Arrived(n)]
    }

    fn data(&mut self, net: &mut Net) {
        if net.down() {
            return;
        }
        let now = net.now;
        for (r, w) in &mut net.data {
            if *r != self.id {
                continue;
            }
            while let Some(u) = w.arrived(now) {
                self.received += 1;
                self.last_data = now;
                self.got.insert(u);
            }
        }
    }

    /// The first control connection, or a new one after a drop (`first_start`,
    /// `Session::await_control`): the first whose Start arrived.
    fn await_control(&mut self, net: &mut Net) -> Result<(), String> {
        let now = net.now;
        self.watch.handle_dropped(now);
        let taken = (0..self.incoming.len()).find(|&i| {
            let c = self.incoming[i];
            matches!(net.ctls[c].up.frames.front(), Some((at, Msg::Start)) if *at <= now)
                && !net.down()
        });
        if let Some(i) = taken {
            let c = self.incoming.remove(i);
            self.taken.push(c);
            self.taken.append(&mut self.incoming);
            let _ = net.recv(c, true);
            if self.ctl.is_some() {
                self.base = self.received;
            }
            self.ctl = Some(c);
            self.dropped = false;
            self.watch.handle_reconnected(now);
            return Ok(());
        }
        if self.saying.is_some() {
            self.end = Some(End::Done);
        } else if self.watch.poll_vanished(now) {
            self.end = Some(End::Failed(match self.ctl {
                None => "no sender connected",
                Some(_) => "the sender vanished",
            }));
        }
        Ok(())
    }

    /// `Session::say_done`: answers a repeated `Finish` with `Done` again, until `until`.
    fn say_done(&mut self, net: &mut Net, c: usize, until: u64) -> Result<(), String> {
        while let Some(m) = net.recv(c, true) {
            if let Msg::Finish(_) = m {
                let _ = net.send(c, false, Msg::Done);
            }
        }
        if net.now >= until {
            self.end = Some(End::Done);
        }
        Ok(())
    }
}
