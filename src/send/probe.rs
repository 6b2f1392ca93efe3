//! The prober of `haul probe PATH... --to TICKET`: asks a waiting `haul recv` to measure
//! its destination and to count what `streams` probe streams carry, as a sender's would
//! (the same ticket, handshake, pinned certificate and TLS), and brings its numbers back.
//! The receiver keeps waiting for the real sender afterwards.
//!
//! Conversation, on a connection of role `Probe`: `Probe { streams }` →
//! `ProbeReady { write_rate, file_micros }` (or `Error`); then `streams` connections of
//! role `ProbeData` carry incompressible bytes for `probe::count::SEND_TIME`; →
//! `Probed { received, micros }`. Not here: the measuring side (`receive::probe`), what
//! the numbers predict (`probe::choose`).

use std::net::SocketAddr;
use std::time::Duration;

use super::dial::ticket_dialer;
use crate::error::{Error, Result};
use crate::probe::{count, FarMeasure};
use crate::protocol::{Control, ProtocolError};
use crate::session::{is_tick, lost, Channel};
use crate::transport::{Role, Ticket};

/// How long the receiver may take to measure its destination (a 2 s write, its sync, and
/// a probe of someone else's before ours).
const READY_WAIT: Duration = Duration::from_secs(60);
/// How long the receiver may take to report the count after our streams ended.
const COUNT_WAIT: Duration = Duration::from_secs(30);

/// Probes the receiver of `ticket` with `streams` streams of `block` (incompressible
/// bytes); returns what it measured and the address it answered from.
pub fn probe_receiver(
    ticket: &Ticket,
    streams: usize,
    block: &[u8],
) -> Result<(FarMeasure, Option<SocketAddr>)> {
    let dial = ticket_dialer(ticket, true);
    let conn = dial(Role::Probe)?;
    let peer = conn.peer_addr();
    let mut ch = Channel::new(conn);
    ch.write(&Control::Probe {
        // Lossless: validated to be at most MAX_STREAMS.
        streams: streams as u16,
    })?;
    let (write_rate, file_micros) = match ch.read(Some(READY_WAIT)).map_err(no_answer)? {
        Control::ProbeReady {
            write_rate,
            file_micros,
        } => (write_rate, file_micros),
        other => return Err(unexpected(other)),
    };
    count::send_streams(streams, block, || dial(Role::ProbeData))?;
    match ch.read(Some(COUNT_WAIT)).map_err(no_answer)? {
        Control::Probed { received, micros } => {
            FarMeasure::from_report(write_rate, file_micros, received, micros)
                .map(|m| (m, peer))
                .ok_or_else(|| {
                    lost(std::io::Error::other(
                        "the receiver counted no probe data (a firewall between the streams?)",
                    ))
                })
        }
        other => Err(unexpected(other)),
    }
}

/// A receiver's refusal as the error it is; anything else breaks the conversation.
fn unexpected(msg: Control) -> Error {
    match msg {
        Control::Error { code, message } => Error::Remote {
            side: "receiver",
            message,
            code,
        },
        other => ProtocolError::Unexpected(other.name().into()).into(),
    }
}

/// A receiver that closes the probe's connection or says nothing in time: one that does
/// not take probes (a stream receiver, a far end of `copy`).
fn no_answer(e: Error) -> Error {
    if !matches!(e, Error::Transport(_)) || crate::session::is_forged(&e) {
        return e;
    }
    let why = match is_tick(&e) {
        true => "no answer in time",
        false => "it closed the connection",
    };
    lost(std::io::Error::other(format!(
        "the receiver did not answer the probe ({why}): only a waiting `haul recv DIR` \
         answers one"
    )))
}
