//! Admitting control connections (a Start that verifies and makes sense), and how the
//! receiver answers a frame that fails verification: it is damage in transit (or a
//! dishonest peer), so the connection that carried it is dropped and, for data, what it
//! lost is asked for again after Finish; but only [`MAX_FORGED`] times per transfer.
//!
//! Not here: the checks themselves (`protocol::seal`, `codec`).

use std::io;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use crossbeam_channel::Receiver;

use crate::error::{Error, Result};
use crate::protocol::{Control, ProtocolError, SyncOptions, MAX_BLOCK, MAX_STREAMS};
use crate::session::{is_forged, lost, Channel};
use crate::transport::{Conn, Role};

/// Verification failures that end a transfer (exit 8); fewer each cost one connection.
/// Bit errors that slip past TCP's checksum are rare, so 16 means someone is at work on
/// the path (or the sender is not honest).
pub(super) const MAX_FORGED: u32 = 16;

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
/// accepts (data connections that come first go to `early_data`); returns it, what `read`
/// made of it and how many failed verification before.
pub(super) fn first_start<T>(
    incoming: &Receiver<(Conn, Role)>,
    timeout: Duration,
    early_data: &mut Vec<Conn>,
    read: impl Fn(&mut Channel) -> Result<T>,
) -> Result<(Channel, T, u32)> {
    let mut forged = 0;
    loop {
        // Once a Start failed verification, the sender re-dials within its retries.
        let next = match forged {
            0 => incoming.recv().ok(),
            _ => incoming.recv_timeout(timeout).ok(),
        };
        let mut c = match next {
            Some((c, Role::Control)) => Channel::new(c),
            Some((c, Role::Data)) => {
                early_data.push(c);
                continue;
            }
            Some((_, Role::Probe | Role::ProbeData)) => continue,
            None => return Err(lost(io::Error::other("no sender connected"))),
        };
        match read(&mut c) {
            Ok(start) => return Ok((c, start, forged)),
            Err(e) if is_forged(&e) => {
                forged += 1;
                note_line(forged, "control", &c.conn().peer_desc(), &e)?;
            }
            Err(e) => return Err(e),
        }
    }
}

/// Reads a control connection's first message, which must be a sensible Start.
pub(super) fn read_start(control: &mut Channel) -> Result<(u16, u32, SyncOptions)> {
    match control.read(None)? {
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
