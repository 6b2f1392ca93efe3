//! How the sender gets its connections, and gets them back when they drop: a dialer for
//! a ticket that remembers the address that worked, and re-dialing with backoff.
//!
//! A receiver that answers a re-dial with a different identity (restarted, or its port
//! reused) is gone: that is a lost connection, not a wrong ticket, and is not retried.
//! In a chain fan-out a stream that cannot reach its receiver waits for the control link
//! to go on with the next one (`target`), and then writes there.

use std::io;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::pace::Pacer;
use super::target::Target;
use crate::error::{Error, Result};
use crate::progress::Counters;
use crate::protocol::{set_hash, FrameKind, Sealer};
use crate::session::{lost, sealer};
use crate::transport::{self, Conn, Gate, Role, Ticket, TransportError};

/// Dials `ticket`: the first connection finds an address that works; the rest reuse it.
pub fn ticket_dialer(ticket: &Ticket, encrypt: bool) -> impl Fn(Role) -> Result<Conn> + Sync + '_ {
    let found: Mutex<Option<SocketAddr>> = Mutex::new(None);
    move |role: Role| -> Result<Conn> {
        let addr = found.lock().ok().and_then(|g| *g);
        let conn = match addr {
            Some(a) => transport::connect_addr(a, ticket, role, encrypt)?,
            None => transport::connect(ticket, role, encrypt)?,
        };
        if let (Some(a), Ok(mut g)) = (conn.peer_addr(), found.lock()) {
            g.get_or_insert(a);
        }
        Ok(conn)
    }
}

/// How a stream gets (and gets back) its connection.
pub(super) struct Redial<'a> {
    /// Where connections go now.
    pub(super) target: &'a Target<'a>,
    /// How many times to re-dial after a failure.
    pub(super) retries: u32,
    /// This stream's number, for messages.
    pub(super) stream: usize,
    /// The sender's bandwidth cap, shared by its streams.
    pub(super) pace: &'a Pacer,
}

/// A unit's hash for a receiver: of its block key, the unit's header and its raw bytes.
pub(super) type UnitHash<'a> = dyn Fn(&[u8; 32], &[u8], &[u8]) -> [u8; 32] + 'a;

/// A data unit's bytes: as read, and as compressed when its codec is not raw. The one sent
/// (`packed`, else `raw`) is given up to the connection: over TLS it is sealed in place
/// (see `Conn::write_all_in_place`), so after a successful write it holds ciphertext.
pub(super) struct UnitBytes<'a> {
    pub(super) raw: &'a mut [u8],
    pub(super) packed: Option<&'a mut [u8]>,
}

/// A data connection, the tags of the frames we write on it, and the receiver it goes to.
pub(super) struct DataConn {
    pub(super) conn: Conn,
    pub(super) sealer: Sealer,
    /// Its target (see `Target::generation`).
    pub(super) generation: u64,
    /// Its receiver's block key: what the units written on it are hashed with.
    pub(super) key: [u8; 32],
}

impl Redial<'_> {
    /// Opens a data connection to the current target.
    pub(super) fn open(&self) -> Result<DataConn> {
        self.target.dial(Role::Data).map(|d| DataConn {
            sealer: sealer(&d.conn),
            conn: d.conn,
            generation: d.generation,
            key: d.key,
        })
    }

    /// Writes one data unit, `hdr` then `body`, its hash set by `hash(key, hdr)` for the
    /// receiver of the connection it goes on. When the connection fails, re-dials (with
    /// backoff) and writes it again on the new one; what the old one lost the receiver
    /// asks for after Finish. When the chain moved on to another receiver, the unit goes
    /// there, hashed again with that one's key. Returns the time spent hashing (which the
    /// adaptive codec must not count as writing: it is per raw byte, whatever the codec).
    pub(super) fn write_unit(
        &self,
        conn: &mut Option<DataConn>,
        hdr: &mut [u8],
        mut unit: UnitBytes<'_>,
        hash: &UnitHash<'_>,
        counters: &Counters,
    ) -> Result<Duration> {
        let mut head = Vec::new();
        let mut hashed = None;
        let mut hashing = Duration::ZERO;
        let mut attempt = 0;
        let mut why = None;
        let mut seen = conn.as_ref().map(|c| c.generation);
        loop {
            let now = self.target.generation();
            if seen.is_some_and(|g| g != now) {
                // Its receiver was left behind: the unit goes to the current one, and
                // what went wrong with the one before is no news.
                *conn = None;
                (attempt, why) = (0, None);
            }
            seen = Some(now);
            let Some(c) = conn.as_mut() else {
                self.reopen(conn, now, &mut attempt, &mut why, counters)?;
                continue;
            };
            if hashed != Some(c.generation) {
                let started = Instant::now();
                let h = hash(&c.key, hdr, unit.raw);
                hashing += started.elapsed();
                set_hash(hdr, &h);
                hashed = Some(c.generation);
            }
            // A failed write leaves the body as it was: it is written again as it is.
            let body = match unit.packed.as_deref_mut() {
                Some(p) => p,
                None => &mut *unit.raw,
            };
            match self
                .target
                .write(|| put_unit(c, self.pace.gate().as_ref(), hdr, body, &mut head))
            {
                Ok(()) => {
                    self.target.count(c.generation);
                    return Ok(hashing);
                }
                Err(e) => {
                    *conn = None;
                    why = Some(e);
                }
            }
        }
    }

    /// Opens a connection to target `now` after the last one failed (`why`) or none was
    /// open, with backoff. When every attempt fails and the chain can go on without this
    /// receiver, waits until it did (the caller then dials the next one); otherwise the
    /// connection is lost (exit 5).
    fn reopen(
        &self,
        conn: &mut Option<DataConn>,
        now: u64,
        attempt: &mut u32,
        why: &mut Option<Error>,
        counters: &Counters,
    ) -> Result<()> {
        let mut last = None;
        loop {
            let gone = if *attempt >= self.retries {
                true
            } else {
                std::thread::sleep(backoff(*attempt));
                *attempt += 1;
                match self.open() {
                    Ok(c) => {
                        if let Some(w) = why.take() {
                            crate::progress::warn(&format!(
                                "data stream {} reconnected ({w})",
                                self.stream
                            ));
                            Counters::add(&counters.reconnects, 1);
                        }
                        *conn = Some(c);
                        return Ok(());
                    }
                    // Someone else holds the receiver's address now: our receiver is gone
                    // (a lost connection, not a wrong ticket); retrying won't help.
                    Err(
                        e @ Error::Transport(
                            TransportError::AuthRejected | TransportError::PeerUnauthenticated,
                        ),
                    ) => {
                        last = Some(e);
                        true
                    }
                    Err(e) => {
                        last = Some(e);
                        false
                    }
                }
            };
            if gone {
                let w = why
                    .take()
                    .unwrap_or_else(|| lost(io::Error::other("data stream not connected")));
                let e = gave_up(&w, last);
                if self.target.wait_moved(now) {
                    *attempt = 0;
                    return Ok(());
                }
                return Err(e);
            }
        }
    }
}

/// Writes one frame of `kind` whose payload is `parts` (`len` bytes in all) on `conn`,
/// tagged for it, each piece paid for at `gate` (a cap's) as it goes; `head` is scratch space.
pub(super) fn put(
    conn: &mut DataConn,
    gate: Option<&Gate<'_>>,
    kind: FrameKind,
    parts: &[&[u8]],
    len: usize,
    head: &mut Vec<u8>,
) -> Result<()> {
    let DataConn {
        conn: c, sealer: s, ..
    } = conn;
    // The header and the first part in one write: one packet, not two.
    head.clear();
    head.extend_from_slice(&s.header(kind, len));
    let (first, rest): (&[u8], &[&[u8]]) = match parts.split_first() {
        Some((f, r)) => (f, r),
        None => (&[], &[]),
    };
    head.extend_from_slice(first);
    let all: Vec<&[u8]> = std::iter::once(&head[..])
        .chain(rest.iter().copied())
        .collect();
    c.write_all_gated(&all, gate).map_err(lost)
}

/// Writes one data frame: its header and the unit's header, copied, then `body`, given up
/// to the connection (see [`UnitBytes`]), paid for at `gate` piece by piece as it goes.
pub(super) fn put_unit(
    conn: &mut DataConn,
    gate: Option<&Gate<'_>>,
    hdr: &[u8],
    body: &mut [u8],
    head: &mut Vec<u8>,
) -> Result<()> {
    let DataConn {
        conn: c, sealer: s, ..
    } = conn;
    head.clear();
    head.extend_from_slice(&s.header(FrameKind::Data, hdr.len() + body.len()));
    head.extend_from_slice(hdr);
    c.write_all_in_place(head, body, gate).map_err(lost)
}

/// The error after re-dialing failed `retries` times: the connection was lost (exit 5),
/// whatever the last attempt said.
pub(super) fn gave_up(why: &Error, last: Option<Error>) -> Error {
    let detail = match last {
        Some(e) => format!("{why}; re-dialing failed: {e}"),
        None => why.to_string(),
    };
    lost(io::Error::other(detail))
}

pub(super) use crate::session::backoff;

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    fn nowhere(_: Role) -> Result<Conn> {
        Err(lost(io::Error::other("nowhere")))
    }

    /// The adaptive codec charges a unit's write time to its wire bytes; hashing the raw
    /// bytes happens inside `write_unit` but costs the same at every level, so it is
    /// reported apart (before, a 1 Gbit/s run charged it to the ~95 KB a 4 MiB unit of
    /// the pg set became, and the link looked several times slower than it was).
    #[test]
    fn the_time_spent_hashing_is_reported_apart_from_the_write() {
        let (a, _b) = Conn::pair().expect("socketpair");
        let mut conn = Some(DataConn {
            sealer: sealer(&a),
            conn: a,
            generation: 0,
            key: [7; 32],
        });
        let target = Target::new(&nowhere, [7; 32], false, false);
        let pace = super::super::pace::Pacer::new(Arc::new(Counters::default()), None);
        let link = Redial {
            target: &target,
            retries: 0,
            stream: 0,
            pace: &pace,
        };
        let slow = |key: &[u8; 32], _: &[u8], _: &[u8]| {
            std::thread::sleep(Duration::from_millis(30));
            *key
        };
        let mut hdr = vec![0u8; 64];
        let hashing = link
            .write_unit(
                &mut conn,
                &mut hdr,
                UnitBytes {
                    raw: &mut b"body".to_vec(),
                    packed: None,
                },
                &slow,
                &Counters::default(),
            )
            .expect("written");
        assert!(hashing >= Duration::from_millis(30), "{hashing:?}");
    }
}
