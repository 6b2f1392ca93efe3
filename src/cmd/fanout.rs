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

/// The chain after the `first` receiver (None for a single receiver). A receiver named
/// twice (by its secret, whatever addresses each ticket lists) is refused: it would be
/// dialed by the hop before it as a second sender, or by itself.
pub(super) fn chain(first: &Ticket, rest: &[TicketFrom], encrypt: bool) -> Result<Option<Chain>> {
    if rest.is_empty() {
        return Ok(None);
    }
    let mut seen = vec![first.secret.block_key()];
    let mut hops = Vec::new();
    for t in rest {
        let t = resolve_ticket(t)?;
        let hop = Hop {
            label: label(&t),
            ticket: t.encode(),
        };
        if seen.contains(&t.secret.block_key()) {
            return Err(Error::Usage(format!(
                "the receiver at {} is named twice in the fan-out; give each receiver once",
                escape(&hop.label)
            )));
        }
        seen.push(t.secret.block_key());
        hops.push(hop);
    }
    Ok(Some(Chain {
        hops,
        encrypt,
        nonce: None,
    }))
}

/// Every receiver's state, first included, in chain order; a hop that said nothing
/// counts as failed, the first as complete unless the sender reported it failed (it
/// answered Done, or the run failed). None when the report is not of a fan-out.
pub(super) fn states(
    first: &str,
    chain: Option<&Chain>,
    replicas: &[Replica],
) -> Option<Vec<ReplicaState>> {
    let chain = chain?;
    let said = replicas.iter().find(|r| r.host == first);
    let mut out = vec![ReplicaState {
        host: first.to_string(),
        error: match said.map(|r| &r.outcome) {
            Some(Outcome::Failed { code, message }) => Some((message.clone(), *code)),
            _ => None,
        },
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

/// Every receiver's state for a fan-out whose sender is a far end (a pull, remote to
/// remote), as its `Done` reported them; `local`: the local first receiver's own error
/// (more precise than what the sender saw of it). None when not a fan-out.
pub(super) fn far_states(
    fanned: &crate::remote::Fanned,
    local: Option<&Error>,
) -> Option<Vec<ReplicaState>> {
    let mut replicas = fanned.replicas.clone();
    if let Some(e) = local {
        own_error(&mut replicas, &fanned.label, e);
    }
    states(&fanned.label, fanned.chain.as_ref(), &replicas)
}

/// A remote-to-remote copy's `--json` report: the far sender's counts (its `Done`).
pub(super) fn far_report(
    done: &crate::remote::farend::Done,
    started: std::time::Instant,
) -> crate::progress::Report {
    let s = &done.stats;
    crate::progress::Report {
        files: done.files,
        files_unchanged: s.files_unchanged,
        bytes_read: s.bytes_read,
        bytes_wire: s.bytes_wire,
        bytes_skipped: s.bytes_skipped,
        bytes_written: done.bytes,
        deleted: done.deleted,
        failed_files: s.failed_files,
        changed_files: s.changed_files,
        reconnects: s.reconnects,
        seconds: started.elapsed().as_secs_f64(),
        stream_blake3: None,
        codec_units: None,
        replicas: None,
        congestion: None,
    }
}

/// A remote-to-remote copy's `--stats`: the far sender's totals (its `Done`).
pub(super) fn far_stats(done: &crate::remote::farend::Done) -> crate::progress::Stats {
    let s = &done.stats;
    crate::progress::Stats {
        entries: s.entries,
        regular: s.regular,
        dirs: s.dirs,
        transferred: done.files,
        deleted: done.deleted,
        total_size: s.total_size,
        transferred_size: s.transferred_size,
        literal: done.bytes,
        matched: s.matched,
        skipped: s.bytes_skipped,
        wire: s.bytes_wire,
        dry_run: s.dry_run,
    }
}

/// A local first receiver that failed said why itself (a full disk: exit 4), more
/// precisely than the sender, which only saw it go: its error replaces the sender's.
pub(super) fn own_error(replicas: &mut Vec<Replica>, host: &str, e: &Error) {
    replicas.retain(|r| r.host != host);
    replicas.push(Replica {
        host: host.to_string(),
        outcome: Outcome::Failed {
            code: e.exit_code(),
            message: e.to_string(),
        },
        proof: None,
    });
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::Secret;

    fn ticket(port: u16, secret: u8) -> Ticket {
        Ticket {
            addrs: vec![std::net::SocketAddr::from(([127, 0, 0, 1], port))],
            fingerprint: [0; 32],
            secret: Secret::from_bytes([secret; 32]),
        }
    }

    #[test]
    fn a_failed_first_receiver_is_reported_with_its_code() {
        let hop = |l: &str| Hop {
            label: l.into(),
            ticket: format!("t{l}"),
        };
        let chain = Chain {
            hops: vec![hop("b"), hop("c")],
            encrypt: true,
            nonce: None,
        };
        let done = |h: &str| Replica {
            host: h.into(),
            outcome: Outcome::Done(crate::protocol::Summary::default()),
            proof: None,
        };
        let first_failed = Replica {
            host: "a".into(),
            outcome: Outcome::Failed {
                code: exit::NETWORK,
                message: "gone".into(),
            },
            proof: None,
        };
        let s = states("a", Some(&chain), &[first_failed, done("b"), done("c")]).unwrap();
        let errs: Vec<bool> = s.iter().map(|s| s.error.is_some()).collect();
        assert_eq!(errs, [true, false, false]);
        assert!(
            matches!(failed(&s, false), Err(Error::Reported { code }) if code == exit::NETWORK)
        );
        // The first answered Done (and says so), the others reported.
        let s = states("a", Some(&chain), &[done("a"), done("b"), done("c")]).unwrap();
        assert!(s.iter().all(|s| s.error.is_none()));
        assert!(failed(&s, false).is_ok());
    }

    #[test]
    fn a_receiver_named_twice_is_refused() {
        let given = |t: &Ticket| TicketFrom::Given(Box::new(t.clone()));
        let (a, b, c) = (ticket(1, 1), ticket(2, 2), ticket(3, 3));
        let ok = chain(&a, &[given(&b), given(&c)], true).unwrap().unwrap();
        assert_eq!(ok.hops.len(), 2);
        assert_eq!(ok.hops[0].label, "127.0.0.1:2");
        assert!(chain(&a, &[given(&b), given(&a)], true).is_err());
        assert!(chain(&a, &[given(&b), given(&b)], true).is_err());
        assert!(chain(&a, &[], true).unwrap().is_none());
    }
}
