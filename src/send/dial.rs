//! How the sender gets its connections, and gets them back when they drop: a dialer for
//! a ticket that remembers the address that worked, and re-dialing with backoff.
//!
//! A receiver that answers a re-dial with a different identity (restarted, or its port
//! reused) is gone: that is a lost connection, not a wrong ticket, and is not retried.

use std::io::{self, Write};
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::progress::Counters;
use crate::protocol::{FrameKind, Sealer};
use crate::session::{lost, sealer};
use crate::transport::{self, Conn, Role, Ticket, TransportError};

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
pub struct Redial<'a> {
    /// Opens a new authenticated data connection.
    pub dial: &'a dyn Fn() -> Result<Conn>,
    /// How many times to re-dial after a failure.
    pub retries: u32,
    /// This stream's number, for messages.
    pub stream: usize,
    /// The sender's bandwidth cap, shared by its streams.
    pub pace: &'a super::pace::Pacer,
}

/// A data connection and the tags of the frames we write on it.
pub(super) type DataConn = (Conn, Sealer);

impl Redial<'_> {
    /// Opens a data connection.
    pub(super) fn open(&self) -> Result<DataConn> {
        (self.dial)().map(|c| {
            let s = sealer(&c);
            (c, s)
        })
    }

    /// Writes one frame of `kind` whose payload is `parts`, tagged for the connection it
    /// goes on; when the connection fails, re-dials (with backoff) and writes it again on
    /// the new one. What the old connection lost is asked for again by the receiver after
    /// Finish.
    pub(super) fn write(
        &self,
        conn: &mut Option<DataConn>,
        kind: FrameKind,
        parts: &[&[u8]],
        counters: &Counters,
    ) -> Result<()> {
        let len = parts.iter().map(|p| p.len()).sum();
        self.pace.take(len + crate::protocol::FRAME_HEADER_LEN);
        let mut head = Vec::new();
        let mut attempt = 0;
        loop {
            let r = match conn.as_mut() {
                Some(c) => put(c, kind, parts, len, &mut head),
                None => Err(lost(io::Error::other("data stream not connected"))),
            };
            let err = match r {
                Ok(()) => return Ok(()),
                Err(e) => e,
            };
            *conn = None;
            let mut last = None;
            loop {
                if attempt >= self.retries {
                    return Err(gave_up(&err, last));
                }
                std::thread::sleep(backoff(attempt));
                attempt += 1;
                match self.open() {
                    Ok(c) => {
                        crate::progress::warn(&format!(
                            "data stream {} reconnected ({err})",
                            self.stream
                        ));
                        Counters::add(&counters.reconnects, 1);
                        *conn = Some(c);
                        break;
                    }
                    Err(
                        e @ Error::Transport(
                            TransportError::AuthRejected | TransportError::PeerUnauthenticated,
                        ),
                    ) => {
                        // Someone else holds the receiver's address now: our receiver is
                        // gone (a lost connection, not a wrong ticket); retrying won't help.
                        return Err(gave_up(&err, Some(e)));
                    }
                    Err(e) => last = Some(e),
                }
            }
        }
    }
}

/// Writes one frame of `kind` whose payload is `parts` (`len` bytes in all) on `conn`,
/// tagged for it; `head` is scratch space.
pub(super) fn put(
    conn: &mut DataConn,
    kind: FrameKind,
    parts: &[&[u8]],
    len: usize,
    head: &mut Vec<u8>,
) -> Result<()> {
    let (c, s) = conn;
    // The header and the first part in one write: one packet, not two.
    head.clear();
    head.extend_from_slice(&s.header(kind, len));
    let (first, rest): (&[u8], &[&[u8]]) = match parts.split_first() {
        Some((f, r)) => (f, r),
        None => (&[], &[]),
    };
    head.extend_from_slice(first);
    std::iter::once(&head[..])
        .chain(rest.iter().copied())
        .try_for_each(|p| c.write_all(p))
        .map_err(lost)
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

/// Delay before re-dial attempt `n` (0-based): none, then 250 ms doubling to 4 s.
pub(super) fn backoff(n: u32) -> Duration {
    match n {
        0 => Duration::ZERO,
        n => Duration::from_millis(250u64 << (n - 1).min(4)),
    }
}
