//! One command across hosts: `haul copy SRC host:DST` (push), `haul copy host:SRC DST`
//! (pull) and `haul copy h1:SRC h2:DST` (remote to remote), like scp and rsync, while the
//! data still flows over haul's own parallel streams, not through ssh.
//!
//! **Participants.** The local `haul`; one far end per remote host, `haul serve` started
//! over the remote shell (`rsh`, `farend`), instructed over the ssh channel (`wire`),
//! running the same sender or receiver as `haul send`/`haul recv` (`serve`); the data
//! connections go directly or through ssh (`route`).
//!
//! **Who dials.** A far end listens on an ephemeral port and hands its ticket back through
//! the ssh channel; the local side dials it, whichever way the data goes (push: the local
//! sender dials the far receiver; pull: the local receiver dials N+1 connections to the far
//! sender and feeds them to `receive`). Remote to remote: the receiving far end listens, its
//! ticket goes to the sending far end's stdin, and the sender dials it directly, so no data
//! passes through the local host.
//!
//! **Firewalls.** When the direct connection cannot be made within the connect timeout,
//! the local side says so and carries each connection through `ssh -W 127.0.0.1:PORT`
//! instead (`--via-ssh` forces this). Not available remote to remote (see README).
//!
//! **Where things land.** rsync's rules, decided where the destination can be looked at:
//! the far receiver (push, remote to remote) or the local side (pull), told by the sender
//! side whether the source is one non-directory.
//!
//! Non-goals: rsync's daemon mode (`host::module`), a persistent remote service.

pub mod fanout;
pub mod farend;
pub mod pipe;
pub mod probe;
pub mod probe_between;
pub mod probe_source;
mod pull;
pub mod route;
pub mod rsh;
pub mod serve;
mod shared;
mod upload;
pub mod wire;

use std::path::PathBuf;
use std::time::Instant;

use crate::config::{RemoteCopy, RemotePath, SshOptions};
use crate::error::{exit, Error, Result};
use crate::plan::layout::is_single_file;
use crate::plan::walk::{self, Source};
use crate::progress::{dry_run_line, summary_line, summary_tail};
use crate::protocol::Accept;
use crate::receive::ReceiveReport;
use crate::send::{send, SendOptions, SendReport};

use fanout::First;
use farend::FarEnd;
use route::Route;
use rsh::Rsh;
pub use shared::Fanned;
use shared::{
    done_wait, prefer_far, receive_request, send_request, unexpected, FarOptions, DONE_WAIT,
    FAILED_WAIT,
};
use wire::Request;

/// How a remote copy ended, for the caller to report: the local side's report when it
/// sent or received (push, pull); remote to remote, the far ends reported already.
pub enum Outcome {
    /// Push: what the local sender reports (a fan-out's replicas included).
    Sent(SendReport),
    /// Pull: what the local receiver reports (in a fan-out, its error when it failed
    /// while the chain after it went on), and what became of a fan-out's replicas.
    Received(Result<ReceiveReport>, Fanned),
    /// Remote to remote: done, and summarised; the far sender's counts and what became
    /// of a fan-out's replicas.
    Between(Between),
}

/// Runs a remote copy with the sender options `opts` (`encrypt`: TLS on the data streams).
/// Errors from a far end carry its host name and exit code. `quiet`: no summary line for
/// a remote-to-remote copy (push and pull leave the summary to the caller).
pub fn run(
    plan: &RemoteCopy,
    opts: &SendOptions,
    encrypt: bool,
    accept: Accept,
    ssh: &SshOptions,
    quiet: bool,
) -> Result<Outcome> {
    let far = FarOptions {
        encrypt,
        accept,
        ssh,
        quiet,
    };
    // Remote to remote needs no tunnels, and two sessions to one host would race for one
    // shared connection.
    let share = match plan {
        RemoteCopy::Push { also, .. } => also.is_empty(),
        RemoteCopy::Pull { also, .. } => also.is_empty(),
        RemoteCopy::Between { .. } => false,
    };
    let rsh = Rsh::new(ssh.rsh.clone(), share);
    match plan {
        RemoteCopy::Push {
            sources,
            dest,
            also,
        } => push(&rsh, sources, dest, also, opts, &far).map(Outcome::Sent),
        RemoteCopy::Pull {
            sources,
            dest,
            also,
        } => pull::pull(&rsh, sources, dest, also, opts, &far)
            .map(|(r, fanned)| Outcome::Received(r, fanned)),
        RemoteCopy::Between {
            sources,
            dest,
            also,
        } => between(&rsh, sources, dest, also, opts, &far).map(Outcome::Between),
    }
}

fn push(
    rsh: &Rsh,
    sources: &[PathBuf],
    dest: &RemotePath,
    also: &[RemotePath],
    opts: &SendOptions,
    f: &FarOptions<'_>,
) -> Result<SendReport> {
    let mut srcs: Vec<Source> = sources.iter().map(|p| Source::from_arg(p)).collect();
    walk::check_sources(&srcs)?;
    let mut further = fanout::start(rsh, also, f.ssh, f.quiet, f.encrypt, |at| {
        receive_request(at, is_single_file(&srcs), (true, true), opts, f)
    })?;
    let chain = further.chain.clone();
    let fans = !also.is_empty();
    let request = receive_request(dest, is_single_file(&srcs), (false, fans), opts, f);
    let first = fanout::start_first(rsh, dest, f.ssh, f.quiet, &request, chain.is_some())?;
    // Err: the first destination could not be started (a failed replica; the chain
    // starts at the next).
    let (mut far, rename) = match first {
        First::Ready(far, ticket, port, rename) => {
            let route = Route::new(rsh, dest, ticket, port, f.encrypt, f.ssh.via_ssh);
            (Ok((far, route)), rename)
        }
        // Every further destination answered for a single file's name alike.
        First::Lost(e) => (Err(e), further.renames.first().and_then(|(_, r)| r.clone())),
    };
    if let Err(e) = fanout::same_name(&rename, &further.renames) {
        further.finish(FAILED_WAIT);
        return Err(e);
    }
    if let (Some(name), [only]) = (rename, srcs.as_mut_slice()) {
        only.dest_name = Some(name);
    }
    let opts = &SendOptions {
        chain,
        label: fanout::label(dest),
        ..opts.clone()
    };
    let sent = match &far {
        Ok((_, route)) => send(&srcs, opts, route.key(), |role| route.dial(role)),
        Err(lost) => send(&srcs, opts, [0; 32], |_| Err(fanout::unreachable(lost))),
    };
    let done = far
        .as_mut()
        .ok()
        .and_then(|(far, _)| far.finish(Some(done_wait(&sent))));
    // What became of the further ones is in the sender's report (`Replicas`), and of
    // those that could not be started, here.
    further.finish(FAILED_WAIT);
    let sent = sent.map(|mut report| {
        report.chain = further.account(&mut report.replicas);
        report
    });
    match &far {
        Ok((far, _)) => sent.map_err(|e| prefer_far(e, far, done.as_ref())),
        Err(_) => sent,
    }
}

/// The far destinations a local copy passes everything on to (`haul copy SRC... /DST
/// --also host2:DST`), started as a push's `--also` are: each listens on every address
/// (the local receiver dials the first, each the next).
pub struct Further {
    started: fanout::Started,
    /// The chain the local receiver gets (None: no far destination could be started).
    pub chain: Option<crate::protocol::Chain>,
}

impl Further {
    /// Starts a receiving far end at each of `also` for a copy of `sources` (`encrypt`:
    /// TLS between the hops); one that cannot be started is a failed replica.
    #[allow(clippy::too_many_arguments)]
    pub fn start(
        also: &[RemotePath],
        sources: &[Source],
        opts: &SendOptions,
        encrypt: bool,
        accept: Accept,
        ssh: &SshOptions,
        quiet: bool,
    ) -> Result<Further> {
        let f = FarOptions {
            encrypt,
            accept,
            ssh,
            quiet,
        };
        let rsh = Rsh::new(ssh.rsh.clone(), false);
        let single = is_single_file(sources);
        let started = fanout::start(&rsh, also, ssh, quiet, encrypt, |at| {
            receive_request(at, single, (true, true), opts, &f)
        })?;
        Ok(Further {
            chain: started.chain.clone(),
            started,
        })
    }

    /// A single file fans out under one name: `first`, the name the local destination
    /// stores it under (None: the source's, DST being a directory), is every one's.
    pub fn same_name(&self, first: &Option<Vec<u8>>) -> Result<()> {
        fanout::same_name(first, &self.started.renames)
    }

    /// What the report of the local sender (`report`) says of the fan-out: every far
    /// destination asked for in its chain, those that could not be started failed.
    pub fn account(&self, report: &mut SendReport) {
        report.chain = self.started.account(&mut report.replicas);
    }

    /// Waits briefly for each far end's end (what became of each is in the sender's
    /// report) and reaps it.
    pub fn finish(&mut self) {
        self.started.finish(FAILED_WAIT);
    }
}

/// What a remote-to-remote copy ended with: the far sender's `Done` (its counts, and
/// its partial error when it skipped files it could not read) and what became of a
/// fan-out's replicas.
pub struct Between {
    /// What became of the replicas (the first destination one of them, also when it
    /// could not be started).
    pub fanned: Fanned,
    /// The far sender's final word.
    pub done: farend::Done,
    /// When the copy started (for `--json`'s seconds).
    pub started: Instant,
    /// The far sender skipped files it could not read (its code and message).
    pub partial: Option<Error>,
}

fn between(
    rsh: &Rsh,
    sources: &[RemotePath],
    dest: &RemotePath,
    also: &[RemotePath],
    opts: &SendOptions,
    f: &FarOptions<'_>,
) -> Result<Between> {
    let started = Instant::now();
    // Both ssh sessions start at once: their set-up is most of the latency.
    let (sender, receiver) = std::thread::scope(|s| {
        let a = s.spawn(|| FarEnd::start(rsh, &sources[0], f.ssh, f.quiet));
        let b = FarEnd::start(rsh, dest, f.ssh, f.quiet);
        let a = a
            .join()
            .unwrap_or_else(|_| Err(Error::io("ssh", std::io::Error::other("panicked"))));
        (a, b)
    });
    let mut sender = sender?;
    sender.send(&send_request(sources, opts, false, None))?;
    let single_file = sender.ready("setting up the sender")?.single_file;
    let request = receive_request(dest, single_file, (true, !also.is_empty()), opts, f);
    // A first destination that cannot be started is a failed replica when further ones
    // can go on without it (as for a push): the far sender starts the chain at the next.
    let first = match receiver.and_then(|far| fanout::ready_first(far, &request)) {
        Ok((far, ticket, _, rename)) => Ok((far, ticket, rename)),
        Err(e @ (Error::Host { .. } | Error::Transport(_))) if !also.is_empty() => Err(e),
        Err(e) => return Err(e),
    };
    let mut further = fanout::start(rsh, also, f.ssh, f.quiet, f.encrypt, |at| {
        receive_request(at, single_file, (true, true), opts, f)
    })?;
    let chain = further.chain.clone();
    let label = fanout::label(dest);
    let go = match &first {
        // No destination could be started: the run fails as for one destination.
        Err(lost) if chain.is_none() => Err(fanout::unreachable(lost)),
        Ok((_, ticket, rename)) => {
            fanout::same_name(rename, &further.renames).map(|()| Request::Go {
                rename: rename.clone(),
                ticket: Some(ticket.encode()),
                encrypt: f.encrypt,
                chain: chain.clone(),
                label: label.clone(),
            })
        }
        Err(lost) => {
            crate::progress::warn(&format!(
                "replica {} failed ({lost}); the chain goes on without it",
                crate::progress::escape(&label)
            ));
            fanout::go_past_first(chain.as_ref(), &further.renames, f.encrypt)
        }
    };
    let sent = match go.and_then(|go| sender.send(&go)) {
        Ok(()) => sender.finish(None),
        Err(e) => {
            further.finish(FAILED_WAIT);
            return Err(e);
        }
    };
    let sent_ok = |d: &farend::Done| d.code == exit::OK || d.code == exit::PARTIAL;
    let ok = sent.as_ref().is_some_and(sent_ok);
    let received = match first {
        Ok((mut receiver, _, _)) => {
            let r = receiver.finish(Some(if ok { DONE_WAIT } else { FAILED_WAIT }));
            Ok((receiver, r))
        }
        Err(lost) => Err(lost),
    };
    further.finish(FAILED_WAIT);
    match (sent, received) {
        (Some(s), received) if sent_ok(&s) => {
            if !f.quiet {
                let to = match &received {
                    Ok((r, _)) => r.host.clone(),
                    Err(_) => label.clone(),
                };
                let st = &s.stats;
                match st.dry_run {
                    true => eprintln!("{}", dry_run_line(s.files, st.files_unchanged, s.deleted)),
                    false => eprintln!(
                        "{}{}",
                        summary_line(
                            &format!("copied {} -> {}:", sender.host, to),
                            s.files,
                            s.bytes,
                            Some(st.bytes_wire),
                            started,
                        ),
                        summary_tail(st.bytes_skipped, (0, 0), s.deleted)
                    ),
                }
            }
            let mut replicas = s.replicas.clone();
            if let (Err(lost), Some(chain)) = (&received, &chain) {
                replicas = fanout::past_first(&label, lost, chain, replicas);
            }
            let chain = further.account(&mut replicas);
            let partial = (s.code != exit::OK).then(|| sender.done_error(&s));
            Ok(Between {
                fanned: Fanned {
                    chain,
                    label,
                    replicas,
                },
                done: s,
                started,
                partial,
            })
        }
        (Some(s), Ok((receiver, r))) => {
            // "receiver: …" from the sender: the receiver's own Done says it with its host.
            if s.message.starts_with("receiver:") {
                if let Some(r) = r.filter(|r| r.code != exit::OK) {
                    return Err(receiver.done_error(&r));
                }
            }
            Err(between_error(&sender, &receiver.host, &s))
        }
        // The first could not be started: the far sender failed with the next one.
        (Some(s), Err(_)) => {
            let next = chain.as_ref().and_then(|c| c.hops.first());
            let to = next.map_or(label.as_str(), |h| h.label.as_str());
            Err(between_error(&sender, to, &s))
        }
        (None, Ok((receiver, Some(r)))) if r.code != exit::OK => Err(receiver.done_error(&r)),
        (None, _) => Err(Error::Host {
            host: sender.host.clone(),
            message: "the far end ended without confirming (see above)".into(),
            code: exit::NETWORK,
        }),
    }
}

/// The far sender's failure `s`; a network one says that it must reach `to` directly.
fn between_error(sender: &FarEnd, to: &str, s: &farend::Done) -> Error {
    let mut e = sender.done_error(s);
    if s.code == exit::NETWORK {
        if let Error::Host { message, .. } = &mut e {
            message.push_str(&format!(
                " ({} must reach {} directly for a remote-to-remote copy)",
                sender.host, to
            ));
        }
    }
    e
}
