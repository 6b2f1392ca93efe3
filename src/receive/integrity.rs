//! Admitting control connections (a Start that verifies and makes sense), and how the
//! receiver answers a frame that fails verification: it is damage in transit (or a
//! dishonest peer), so the connection that carried it is dropped and, for data, what it
//! lost is asked for again after Finish; but only [`MAX_FORGED`] times per transfer.
//!
//! What a sender may hold open before its Start is bounded here too: data connections
//! that come first are kept up to the most any Start may declare ([`MAX_EARLY_DATA`]),
//! and authenticated connections the transfer has not taken yet wait in a queue of
//! [`QUEUED_CONNS`] ([`ConnQueue`]); beyond either, a connection is closed at once.
//! (Strangers never get this far: the listener bounds handshakes.)
//!
//! Not here: the checks themselves (`protocol::seal`, `codec`).

use std::io;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, TrySendError};

use crate::error::{Error, Result};
use crate::protocol::{
    Control, ProtocolError, SyncOptions, MAX_BLOCK, MAX_PENDING_FILES, MAX_STREAMS,
};
use crate::session::{is_forged, is_tick, lost, Channel};
use crate::transport::{Conn, Role};

/// Verification failures that end a transfer (exit 8); fewer each cost one connection.
/// Bit errors that slip past TCP's checksum are rare, so 16 means someone is at work on
/// the path (or the sender is not honest).
pub(super) const MAX_FORGED: u32 = 16;

/// Data connections allowed beyond the `streams` the sender declared: a re-dialed stream
/// can arrive before the worker of the one it replaces has noticed its connection died.
/// Each active worker may hold a frame buffer of up to the largest frame, so more are
/// closed at once.
pub(super) const DATA_CONN_SLACK: usize = 4;
/// Data connections kept before the sender's Start says how many streams it has: the
/// most a Start may declare, and the slack a re-dial needs. Each may hold a TLS state and
/// frame buffers (about 330 KiB), so more are closed at once.
pub(super) const MAX_EARLY_DATA: usize = MAX_STREAMS as usize + DATA_CONN_SLACK;
/// Authenticated connections waiting for the transfer to take them (it takes them at
/// once, except while it reads a Start): as many as may be kept before Start.
pub(super) const QUEUED_CONNS: usize = MAX_EARLY_DATA;

/// The queue between the listener and the transfer: connections beyond [`QUEUED_CONNS`]
/// not yet taken are closed (one warning per queue).
pub(super) struct ConnQueue {
    tx: Sender<(Conn, Role)>,
    warned: bool,
}

impl ConnQueue {
    /// A queue and the end the transfer takes connections from.
    pub(super) fn new() -> (ConnQueue, Receiver<(Conn, Role)>) {
        let (tx, rx) = crossbeam_channel::bounded(QUEUED_CONNS);
        (ConnQueue { tx, warned: false }, rx)
    }

    /// Queues `c`, or closes it when the queue is full; `false` once the transfer is gone.
    pub(super) fn offer(&mut self, c: Conn, role: Role) -> bool {
        match self.tx.try_send((c, role)) {
            Ok(()) => true,
            Err(TrySendError::Full((c, _))) => {
                let peer = c.peer_desc();
                drop(c);
                if !std::mem::replace(&mut self.warned, true) {
                    crate::progress::warn(&format!(
                        "closed a connection from {peer}: {QUEUED_CONNS} are already waiting \
                         for the transfer to take them"
                    ));
                }
                true
            }
            Err(TrySendError::Disconnected(_)) => false,
        }
    }
}

/// Control connections that came after the first, waiting for the control loop (which
/// takes one when its own drops): an honest sender has at most its latest re-dial here.
pub(super) const QUEUED_CONTROL: usize = 4;

/// The queue of later control connections: beyond [`QUEUED_CONTROL`] the oldest waiting
/// is closed, so the sender's latest re-dial is always among those kept.
pub(super) struct ControlQueue {
    tx: Sender<Conn>,
    /// The queue's own end, to take the oldest out when it is full.
    oldest: Receiver<Conn>,
}

impl ControlQueue {
    /// A queue and the end the control loop takes connections from.
    pub(super) fn new() -> (ControlQueue, Receiver<Conn>) {
        let (tx, rx) = crossbeam_channel::bounded(QUEUED_CONTROL);
        let oldest = rx.clone();
        (ControlQueue { tx, oldest }, rx)
    }

    /// Queues `c`, closing the oldest waiting if need be; `false` once the loop is gone.
    pub(super) fn offer(&self, mut c: Conn) -> bool {
        // Bounded: each failed try takes one out of a queue of QUEUED_CONTROL.
        for _ in 0..=QUEUED_CONTROL {
            match self.tx.try_send(c) {
                Ok(()) => return true,
                Err(TrySendError::Full(back)) => {
                    drop(self.oldest.try_recv());
                    c = back;
                }
                Err(TrySendError::Disconnected(_)) => return false,
            }
        }
        true
    }
}

/// Counts verification failures across every connection of one transfer.
#[derive(Default)]
pub(super) struct Forgeries {
    count: AtomicU32,
}

impl Forgeries {
    /// Starts from failures seen before the count existed (on the first control stream).
    pub(super) fn starting_at(n: u32) -> Forgeries {
        Forgeries {
            count: AtomicU32::new(n),
        }
    }

    /// Records one failure on the connection from `peer` (one warning line); the error
    /// that ends the transfer at the [`MAX_FORGED`]th.
    pub(super) fn note(&self, role: &str, peer: &str, what: &dyn std::fmt::Display) -> Result<()> {
        let n = self.count.fetch_add(1, Ordering::AcqRel) + 1;
        note_line(n, role, peer, what)
    }
}

/// The warning for failure `n`, or the error when it reaches the bound.
pub(super) fn note_line(
    n: u32,
    role: &str,
    peer: &str,
    what: &dyn std::fmt::Display,
) -> Result<()> {
    if n >= MAX_FORGED {
        return Err(Error::Tampered {
            count: n,
            last: what.to_string(),
        });
    }
    crate::progress::warn(&format!(
        "dropped the {role} connection from {peer}: {what} ({n} of {MAX_FORGED} tolerated)"
    ));
    Ok(())
}

/// Waits for the first control connection whose opening message verifies and `read`
/// accepts (data connections that come first go to `early_data`, at most
/// [`MAX_EARLY_DATA`]: more are closed); returns it, what `read` made of it and how many
/// failed verification before. `first`: how long to wait for a sender at all (None: until
/// one comes; `haul recv` without `--timeout`, whose sender a person starts); at the
/// bound, a timed-out error (exit 5) naming it.
pub(super) fn first_start<T>(
    incoming: &Receiver<(Conn, Role)>,
    (first, timeout): (Option<Duration>, Duration),
    early_data: &mut Vec<Conn>,
    read: impl Fn(&mut Channel) -> Result<T>,
) -> Result<(Channel, T, u32)> {
    let mut forged = 0;
    let mut closed_early = false;
    let deadline = first.map(|f| std::time::Instant::now() + f);
    loop {
        // Once a Start failed verification, the sender re-dials within its retries.
        let next = match (forged, deadline) {
            (0, None) => incoming.recv().map_err(|_| RecvTimeoutError::Disconnected),
            (0, Some(d)) => incoming.recv_deadline(d),
            _ => incoming.recv_timeout(timeout),
        };
        let mut c = match next {
            Ok((c, Role::Control)) => Channel::new(c),
            Ok((c, Role::Data)) if early_data.len() < MAX_EARLY_DATA => {
                early_data.push(c);
                continue;
            }
            Ok((c, Role::Data)) => {
                if !std::mem::replace(&mut closed_early, true) {
                    crate::progress::warn(&format!(
                        "closed a data connection from {} that came before the sender's \
                         Start: {MAX_EARLY_DATA} are kept until it says how many it has",
                        c.peer_desc()
                    ));
                }
                drop(c);
                continue;
            }
            Ok((_, Role::Probe | Role::ProbeData)) => continue,
            Err(RecvTimeoutError::Timeout) => {
                let waited = first.filter(|_| forged == 0).unwrap_or(timeout);
                return Err(Error::TimedOut(format!(
                    "no sender connected within {} s (--timeout): start `haul send` with \
                     this ticket, or give a longer --timeout",
                    waited.as_secs()
                )));
            }
            Err(RecvTimeoutError::Disconnected) => {
                return Err(lost(io::Error::other("no sender connected")))
            }
        };
        match read(&mut c) {
            Ok(start) => return Ok((c, start, forged)),
            Err(e) if is_forged(&e) => {
                forged += 1;
                note_line(forged, "control", &c.conn().peer_desc(), &e)?;
            }
            // It held its place and said nothing: closed, and the wait goes on (a real
            // sender's connection may be queued behind it).
            Err(e) if is_tick(&e) => crate::progress::warn(&silent_first(&c)),
            Err(e) => return Err(e),
        }
    }
}

/// Refuses a sender that keeps more than [`MAX_PENDING_FILES`] files waiting for their data
/// (`pending`): each costs a record here, and an honest sender waits at half of it.
pub(super) fn check_pending(pending: usize) -> Result<()> {
    if pending > MAX_PENDING_FILES {
        return Err(ProtocolError::TooMany {
            what: "files that still wait for their data",
            count: pending as u64,
            max: MAX_PENDING_FILES as u64,
        }
        .into());
    }
    Ok(())
}

/// How long a control connection may take to say its first message (`Start`,
/// `StreamStart`) after its handshake: an honest sender writes it at once, so one silent
/// this long is closed (it would hold the place of the sender's next one).
pub(super) const FIRST_FRAME: Duration = Duration::from_secs(10);

/// The warning for a control connection closed for saying nothing for [`FIRST_FRAME`].
pub(super) fn silent_first(c: &Channel) -> String {
    format!(
        "closed the control connection from {}: it said nothing for {} s after its handshake",
        c.conn().peer_desc(),
        FIRST_FRAME.as_secs()
    )
}

/// Reads a control connection's first message, which must be a sensible Start.
pub(super) fn read_start(control: &mut Channel) -> Result<(u16, u32, SyncOptions)> {
    match control.read(Some(FIRST_FRAME))? {
        Control::Start {
            streams,
            block_size,
            options,
        } => {
            if streams == 0
                || streams > MAX_STREAMS
                || block_size < 4096
                || block_size as usize > MAX_BLOCK
            {
                return Err(
                    ProtocolError::Malformed("stream count or block size out of range").into(),
                );
            }
            Ok((streams, block_size, options))
        }
        Control::StreamStart { .. } => Err(Error::Usage(
            "the sender sends a stream (haul send -), but this receiver writes files into a \
             directory; receive it with `haul recv -`, `haul recv --stream FILE` or \
             `haul recv --to-command CMD`"
                .into(),
        )),
        other => Err(ProtocolError::Unexpected(other.name().into()).into()),
    }
}
