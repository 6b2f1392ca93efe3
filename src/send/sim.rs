//! A deterministic simulator of file mode's control conversation (STYLE.md 14): a seeded
//! scheduler drives a sender and a chain of 1-3 receivers in memory, on a simulated
//! clock, through the manifest's batches, data units and `Finish` rounds, while it cuts
//! control and data connections (together and apart, also during a re-dial), stops
//! either end for a while (SIGSTOP longer than every bound, or shorter) and takes the
//! network down (frames wait, dials fail). On every run it checks
//!
//! - *safety*: each receiver applies each batch once, in order; the sender's answer to a
//!   batch is that batch's; `Done` only from a receiver that has every unit it asked for;
//! - *liveness*: both ends end (`Done`, or a clean failure) within a bounded number of
//!   simulated seconds.
//!
//! The decisions are the real code's (`session::watch`): when the sender beats, when a
//! silent receiver is lost, when nothing moved for `--timeout`, whether a failure
//! re-dials, goes on with the next receiver or fails, the re-dials' backoff; on the
//! receiver's side when a silent sender is gone, how long a dropped control connection
//! is waited for, when the data after `Finish` has settled, which answer a repeated
//! batch gets. Modelled here: the loops of `send/mod.rs`, `send/link.rs` and
//! `receive.rs` around them, the data streams, the network, and the relays of a chain
//! (each forwards every batch to the receivers after it; a relay's own bounds are not).
//!
//! `cargo test --lib send::sim` runs the CI seeds; a soak:
//! `HAUL_SIM_SEEDS=1000000 cargo test --release --lib send::sim::tests::soak -- --ignored`.

use std::collections::{BTreeSet, VecDeque};

use super::pipe::sim::net::{Rng, Wire};
use crate::session::backoff;
use crate::session::watch::{
    self, Answers, Failure, Patience, Redial, Retries, SenderWatch, Step, MAX_ROUNDS,
};

mod receiver;
mod sender;

/// Simulated time step (ms).
const STEP: u64 = 10;
/// A run (or the end left behind) that has not ended by then hangs (ms).
const BOUND: u64 = 1_800_000;
/// `--retries`.
const RETRIES: u32 = 5;
/// How long a dial to a stopped receiver takes to fail (the handshake's bound), and one
/// into a network that is down (the connect bound), in ms.
const HANDSHAKE: u64 = 10_000;
const CONNECT: u64 = 3_000;
/// The answer to `Finish` (a batch number no batch has).
const FINISH: u64 = u64::MAX;
/// The receiver's heartbeat while it works on an answer (ms).
const BEAT: u64 = 1_000;
/// How long the receiver waits after `Done` for a sender that asks again (ms).
const SAY_DONE: u64 = 5_000;

/// What goes over a control connection (the real messages' fields that matter here).
#[derive(Clone, Debug, PartialEq)]
enum Msg {
    Start,
    Keepalive,
    /// A batch of the manifest: its number (its first id, in the real code).
    Entries(u64),
    /// Files that arrived whole (sent before an answer).
    Arrived(usize),
    /// The answer to a batch, or to `Finish`: the units wanted (batch, unit).
    Need(u64, Vec<u64>),
    Finish(u64),
    Done,
    Error,
}

/// Both directions of one control connection.
#[derive(Default)]
struct Ctl {
    up: Wire<Msg>,
    down: Wire<Msg>,
}

/// How one end finished.
#[derive(Debug, Clone, PartialEq)]
enum End {
    Done,
    Failed(&'static str),
}

/// The simulated world: network, clock, faults.
struct Net {
    rng: Rng,
    now: u64,
    latency: u64,
    /// Dials fail and frames wait until then.
    down_until: u64,
    ctls: Vec<Ctl>,
    /// Data connections: (receiver, wire of unit ids).
    data: Vec<(usize, Wire<u64>)>,
    trace: bool,
}

impl Net {
    fn down(&self) -> bool {
        self.now < self.down_until
    }

    fn send(&mut self, c: usize, up: bool, m: Msg) -> bool {
        let (now, latency) = (self.now, self.latency);
        if self.trace {
            eprintln!("{now} send c{c} up={up} {m:?}");
        }
        let ctl = &mut self.ctls[c];
        match up {
            true => ctl.up.write(now, latency, m),
            false => ctl.down.write(now, latency, m),
        }
    }

    /// The next frame that arrived on `c` (nothing while the network is down: TCP
    /// retransmits it afterwards).
    fn recv(&mut self, c: usize, up: bool) -> Option<Msg> {
        if self.down() {
            return None;
        }
        let now = self.now;
        let m = match up {
            true => self.ctls[c].up.arrived(now),
            false => self.ctls[c].down.arrived(now),
        };
        if self.trace && m.is_some() {
            eprintln!("{now} recv c{c} up={up} {m:?}");
        }
        m
    }

    fn cut(&mut self, c: usize) {
        let now = self.now;
        if self.trace {
            eprintln!("{now} cut c{c}");
        }
        self.ctls[c].up.cut_at(now, &mut self.rng);
        self.ctls[c].down.cut_at(now, &mut self.rng);
    }
}

/// The whole run: the world and both ends.
struct Sim {
    net: Net,
    faults: Vec<(u64, u8)>,
    snd: sender::Sender,
    rcv: Vec<receiver::Receiver>,
    /// The manifest: per batch, its units.
    batches: Vec<Vec<u64>>,
}

impl Sim {
    fn new(seed: u64) -> Sim {
        let mut rng = Rng(seed);
        let hops = rng.range(1, 3) as usize;
        let batches: Vec<Vec<u64>> = (0..rng.range(1, 12))
            .map(|b| (0..rng.range(0, 6)).map(|u| b * 100 + u).collect())
            .collect();
        let streams = rng.range(1, 4) as usize;
        let timeout = rng.range(3, 30) * 1000;
        let stall = rng.chance(70).then(|| rng.range(3, 30) * 1000);
        let span = 4_000 + batches.len() as u64 * 1_500;
        let faults = (0..rng.range(1, 5))
            .map(|_| (rng.range(0, span / STEP) * STEP, rng.range(0, 7) as u8))
            .collect();
        let latency = rng.range(0, 80);
        let rcv = (0..hops)
            .map(|i| receiver::Receiver::new(i, timeout, rng.range(5, 60)))
            .collect();
        let snd = sender::Sender::new(hops, streams, stall, rng.range(5, 80));
        Sim {
            net: Net {
                rng,
                now: 0,
                latency,
                down_until: 0,
                ctls: Vec::new(),
                data: Vec::new(),
                trace: std::env::var("HAUL_SIM_TRACE").is_ok(),
            },
            faults,
            snd,
            rcv,
            batches,
        }
    }

    /// Runs to the end of every side; `Err` names a broken property.
    fn run(&mut self) -> Result<String, String> {
        while self.net.now < BOUND {
            self.faults();
            self.snd.step(&mut self.net, &mut self.rcv, &self.batches)?;
            for r in &mut self.rcv {
                r.step(&mut self.net, &self.batches)?;
            }
            self.forward();
            self.close_ended();
            let all = self.snd.end.is_some() && self.rcv.iter().all(|r| r.ended(&self.net));
            if all {
                return self.check();
            }
            self.net.now += STEP;
        }
        Err(format!(
            "hung: at {} s the sender is {:?} ({}), the receivers {:?}",
            BOUND / 1000,
            self.snd.end,
            self.snd.doing(),
            self.rcv.iter().map(|r| r.doing()).collect::<Vec<_>>()
        ))
    }

    /// An end that ended closes its connections: what it wrote still arrives (its last
    /// `Done` or `Error`), what is written to it is lost.
    fn close_ended(&mut self) {
        let now = self.net.now;
        if self.snd.end.is_some() && !self.snd.closed {
            self.snd.closed = true;
            if let (Some(End::Failed(_)), Some(c)) = (&self.snd.end, self.snd.ctl()) {
                let _ = self.net.send(c, true, Msg::Error);
            }
            for c in 0..self.net.ctls.len() {
                self.net.ctls[c].up.close(now);
                self.net.ctls[c].down.cut_at(now, &mut self.net.rng);
            }
            for (_, w) in &mut self.net.data {
                w.cut_at(now, &mut self.net.rng);
            }
        }
        for r in &mut self.rcv {
            if r.end.is_none() || r.closed {
                continue;
            }
            r.closed = true;
            for &c in r.ctls() {
                self.net.ctls[c].down.close(now);
                self.net.ctls[c].up.cut_at(now, &mut self.net.rng);
            }
            for (id, w) in &mut self.net.data {
                if *id == r.id {
                    w.cut_at(now, &mut self.net.rng);
                }
            }
        }
    }

    /// A relay passes each batch it applied on to the receivers after it (before its
    /// own answer, as `receive/relay` does).
    fn forward(&mut self) {
        for i in 1..self.rcv.len() {
            let upto = self.rcv[i - 1].applied;
            while self.rcv[i].end.is_none() && self.rcv[i].applied < upto {
                let b = self.rcv[i].applied;
                self.rcv[i].forwarded(b, &self.batches);
            }
        }
    }

    fn check(&self) -> Result<String, String> {
        if self.snd.end == Some(End::Done) {
            let r = &self.rcv[self.snd.rx];
            if r.end != Some(End::Done) || r.applied != self.batches.len() as u64 {
                return Err(format!(
                    "the sender has Done but receiver {} is {:?} with {} of {} batches",
                    self.snd.rx,
                    r.end,
                    r.applied,
                    self.batches.len()
                ));
            }
        }
        for r in &self.rcv {
            if r.end == Some(End::Done) && !r.missing(&self.batches).is_empty() {
                return Err(format!("receiver {} said Done with units missing", r.id));
            }
        }
        Ok(format!(
            "{:?} {:?}",
            self.snd.end,
            self.rcv.iter().map(|r| r.end.clone()).collect::<Vec<_>>()
        ))
    }

    fn faults(&mut self) {
        let now = self.net.now;
        let due: Vec<u8> = (self.faults.iter())
            .filter(|f| f.0 == now)
            .map(|f| f.1)
            .collect();
        for kind in due {
            let n = &mut self.net;
            if n.trace {
                eprintln!("{now} fault {kind}");
            }
            match kind {
                // Control, data, or both cut (`ss -K`).
                0..=2 => {
                    if kind != 1 {
                        (0..n.ctls.len()).for_each(|c| n.cut(c));
                    }
                    if kind != 0 {
                        for (_, w) in &mut n.data {
                            w.cut_at(now, &mut n.rng);
                        }
                    }
                }
                // An outage (wanlab --loss 100%), short or beyond every bound.
                3 => n.down_until = now + n.rng.range(500, 60_000),
                // A receiver stopped (SIGSTOP), shorter or longer than its bounds.
                4 | 5 => {
                    let i = n.rng.range(0, self.rcv.len() as u64 - 1) as usize;
                    self.rcv[i].paused_until = now + n.rng.range(500, 45_000);
                }
                // The sender stopped.
                _ => self.snd.paused_until = now + n.rng.range(500, 45_000),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::send::pipe::sim::net::{check_seeds, soak_seeds};

    #[test]
    fn two_thousand_seeded_runs_end_whole_or_with_a_clean_failure_on_both_ends() {
        check_seeds(0..2_000, |s| Sim::new(s).run().map(drop));
    }

    /// Seeds where a receiver whose control connection broke while it answered a batch
    /// wrote the rest of that answer on the sender's new connection, then answered the
    /// repeated request again: the sender took the second `Need` for the answer to its
    /// next batch (whose files it then never sent; 50 rounds later, "data kept getting
    /// lost"). `watch::answer` now stops at the failed write.
    #[test]
    fn the_seeds_that_read_one_answer_twice() {
        let seeds = [
            3, 9, 25, 32, 40, 42, 53, 60, 68, 76, 86, 94, 96, 103, 108, 129, 147,
        ];
        check_seeds(seeds, |s| Sim::new(s).run().map(drop));
    }

    #[test]
    #[ignore = "a soak: HAUL_SIM_SEEDS=N (default 100000)"]
    fn soak() {
        check_seeds(soak_seeds(), |s| Sim::new(s).run().map(drop));
    }
}
