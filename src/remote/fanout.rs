//! `haul copy SRC... host1:DST --also host2:DST …`: a push whose first far receiver
//! passes everything on to the next (a chain fan-out). Every far end is started over ssh
//! as for a push; the further ones listen on every address (the host before them dials
//! them directly, not through ssh) and their tickets go to the first as the chain. One
//! source file is stored under one name everywhere: every DST an existing directory, or
//! every DST naming the same file name (each hop stores what the first passes on, under
//! the name the sender gave it).
//!
//! A destination that cannot start (ssh fails, its `haul serve` refuses DST or never gets
//! ready), the first too, is a failed replica from the start in every form: reported, left
//! out of the chain and listed failed with its code (`Started::account`); the others
//! complete. A local first destination (`cmd/local`) is an in-process relay over socket
//! pairs, failing with its own error (`cmd::fanout::own_error`); a far source gets the
//! chain in `Go` and fans out as `haul send` does. Refused (exit 2,
//! `config::fanout::no_chain`): a local further destination, a stream from a host or on
//! this host, one source file under different names.

use super::farend::FarEnd;
use super::rsh::Rsh;
use super::wire::Request;
use crate::config::{RemotePath, SshOptions};
use crate::error::{Error, Result};
use crate::progress::escape;
use crate::protocol::{Chain, Hop, Outcome, Replica, Summary};
use crate::transport::Ticket;

/// How messages and `--json` name a destination of a fan-out: `host:path`.
pub fn label(at: &RemotePath) -> String {
    format!("{}:{}", at.host, String::from_utf8_lossy(&at.path))
}

/// The further destinations of a fan-out (`--also`), as far as they could be started.
pub(super) struct Started {
    /// The far ends that listen, in chain order.
    pub(super) fars: Vec<FarEnd>,
    /// The chain of those that listen (None: none was asked for, or none listens).
    pub(super) chain: Option<Chain>,
    /// Each one that listens: its label and the name it would store a single file under.
    pub(super) renames: Vec<(String, Rename)>,
    /// Every destination asked for, in order, and why each that could not be started
    /// failed: a failed replica, as one dropped mid-run is.
    asked: Vec<(String, Option<Outcome>)>,
    encrypt: bool,
}

/// Starts a receiving far end at each of `also`, told `receive(at)`. One that cannot be
/// started (ssh fails, its `haul serve` refuses or does not get ready: a destination it
/// may not write, a host it cannot reach) is a failed replica: reported, left out of the
/// chain, and the others go on without it, as when a hop fails mid-run.
pub(super) fn start(
    rsh: &Rsh,
    also: &[RemotePath],
    ssh: &SshOptions,
    quiet: bool,
    encrypt: bool,
    receive: impl Fn(&RemotePath) -> Request,
) -> Result<Started> {
    let mut started = Started {
        fars: Vec::new(),
        chain: None,
        renames: Vec::new(),
        asked: Vec::new(),
        encrypt,
    };
    let mut hops = Vec::new();
    for at in also {
        let label = label(at);
        match start_one(rsh, at, ssh, quiet, &receive(at)) {
            Ok((far, ticket, rename)) => {
                started.renames.push((label.clone(), rename));
                hops.push(Hop {
                    label: label.clone(),
                    ticket,
                });
                started.fars.push(far);
                started.asked.push((label, None));
            }
            Err(e @ (Error::Host { .. } | Error::Transport(_))) => {
                crate::progress::warn(&format!(
                    "replica {} failed ({e}); the chain goes on without it",
                    escape(&label)
                ));
                let failed = Outcome::Failed {
                    code: e.exit_code(),
                    message: e.to_string(),
                };
                started.asked.push((label, Some(failed)));
            }
            Err(e) => return Err(e),
        }
    }
    started.chain = (!hops.is_empty()).then_some(Chain {
        hops,
        encrypt,
        nonce: None,
    });
    Ok(started)
}

/// Starts one further destination: its far end, its ticket and the name it would store
/// a single file under.
fn start_one(
    rsh: &Rsh,
    at: &RemotePath,
    ssh: &SshOptions,
    quiet: bool,
    request: &Request,
) -> Result<(FarEnd, String, Rename)> {
    let mut far = FarEnd::start(rsh, at, ssh, quiet)?;
    far.send(request)?;
    let ready = far.ready("setting up a further receiver")?;
    let ticket = ready.ticket.ok_or_else(|| Error::Host {
        host: far.host.clone(),
        message: "unexpected answer from the far end (no ticket)".into(),
        code: crate::error::exit::INTEGRITY,
    })?;
    Ok((far, ticket, ready.rename))
}

impl Started {
    /// What a report says of the fan-out, given the account of the sender (`replicas`):
    /// the chain of every destination asked for, in order, and the account with each
    /// that could not be started as failed. (Only labels matter there: a report's chain is never dialed.)
    pub(super) fn account(&self, replicas: &mut Vec<Replica>) -> Option<Chain> {
        if self.asked.is_empty() {
            return None;
        }
        let mut hops = Vec::new();
        for (label, failed) in &self.asked {
            hops.push(Hop {
                label: label.clone(),
                ticket: String::new(),
            });
            if let Some(outcome) = failed {
                replicas.retain(|r| &r.host != label);
                replicas.push(Replica {
                    host: label.clone(),
                    outcome: outcome.clone(),
                    proof: None,
                });
            }
        }
        Some(Chain {
            hops,
            encrypt: self.encrypt,
            nonce: None,
        })
    }

    /// Waits briefly for each far end's end (what became of each is in the sender's
    /// report) and reaps it.
    pub(super) fn finish(&mut self, wait: std::time::Duration) {
        for f in &mut self.fars {
            f.finish(Some(wait));
        }
    }
}

/// The first destination of a fan-out, as far as it could be started.
pub(super) enum First {
    /// Its far end listens: its ticket, its port on its own loopback, and the name it
    /// would store a single file under.
    Ready(FarEnd, Ticket, Option<u16>, Rename),
    /// It could not be started (ssh failed, or its `haul serve` did not get ready) while
    /// further destinations can go on without it: the sender reports it as a failed
    /// replica and starts the chain at the next one.
    Lost(Error),
}

/// Starts the first destination `dest`, told `request`. When that fails and `chained`
/// (further destinations were started), the failure is the first replica's, not the run's.
pub(super) fn start_first(
    rsh: &Rsh,
    dest: &RemotePath,
    ssh: &SshOptions,
    quiet: bool,
    request: &Request,
    chained: bool,
) -> Result<First> {
    let started = FarEnd::start(rsh, dest, ssh, quiet).and_then(|far| ready_first(far, request));
    match started {
        Ok((far, ticket, port, rename)) => Ok(First::Ready(far, ticket, port, rename)),
        Err(e @ (Error::Host { .. } | Error::Transport(_))) if chained => Ok(First::Lost(e)),
        Err(e) => Err(e),
    }
}

/// Tells a started first destination `request` and waits until it listens: its far end,
/// ticket, port on its own loopback and the name it would store a single file under.
pub(super) fn ready_first(
    mut far: FarEnd,
    request: &Request,
) -> Result<(FarEnd, Ticket, Option<u16>, Rename)> {
    far.send(request)?;
    let ready = far.ready("setting up the receiver")?;
    let Some(ticket) = ready.ticket else {
        return Err(Error::Host {
            host: far.host.clone(),
            message: "unexpected answer from the far end (no ticket)".into(),
            code: crate::error::exit::INTEGRITY,
        });
    };
    let ticket = Ticket::parse(&ticket)?;
    Ok((far, ticket, ready.port, ready.rename))
}

/// A far sender's `Go` when the first destination could not be started: the chain
/// starts at the next one (its ticket, its label, the hops after it), and a single file
/// gets the name every further destination answered alike.
pub(super) fn go_past_first(
    chain: Option<&Chain>,
    renames: &[(String, Rename)],
    encrypt: bool,
) -> Result<Request> {
    let Some((next, rest)) = chain.and_then(|c| c.hops.split_first()) else {
        return Err(Error::Usage(
            "no destination left to start the chain at".into(),
        ));
    };
    let rename = renames.first().and_then(|(_, r)| r.clone());
    same_name(&rename, renames.get(1..).unwrap_or_default())?;
    Ok(Request::Go {
        rename,
        ticket: Some(next.ticket.clone()),
        encrypt,
        chain: (!rest.is_empty()).then(|| Chain {
            hops: rest.to_vec(),
            encrypt,
            nonce: None,
        }),
        label: next.label.clone(),
    })
}

/// What became of the replicas when the first destination (`first`) could not be
/// started and the far sender began at the next one: `first` failed with `lost`, then
/// the far sender's account (`replicas`, of its own first and chain), in which the next
/// one, when not named, is complete (a sender lists its first only when it failed or
/// when a chain came after it).
pub(super) fn past_first(
    first: &str,
    lost: &Error,
    chain: &Chain,
    replicas: Vec<Replica>,
) -> Vec<Replica> {
    let mut out = vec![Replica {
        host: first.to_string(),
        outcome: Outcome::Failed {
            code: lost.exit_code(),
            message: lost.to_string(),
        },
        proof: None,
    }];
    if let Some(next) = chain.hops.first() {
        if !replicas.iter().any(|r| r.host == next.label) {
            out.push(Replica {
                host: next.label.clone(),
                outcome: Outcome::Done(Summary::default()),
                proof: None,
            });
        }
    }
    out.extend(replicas);
    out
}

/// What every attempt to reach a first destination that could not be started fails with
/// (`lost`'s words and code; the sender reports it once and goes on with the next).
pub(super) fn unreachable(lost: &Error) -> Error {
    match lost {
        Error::Host {
            host,
            message,
            code,
        } => Error::Host {
            host: host.clone(),
            message: message.clone(),
            code: *code,
        },
        other => Error::Remote {
            side: "receiver",
            message: other.to_string(),
            code: other.exit_code(),
        },
    }
}

/// The name a destination would store a single file under, when not the source's.
pub(super) type Rename = Option<Vec<u8>>;

/// A single file fans out under one name: `first` is what the first destination would
/// store it as (`None`: the source's name, DST being a directory), `renames` the same for
/// each further destination (by its label).
pub(super) fn same_name(first: &Rename, renames: &[(String, Rename)]) -> Result<()> {
    let shown = |r: &Rename| match r {
        Some(name) => format!("names the file {}", String::from_utf8_lossy(name)),
        None => "is a directory".to_string(),
    };
    match renames.iter().find(|(_, r)| r != first) {
        None => Ok(()),
        Some((at, r)) => Err(Error::Usage(escape(&format!(
            "--also {at}: a file fans out under one name: this DST {}, the first {} (give every \
             destination the same file name, or existing directories)",
            shown(r),
            shown(first)
        )))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(host: &str, path: &str) -> RemotePath {
        RemotePath {
            user: None,
            host: host.into(),
            path: path.as_bytes().to_vec(),
        }
    }

    #[test]
    fn one_name_everywhere() {
        let also = [label(&at("b", "/x/new.img")), label(&at("c", "/y/new.img"))];
        let with =
            |r: [Rename; 2]| -> Vec<(String, Rename)> { also.iter().cloned().zip(r).collect() };
        let new = Some(b"new.img".to_vec());
        assert!(same_name(&new, &with([new.clone(), new.clone()])).is_ok());
        assert!(same_name(&None, &with([None, None])).is_ok());
        let e = same_name(&new, &with([new.clone(), None])).unwrap_err();
        assert!(e.to_string().contains("c:/y/new.img"), "{e}");
        assert!(e.to_string().contains("is a directory"), "{e}");
        let odd = Some(b"a\nb".to_vec());
        let e = same_name(&new, &with([odd, new.clone()])).unwrap_err();
        assert!(!e.to_string().contains('\n'), "{e}");
    }
}
