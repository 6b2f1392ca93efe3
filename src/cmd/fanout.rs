//! `send` to a chain of receivers: the chain the first receiver gets, and the end of the
//! run, when every receiver has said what became of it.

use super::ticket::resolve_ticket;
use crate::config::TicketFrom;
use crate::error::{exit, Error, Result};
use crate::progress::{escape, ReplicaState};
use crate::protocol::{Chain, Hop, Outcome, Replica};
use crate::transport::Ticket;

/// How messages name the receiver of `ticket`: its first address.
pub(super) fn label(ticket: &Ticket) -> String {
    match ticket.addrs.first() {
        Some(a) => a.to_string(),
        None => "(no address)".into(),
    }
}

/// The chain after the first receiver (None for a single receiver).
pub(super) fn chain(rest: &[TicketFrom], encrypt: bool) -> Result<Option<Chain>> {
    if rest.is_empty() {
        return Ok(None);
    }
    let hops = rest
        .iter()
        .map(|t| {
            resolve_ticket(t).map(|t| Hop {
                label: label(&t),
                ticket: t.encode(),
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Some(Chain { hops, encrypt }))
}

/// Every receiver's state, first (which answered Done) included, in chain order; a hop
/// that said nothing counts as failed. None when the report is not of a fan-out.
pub(super) fn states(
    first: &str,
    chain: Option<&Chain>,
    replicas: &[Replica],
) -> Option<Vec<ReplicaState>> {
    let chain = chain?;
    let mut out = vec![ReplicaState {
        host: first.to_string(),
        error: None,
    }];
    for hop in &chain.hops {
        let said = replicas.iter().find(|r| r.host == hop.label);
        let error = match said.map(|r| &r.outcome) {
            Some(Outcome::Done(_)) => None,
            Some(Outcome::Failed { code, message }) => Some((message.clone(), *code)),
            None => Some((
                "no report reached the sender (the chain broke before it)".into(),
                exit::NETWORK,
            )),
        };
        out.push(ReplicaState {
            host: hop.label.clone(),
            error,
        });
    }
    Some(out)
}

/// Prints one error line per failed replica; the exit status is the first one's. A
/// `stream` cannot be resumed: a re-run sends all of it again.
pub(super) fn failed(states: &[ReplicaState], stream: bool) -> Result<()> {
    let mut code = None;
    let rerun = match stream {
        false => "re-run the same command to complete it",
        true => "a stream cannot be resumed: send it to that host again",
    };
    for s in states {
        if let Some((message, c)) = &s.error {
            eprintln!(
                "haul: error: replica {} failed: {}; the other replicas are complete ({rerun})",
                escape(&s.host),
                escape(message)
            );
            code.get_or_insert(*c);
        }
    }
    match code {
        Some(code) => Err(Error::Reported { code }),
        None => Ok(()),
    }
}
