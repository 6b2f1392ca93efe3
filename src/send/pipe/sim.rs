//! A deterministic simulator of pipe mode's stream conversation (STYLE.md 14): a seeded
//! scheduler drives a sender and a receiver in memory, on a simulated clock, through a
//! live producer, N data connections and a control connection that it cuts (together and
//! apart, during a reconnect), delays and takes down for a while, and checks on every run
//!
//! - *safety*: the consumer receives exactly the stream, in order, each byte once, and
//!   neither side ever sees the other break the protocol;
//! - *liveness*: the run ends (the sender has `Done`, or a side failed cleanly) within a
//!   bounded number of simulated seconds.
//!
//! The decisions are the real code's: the sender's replay buffer, acknowledgements and
//! resend choice ([`Flow`]), each stream's in-flight blocks ([`InFlight`]) and re-dial
//! backoff (`dial::backoff`), the receiver's reorder window ([`Reorder`]) and when it asks
//! again ([`Asks`]). What is modelled here is only what the threads around them do (the
//! loops of `stream.rs`, `pipe.rs`'s driver, `receive::pipe`'s session) and the network.
//!
//! A run has 1-6 data streams and 1-5 faults (cuts of every kind, outages, late resets,
//! failed dials), and must end within 600 simulated seconds. CI runs 10,000 seeds and
//! every seed that ever failed: `cargo test --lib send::pipe::sim`; a soak of many more:
//! `HAUL_SIM_SEEDS=1000000 cargo test --release --lib send::pipe::sim::tests::soak -- --ignored`.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::flow::{Block, Flow, InFlight, Pool};
use crate::codec::tree::block_cv;
use crate::send::dial::backoff;
use crate::session::stream::{Asks, Reorder};

pub(in crate::send) mod net;
use net::{Rng, Wire};

/// Block size in the simulation (bytes; the logic does not depend on it).
const BLOCK: u64 = 1024;
/// The sender's and the receiver's window, in blocks.
const WINDOW: u64 = 16;
/// Simulated time step (ms).
const STEP: u64 = 5;
/// A run that has not ended by then hangs (ms): far beyond any recovery's bounds.
const BOUND: u64 = 600_000;
/// Re-dials before a stream or the control link gives up (the default `--retries`).
const RETRIES: u32 = 5;
/// The receiver's acknowledgement keepalive, the sender's silence rule (ms).
const KEEPALIVE: u64 = 1_000;
const SILENCE: u64 = 30_000;

/// What goes over the control connection (the real messages' fields that matter here).
#[derive(Clone, Debug)]
enum Msg {
    Start,
    End(u64),
    Keepalive,
    Ack { written: u64, have: u64 },
    Lost { have: u64, got: Vec<u64> },
    Done(u64),
}

/// Both directions of the control connection.
#[derive(Default)]
struct Control {
    up: Wire<Msg>,
    down: Wire<Msg>,
}

/// One data stream of the sender (the loop of `stream.rs`).
#[derive(Default)]
struct Stream {
    conn: Option<usize>,
    inflight: InFlight,
    /// The block being sent, re-dials so far, and whether a connection broke under it.
    pending: Option<Arc<Block>>,
    failures: u32,
    broke: bool,
    busy_until: u64,
}

/// How one run ended.
#[derive(Debug, PartialEq)]
enum End {
    Done,
    /// A side gave up with a clean error (re-dials exhausted, a vanished peer).
    Failed(&'static str),
}

struct Sim {
    rng: Rng,
    now: u64,
    latency: u64,
    /// Time to write one block on one stream.
    write_ms: u64,
    /// Scheduled faults: (at, kind).
    faults: Vec<(u64, u8)>,
    /// Dials fail until then.
    down_until: u64,
    // The sender.
    flow: Flow,
    pool: Arc<Pool>,
    len: u64,
    read_at: u64,
    work: VecDeque<Arc<Block>>,
    again: VecDeque<Arc<Block>>,
    streams: Vec<Stream>,
    end_sent: bool,
    heard: u64,
    told: u64,
    /// Control: the current connection and whether the sender is re-dialing it.
    ctl: usize,
    ctl_redial: Option<(u64, u32)>,
    controls: Vec<Control>,
    // Data connections, by id: frames are block offsets; the receiver's reader state.
    data: Vec<Wire<u64>>,
    reading: Vec<bool>,
    // The receiver.
    win: Reorder<u64>,
    asks: Asks,
    recv_ctl: usize,
    recv_awaiting: Option<u64>,
    acked: Option<(u64, u64)>,
    acked_at: u64,
    out: Vec<u64>,
}

impl Sim {
    fn new(seed: u64) -> Sim {
        let mut rng = Rng(seed);
        let streams = rng.range(1, 6) as usize;
        let blocks = rng.range(4, 160);
        let len = (blocks - 1) * BLOCK + rng.range(1, BLOCK);
        let write_ms = rng.range(5, 60);
        let latency = rng.range(0, 80);
        let span = blocks * write_ms / streams as u64 + 2_000;
        let faults = (0..rng.range(1, 5))
            .map(|_| (rng.range(0, span / STEP) * STEP, rng.range(0, 5) as u8))
            .collect();
        Sim {
            now: 0,
            latency,
            write_ms,
            faults,
            down_until: 0,
            flow: Flow::new(),
            pool: Arc::new(Pool::new(WINDOW * BLOCK, BLOCK)),
            len,
            read_at: 0,
            work: VecDeque::new(),
            again: VecDeque::new(),
            streams: (0..streams).map(|_| Stream::default()).collect(),
            end_sent: false,
            heard: 0,
            told: 0,
            ctl: 0,
            ctl_redial: None,
            controls: vec![Control::default()],
            data: Vec::new(),
            reading: Vec::new(),
            win: Reorder::default(),
            asks: Asks::new(0),
            recv_ctl: 0,
            recv_awaiting: None,
            acked: None,
            acked_at: 0,
            out: Vec::new(),
            rng,
        }
    }

    /// Runs to the end; `Err` names a broken property.
    fn run(&mut self) -> Result<End, String> {
        while self.now < BOUND {
            self.faults();
            if let Some(end) = self.sender()? {
                return self.check(end);
            }
            if let Some(end) = self.receiver()? {
                return self.check(end);
            }
            self.now += STEP;
        }
        Err(format!(
            "hung: at {} s the consumer has {} of {} bytes (have {}, replay from {})",
            BOUND / 1000,
            self.win.written,
            self.len,
            self.win.have,
            self.flow.kept_from()
        ))
    }

    fn check(&self, end: End) -> Result<End, String> {
        let mut at = 0;
        for &o in &self.out {
            if o != at {
                return Err(format!("the consumer got block {o} where {at} was due"));
            }
            at += BLOCK.min(self.len - o);
        }
        if end == End::Done && at != self.len {
            return Err(format!("Done with {at} of {} bytes written", self.len));
        }
        Ok(end)
    }

    fn faults(&mut self) {
        let now = self.now;
        let due: Vec<u8> = self
            .faults
            .iter()
            .filter(|f| f.0 == now)
            .map(|f| f.1)
            .collect();
        for kind in due {
            let cut_control = matches!(kind, 0 | 2 | 4);
            let cut_data = matches!(kind, 0 | 1 | 4);
            if kind == 3 {
                // One data connection.
                let live: Vec<usize> = (0..self.data.len())
                    .filter(|&i| self.data[i].cut.is_none())
                    .collect();
                if !live.is_empty() {
                    let i = live[self.rng.range(0, live.len() as u64 - 1) as usize];
                    self.data[i].cut_at(now, &mut self.rng);
                }
            }
            if cut_data {
                for w in &mut self.data {
                    w.cut_at(now, &mut self.rng);
                }
            }
            if cut_control {
                let c = &mut self.controls[self.ctl];
                c.up.cut_at(now, &mut self.rng);
                c.down.cut_at(now, &mut self.rng);
            }
            if kind == 4 {
                // An outage: nothing connects for a while.
                self.down_until = now + self.rng.range(500, 8_000);
            }
        }
    }

    fn dial_ok(&mut self) -> bool {
        self.now >= self.down_until && !self.rng.chance(5)
    }

    /// One step of the sender's threads; `Some` once it ended.
    fn sender(&mut self) -> Result<Option<End>, String> {
        self.read();
        for i in 0..self.streams.len() {
            if let Err(why) = self.stream(i) {
                return Ok(Some(End::Failed(why)));
            }
        }
        self.driver()
    }

    /// The reading thread: a live producer, bounded by the window.
    fn read(&mut self) {
        let (read, written, window) = {
            let g = self.flow.lock();
            (g.read, g.written, g.window)
        };
        if read >= self.len
            || self.now < self.read_at
            || window == 0
            || read + BLOCK > written + window
        {
            return;
        }
        let n = BLOCK.min(self.len - read);
        let mut data = self.pool.take(n as usize);
        data.iter_mut()
            .enumerate()
            .for_each(|(i, b)| *b = (read as usize + i) as u8);
        let b = Arc::new(Block {
            offset: read,
            cv: block_cv(read, &data),
            data,
            pool: Arc::clone(&self.pool),
            again: AtomicBool::new(false),
        });
        {
            let mut g = self.flow.lock();
            g.replay.push_back(Arc::clone(&b));
            g.read += n;
        }
        self.work.push_back(b);
        // A live producer: mostly steady, sometimes a pause.
        self.read_at = self.now
            + if self.rng.chance(5) {
                self.rng.range(100, 3_000)
            } else {
                self.rng.range(0, 10)
            };
    }

    /// One data stream (`Stream::run` and `Stream::send`).
    fn stream(&mut self, i: usize) -> Result<(), &'static str> {
        let now = self.now;
        if now < self.streams[i].busy_until {
            return Ok(());
        }
        if self.streams[i].pending.is_none() {
            let next = self.again.pop_front().or_else(|| self.work.pop_front());
            let Some(b) = next else { return Ok(()) };
            b.again.store(false, Ordering::Release);
            if b.end() <= self.flow.have.load(Ordering::Acquire) {
                return Ok(());
            }
            self.streams[i].pending = Some(b);
        }
        if self.streams[i].conn.is_none() {
            if !self.dial_ok() {
                let s = &mut self.streams[i];
                s.failures += 1;
                if s.failures > RETRIES {
                    return Err("a data stream could not be re-established");
                }
                s.busy_until = now + backoff(s.failures).as_millis() as u64;
                return Ok(());
            }
            self.data.push(Wire::default());
            self.reading.push(true);
            self.streams[i].conn = Some(self.data.len() - 1);
        }
        let have = self.flow.have.load(Ordering::Acquire);
        let c = self.streams[i].conn.unwrap_or_default();
        let mut blocks = Vec::new();
        if self.streams[i].broke {
            blocks = self.streams[i].inflight.replay(have);
        }
        let b = self.streams[i].pending.clone();
        blocks.extend(b.clone());
        let latency = self.latency;
        let ok = blocks
            .iter()
            .all(|b| self.data[c].write(now, latency, b.offset));
        let s = &mut self.streams[i];
        if ok {
            if let Some(b) = s.pending.take() {
                s.inflight.wrote(b, have);
            }
            (s.failures, s.broke) = (0, false);
            s.busy_until = now + self.write_ms * blocks.len() as u64;
        } else {
            s.conn = None;
            s.failures += 1;
            if s.failures > RETRIES {
                return Err("a data stream gave up re-dialing");
            }
            s.broke = true;
            s.busy_until = now + backoff(s.failures - 1).as_millis() as u64;
        }
        Ok(())
    }

    /// The control side of the sender (`Driver::run`, `Link::reconnect`).
    fn driver(&mut self) -> Result<Option<End>, String> {
        let now = self.now;
        if let Some((at, tries)) = self.ctl_redial {
            if now < at {
                return Ok(None);
            }
            if !self.dial_ok() {
                if tries + 1 >= RETRIES {
                    return Ok(Some(End::Failed(
                        "the control stream could not be re-established",
                    )));
                }
                self.ctl_redial = Some((now + backoff(tries + 1).as_millis() as u64, tries + 1));
                return Ok(None);
            }
            self.controls.push(Control::default());
            self.ctl = self.controls.len() - 1;
            self.ctl_redial = None;
            self.heard = now;
            self.tell(Msg::Start);
            if self.end_sent {
                self.tell(Msg::End(self.len));
            }
        }
        let read = self.flow.lock().read;
        if !self.end_sent && read == self.len {
            self.end_sent = true;
            self.tell(Msg::End(self.len));
        }
        if now.saturating_sub(self.told) >= 500 {
            self.tell(Msg::Keepalive);
        }
        if now.saturating_sub(self.heard) >= SILENCE {
            self.redial_control();
            return Ok(None);
        }
        if self.controls[self.ctl].down.read_broken(now) {
            self.redial_control();
            return Ok(None);
        }
        while let Some(m) = self.controls[self.ctl].down.arrived(now) {
            self.heard = now;
            match m {
                Msg::Ack { written, have } => {
                    let w = WINDOW * BLOCK;
                    self.flow.ack(written, have, w, w);
                }
                Msg::Lost { have, got } => {
                    let lost = self.flow.lost_since(have, &got);
                    self.again.extend(lost);
                }
                Msg::Done(len) if self.end_sent && len == self.len => return Ok(Some(End::Done)),
                other => return Err(format!("the sender got {other:?}")),
            }
        }
        Ok(None)
    }

    fn tell(&mut self, m: Msg) {
        self.told = self.now;
        let (now, latency) = (self.now, self.latency);
        if !self.controls[self.ctl].up.write(now, latency, m) {
            self.redial_control();
        }
    }

    fn redial_control(&mut self) {
        if self.ctl_redial.is_none() {
            let c = &mut self.controls[self.ctl];
            c.up.cut_at(self.now, &mut self.rng);
            c.down.cut_at(self.now, &mut self.rng);
            self.ctl_redial = Some((self.now, 0));
        }
    }

    /// One step of the receiver: readers, writer, control loop (`receive::pipe`).
    fn receiver(&mut self) -> Result<Option<End>, String> {
        let now = self.now;
        for c in 0..self.data.len() {
            if !self.reading[c] {
                continue;
            }
            while let Some(offset) = self.data[c].arrived(now) {
                let len = BLOCK.min(self.len - offset);
                // A duplicate comes back and is dropped, as the receiver recycles it.
                let _dup = (self.win)
                    .insert(offset, len, WINDOW * BLOCK, BLOCK)
                    .map_err(|e| format!("receiver: {e}"))?;
                self.asks.handle_moved(now);
            }
            if self.data[c].read_broken(now) {
                self.reading[c] = false;
                self.asks.handle_broken();
            }
        }
        while let Some((at, _)) = self.win.take_next() {
            self.out.push(at);
            self.win.written += BLOCK.min(self.len - at);
            self.asks.handle_moved(now);
        }
        // A new control connection (the newest the sender dialed) replaces the old one.
        if self.recv_ctl != self.ctl {
            if let Some(Msg::Start) = self.controls[self.ctl].up.arrived(now) {
                self.recv_ctl = self.ctl;
                self.recv_awaiting = None;
                self.acked = None;
                self.asks.handle_control_replaced();
            }
        }
        if self.controls[self.recv_ctl].up.read_broken(now) {
            // Waits for the sender's new control connection (up to its timeout).
            let since = *self.recv_awaiting.get_or_insert(now);
            if now - since > 30_000 {
                return Ok(Some(End::Failed(
                    "the sender vanished and did not reconnect",
                )));
            }
            return Ok(None);
        }
        while let Some(m) = self.controls[self.recv_ctl].up.arrived(now) {
            match m {
                Msg::End(len) => {
                    self.win
                        .set_end(len, [0; 32])
                        .map_err(|e| format!("receiver: {e}"))?;
                }
                Msg::Keepalive | Msg::Start => {}
                other => return Err(format!("the receiver got {other:?}")),
            }
        }
        let c = self.recv_ctl;
        let latency = self.latency;
        if self.win.complete() {
            let _ = self.controls[c]
                .down
                .write(now, latency, Msg::Done(self.len));
            return Ok(None);
        }
        let (written, have) = (self.win.written, self.win.have);
        if self.acked != Some((written, have)) || now - self.acked_at >= KEEPALIVE {
            self.acked = Some((written, have));
            self.acked_at = now;
            let _ = self.controls[c]
                .down
                .write(now, latency, Msg::Ack { written, have });
        }
        let awaiting = self.win.end.is_none_or(|(l, _)| self.win.have < l);
        if self.asks.poll_ask(now, awaiting) {
            let got = self.win.got();
            let _ = self.controls[c]
                .down
                .write(now, latency, Msg::Lost { have, got });
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::send::pipe::sim::net::{check_seeds, soak_seeds};

    #[test]
    fn ten_thousand_seeded_runs_end_with_the_whole_stream_or_a_clean_failure() {
        check_seeds(0..10_000, |s| Sim::new(s).run().map(drop));
    }

    /// Seeds that hung before the receiver asked again after a new control connection
    /// and after a stall (all but 696, 1238 and 1595 needed the first; those three the
    /// second: a block written into a connection already dead, by a stream with nothing
    /// more to send, after the receiver had reported that connection's loss).
    #[test]
    fn the_seeds_that_hung_before_end() {
        let seeds = [
            66, 117, 179, 187, 436, 658, 696, 883, 934, 1028, 1191, 1238, 1357, 1389, 1464, 1595,
            1625, 1774, 1912, 2376, 2609, 2663, 2886, 2909, 2913,
        ];
        check_seeds(seeds, |s| Sim::new(s).run().map(drop));
    }

    #[test]
    #[ignore = "a soak: HAUL_SIM_SEEDS=N (default 100000)"]
    fn soak() {
        check_seeds(soak_seeds(), |s| Sim::new(s).run().map(drop));
    }
}
