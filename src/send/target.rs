//! Where the sender's connections go: the first receiver (through the dial function the
//! caller gave: a ticket, an ssh tunnel, a local socket pair) until it fails in a chain
//! fan-out, then the receiver the control link went on with (through its ticket).
//!
//! Each receiver has its own block key, so a data stream tags what it writes with the
//! key of the connection it writes on, and numbers connections by target (`generation`)
//! so that it notices when the target moved (a unit in hand is then hashed again for the
//! new target). A data stream that cannot reach the current receiver marks it broken and,
//! when the chain has someone after it, waits for the control link to move on (instead of
//! failing the run). Not here: deciding that a receiver failed, or which comes next
//! (`link`, `session::Successors`).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use crate::error::Result;
use crate::transport::{self, Conn, Role, Ticket};

/// How long a stream waits at a time for the target to move (it also checks `stop`).
const WAIT_TICK: Duration = Duration::from_millis(200);

/// A connection to the current target, with what its frames need.
pub(super) struct Dialed {
    pub(super) conn: Conn,
    /// The target it goes to (see [`Target::generation`]).
    pub(super) generation: u64,
    /// That receiver's block key.
    pub(super) key: [u8; 32],
}

struct Now {
    generation: u64,
    /// None: the first receiver (through `first`).
    hop: Option<Ticket>,
    key: [u8; 32],
    /// The generation a data stream could not reach.
    broken: Option<u64>,
    /// Units written to the current target (its `Finish` count).
    sent: u64,
    stopped: bool,
}

/// The receiver the sender's connections go to now.
pub(super) struct Target<'a> {
    first: &'a (dyn Fn(Role) -> Result<Conn> + Sync),
    encrypt: bool,
    /// Whether a receiver may come after the current one (a chain fan-out).
    chain: bool,
    now: Mutex<Now>,
    moved: Condvar,
    /// Longest a write on a connection to the target may block (`bound_writes`).
    write_stall: OnceLock<Duration>,
    /// Data units being written now (see [`Target::writing`]).
    writing: AtomicUsize,
    /// `--cc`: the congestion control every connection is switched to.
    congestion: OnceLock<String>,
    /// The congestion control the first TCP connection ended up with, and why (the
    /// report's).
    congestion_seen: OnceLock<(String, String)>,
}

impl<'a> Target<'a> {
    /// The first receiver, reached with `first`, its block key `key`; `chain` when the
    /// sender may go on with later receivers (`encrypt`: whether their data streams use
    /// TLS).
    pub(super) fn new(
        first: &'a (dyn Fn(Role) -> Result<Conn> + Sync),
        key: [u8; 32],
        chain: bool,
        encrypt: bool,
    ) -> Target<'a> {
        Target {
            first,
            encrypt,
            chain,
            now: Mutex::new(Now {
                generation: 0,
                hop: None,
                key,
                broken: None,
                sent: 0,
                stopped: false,
            }),
            moved: Condvar::new(),
            write_stall: OnceLock::new(),
            writing: AtomicUsize::new(0),
            congestion: OnceLock::new(),
            congestion_seen: OnceLock::new(),
        }
    }

    /// Bounds every write on the connections dialed from now on: one that moves no byte
    /// for `stall` fails (the connection is dropped and re-dialed), so that no stream waits
    /// forever on a receiver that stopped reading.
    pub(super) fn bound_writes(&self, stall: Duration) {
        let _ = self.write_stall.set(stall);
    }

    /// Switches every connection dialed from now on to congestion control `name` (`--cc`),
    /// once the kernel said it may (a usage error otherwise); without it they keep what the
    /// transport chose (BBR where offered).
    pub(super) fn use_congestion(&self, name: Option<&str>) -> Result<()> {
        if let Some(n) = name {
            transport::congestion::check_usable(n)
                .map_err(|e| crate::error::Error::Usage(e.to_string()))?;
            let _ = self.congestion.set(n.to_owned());
        }
        Ok(())
    }

    /// The congestion control of the connections (the first TCP one's) and why, if any
    /// was TCP.
    pub(super) fn congestion(&self) -> Option<(String, String)> {
        self.congestion_seen.get().cloned()
    }

    /// Runs `write` (of one data unit) counted in [`Target::writing`].
    pub(super) fn write<T>(&self, write: impl FnOnce() -> T) -> T {
        self.writing.fetch_add(1, Ordering::AcqRel);
        let r = write();
        self.writing.fetch_sub(1, Ordering::AcqRel);
        r
    }

    /// Whether a data unit is being written now: with bounded writes, bytes moved within
    /// the bound (a unit on a slow link, or paced by `--limit`, takes long to write).
    pub(super) fn writing(&self) -> bool {
        self.writing.load(Ordering::Acquire) > 0
    }

    fn lock(&self) -> MutexGuard<'_, Now> {
        self.now.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Opens a connection of `role` to the current target.
    pub(super) fn dial(&self, role: Role) -> Result<Dialed> {
        let (generation, hop, key) = {
            let n = self.lock();
            (n.generation, n.hop.clone(), n.key)
        };
        let conn = match &hop {
            None => (self.first)(role)?,
            Some(t) => transport::connect(t, role, self.encrypt)?,
        };
        if let Some(stall) = self.write_stall.get() {
            conn.set_write_timeout(Some(*stall))
                .map_err(crate::session::lost)?;
        }
        if let Some(name) = self.congestion.get() {
            conn.set_congestion(name)
                .map_err(|e| crate::error::Error::Usage(e.to_string()))?;
        }
        if let (None, Some(cc)) = (self.congestion_seen.get(), conn.congestion()) {
            let why = transport::congestion::why(&cc, self.congestion.get().is_some());
            let _ = self.congestion_seen.set((cc, why));
        }
        Ok(Dialed {
            conn,
            generation,
            key,
        })
    }

    /// The current target's block key.
    pub(super) fn key(&self) -> [u8; 32] {
        self.lock().key
    }

    /// Numbers the targets: a connection of an older one goes to a receiver left behind.
    pub(super) fn generation(&self) -> u64 {
        self.lock().generation
    }

    /// From now on, connections go to the receiver of `ticket`.
    pub(super) fn retarget(&self, ticket: Ticket) {
        let mut n = self.lock();
        n.generation += 1;
        n.key = ticket.secret.block_key();
        n.hop = Some(ticket);
        n.broken = None;
        n.sent = 0;
        drop(n);
        self.moved.notify_all();
    }

    /// A data stream could not reach target `generation`.
    pub(super) fn broke(&self, generation: u64) {
        let mut n = self.lock();
        if n.generation == generation {
            n.broken = Some(generation);
        }
    }

    /// Whether a data stream could not reach the current target.
    pub(super) fn is_broken(&self) -> bool {
        let n = self.lock();
        n.broken == Some(n.generation)
    }

    /// After a data stream gave up on target `generation`: true once the control link
    /// moved on to another receiver; false at once without a chain, or when the transfer
    /// stopped.
    pub(super) fn wait_moved(&self, generation: u64) -> bool {
        if !self.chain {
            return false;
        }
        self.broke(generation);
        let mut n = self.lock();
        loop {
            if n.stopped {
                return false;
            }
            if n.generation != generation {
                return true;
            }
            n = self
                .moved
                .wait_timeout(n, WAIT_TICK)
                .map(|(g, _)| g)
                .unwrap_or_else(|p| p.into_inner().0);
        }
    }

    /// One unit was written to target `generation`.
    pub(super) fn count(&self, generation: u64) {
        let mut n = self.lock();
        if n.generation == generation {
            n.sent += 1;
        }
    }

    /// Units written to the current target.
    pub(super) fn sent(&self) -> u64 {
        self.lock().sent
    }

    /// The transfer is over: streams waiting for a move stop waiting.
    pub(super) fn stop(&self) {
        self.lock().stopped = true;
        self.moved.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::Secret;

    fn ticket(secret: u8) -> Ticket {
        Ticket {
            addrs: vec![],
            fingerprint: [0; 32],
            secret: Secret::from_bytes([secret; 32]),
        }
    }

    fn nowhere(_: Role) -> Result<Conn> {
        Err(crate::session::lost(std::io::Error::other("nowhere")))
    }

    #[test]
    fn a_move_changes_key_generation_and_count() {
        let t = Target::new(&nowhere, [1; 32], true, false);
        t.count(0);
        t.count(0);
        assert_eq!(t.sent(), 2);
        t.broke(0);
        assert!(t.is_broken());
        t.retarget(ticket(2));
        assert_eq!(t.generation(), 1);
        assert!(!t.is_broken(), "a new target is not broken");
        assert_eq!(t.sent(), 0, "counted afresh");
        t.count(0);
        assert_eq!(t.sent(), 0, "a unit for the old target does not count");
        assert_eq!(t.lock().key, ticket(2).secret.block_key());
    }

    #[test]
    fn a_stream_waits_for_the_move_only_in_a_chain() {
        let single = Target::new(&nowhere, [1; 32], false, false);
        assert!(!single.wait_moved(0), "nothing to wait for");
        let t = Target::new(&nowhere, [1; 32], true, false);
        std::thread::scope(|s| {
            let waiting = s.spawn(|| t.wait_moved(0));
            while !t.is_broken() {
                std::thread::yield_now();
            }
            t.retarget(ticket(2));
            assert!(waiting.join().unwrap(), "moved on");
            let waiting = s.spawn(|| t.wait_moved(1));
            while !t.is_broken() {
                std::thread::yield_now();
            }
            t.stop();
            assert!(!waiting.join().unwrap(), "stopped");
        });
    }
}
