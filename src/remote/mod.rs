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
pub mod route;
pub mod rsh;
pub mod serve;
mod upload;
pub mod wire;

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::config::{RemoteCopy, RemotePath, SshOptions, DEFAULT_TIMEOUT};
use crate::error::{exit, Error, Result};
use crate::plan::layout::{dest_layout, is_single_file};
use crate::plan::walk::{self, Source};
use crate::progress::{summary_line, summary_tail};
use crate::protocol::{Accept, Listing, SyncOptions};
use crate::receive::{receive, ReceiveOptions, ReceiveReport};
use crate::send::{send, SendOptions, SendReport};
use crate::store::Store;
use crate::transport::Ticket;

use fanout::First;
use farend::{Done, FarEnd};
use route::Route;
use rsh::Rsh;
use wire::Request;

/// How long the far end may take to say `Done` once the local part is over.
const DONE_WAIT: Duration = Duration::from_secs(30);
/// The same after the local part failed: the far end may be waiting for connections that
/// will never come, and has usually said why already if it was the one that failed.
const FAILED_WAIT: Duration = Duration::from_secs(3);

fn done_wait<T>(local: &Result<T>) -> Duration {
    if local.is_ok() {
        DONE_WAIT
    } else {
        FAILED_WAIT
    }
}

/// What every far end of one copy is started and told with.
struct FarOptions<'a> {
    /// TLS on the data streams.
    encrypt: bool,
    /// What a receiving far end keeps of the sender's metadata.
    accept: Accept,
    /// How to start far ends.
    ssh: &'a SshOptions,
    /// No messages but errors.
    quiet: bool,
}

/// How a remote copy ended, for the caller to report: the local side's report when it
/// sent or received (push, pull); remote to remote, the far ends reported already.
pub enum Outcome {
    /// Push: what the local sender reports.
    Sent(SendReport),
    /// Pull: what the local receiver reports.
    Received(ReceiveReport),
    /// Remote to remote: done, and summarised.
    Between,
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
        RemoteCopy::Pull { .. } => true,
        RemoteCopy::Between { .. } => false,
    };
    let rsh = Rsh::new(ssh.rsh.clone(), share);
    match plan {
        RemoteCopy::Push {
            sources,
            dest,
            also,
        } => push(&rsh, sources, dest, also, opts, &far).map(Outcome::Sent),
        RemoteCopy::Pull { sources, dest } => {
            pull(&rsh, sources, dest, opts, &far).map(Outcome::Received)
        }
        RemoteCopy::Between { sources, dest } => {
            between(&rsh, sources, dest, opts, &far).map(|()| Outcome::Between)
        }
    }
}

fn unexpected(far: &FarEnd, what: &str) -> Error {
    Error::Host {
        host: far.host.clone(),
        message: format!("unexpected answer from the far end ({what})"),
        code: exit::INTEGRITY,
    }
}

/// The local error, unless it only says the peer failed or vanished and the far end's
/// `Done` says why (that one names the cause and the host).
fn prefer_far(local: Error, far: &FarEnd, done: Option<&Done>) -> Error {
    let peer_side = matches!(local, Error::Remote { .. } | Error::Transport(_));
    match done {
        Some(d) if d.code != exit::OK && peer_side => far.done_error(d),
        _ => local,
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
    let (mut further, chain, renames) =
        fanout::start(rsh, also, f.ssh, f.quiet, f.encrypt, |at| {
            receive_request(at, is_single_file(&srcs), true, opts, f)
        })?;
    let request = receive_request(dest, is_single_file(&srcs), false, opts, f);
    let first = fanout::start_first(rsh, dest, f.ssh, f.quiet, &request, chain.is_some())?;
    // Err: the first destination could not be started (a failed replica; the chain
    // starts at the next).
    let (mut far, rename) = match first {
        First::Ready(far, ticket, port, rename) => {
            let route = Route::new(rsh, dest, ticket, port, f.encrypt, f.ssh.via_ssh);
            (Ok((far, route)), rename)
        }
        // Every further destination answered for a single file's name alike.
        First::Lost(e) => (Err(e), renames.first().cloned().flatten()),
    };
    fanout::same_name(&rename, also, &renames)?;
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
    // What became of the further ones is in the sender's report (`Replicas`).
    for f in &mut further {
        f.finish(Some(FAILED_WAIT));
    }
    match &far {
        Ok((far, _)) => sent.map_err(|e| prefer_far(e, far, done.as_ref())),
        Err(_) => sent,
    }
}

/// The far destinations a local copy passes everything on to (`haul copy SRC... /DST
/// --also host2:DST`), started as a push's `--also` are: each listens on every address
/// (the local receiver dials the first, each the next).
pub struct Further {
    fars: Vec<FarEnd>,
    /// The chain the local receiver gets.
    pub chain: Option<crate::protocol::Chain>,
    renames: Vec<fanout::Rename>,
}

impl Further {
    /// Starts a receiving far end at each of `also` for a copy of `sources` (`encrypt`:
    /// TLS between the hops).
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
        let (fars, chain, renames) = fanout::start(&rsh, also, ssh, quiet, encrypt, |at| {
            receive_request(at, single, true, opts, &f)
        })?;
        Ok(Further {
            fars,
            chain,
            renames,
        })
    }

    /// A single file fans out under one name: `first`, the name the local destination
    /// stores it under (None: the source's, DST being a directory), is every one's.
    pub fn same_name(&self, first: &Option<Vec<u8>>, also: &[RemotePath]) -> Result<()> {
        fanout::same_name(first, also, &self.renames)
    }

    /// Waits briefly for each far end's end (what became of each is in the sender's
    /// report) and reaps it.
    pub fn finish(mut self) {
        for f in &mut self.fars {
            f.finish(Some(FAILED_WAIT));
        }
    }
}

fn pull(
    rsh: &Rsh,
    sources: &[RemotePath],
    dest: &Path,
    opts: &SendOptions,
    f: &FarOptions<'_>,
) -> Result<ReceiveReport> {
    let at = &sources[0];
    let mut far = FarEnd::start(rsh, at, f.ssh, f.quiet)?;
    far.send(&send_request(sources, opts, true, f.ssh.advertise))?;
    let ready = far.ready("setting up the sender")?;
    let (ticket, port, single_file) = match ready.ticket {
        Some(ticket) => (ticket, ready.port, ready.single_file),
        None => return Err(unexpected(&far, "no ticket")),
    };
    let ticket = Ticket::parse(&ticket)?;
    let (root, rename) = dest_layout(single_file, dest);
    let store = match opts.sync.dry_run {
        true => Store::open_dry(&root)?,
        false => Store::open(&root)?,
    };
    store.set_accept(f.accept.clone())?;
    store.set_keep_cache(opts.keep_cache);
    far.send(&Request::Go {
        rename,
        ticket: None,
        encrypt: f.encrypt,
    })?;
    let route = Route::new(rsh, at, ticket, port, f.encrypt, f.ssh.via_ssh);
    let key = route.key();
    let streams = opts.streams;
    let (tx, rx) = crossbeam_channel::unbounded();
    let received = std::thread::scope(|s| {
        let route = &route;
        s.spawn(move || route.dial_into(streams, &tx));
        let opts = ReceiveOptions {
            progress: !f.quiet,
            timeout: DEFAULT_TIMEOUT,
            listing: opts.listing,
        };
        receive(store, key, rx, opts)
    });
    let done = far.finish(Some(done_wait(&received)));
    let report = match received {
        Ok(r) => r,
        Err(e) => return Err(prefer_far(e, &far, done.as_ref())),
    };
    match done {
        Some(d) if d.code != exit::OK && d.code != exit::PARTIAL => Err(far.done_error(&d)),
        Some(_) => Ok(report),
        None => Err(Error::Host {
            host: far.host.clone(),
            message: "the far end ended without confirming (see above)".into(),
            code: exit::NETWORK,
        }),
    }
}

/// What a receiving far end at `at` is told; `everywhere`: it is dialed by another far
/// host (a fan-out's further hop, a remote-to-remote receiver), not by this one.
fn receive_request(
    at: &RemotePath,
    single_file: bool,
    everywhere: bool,
    opts: &SendOptions,
    f: &FarOptions<'_>,
) -> Request {
    Request::Receive {
        dest: at.path_or_home(),
        single_file,
        advertise: f.ssh.advertise,
        everywhere,
        accept: f.accept.clone(),
        dry_run: opts.sync.dry_run,
        keep_cache: opts.keep_cache,
    }
}

fn send_request(
    sources: &[RemotePath],
    t: &SendOptions,
    listen: bool,
    advertise: Option<IpAddr>,
) -> Request {
    Request::Send {
        paths: sources.iter().map(RemotePath::path_or_home).collect(),
        // Lossless: validated to be at most MAX_STREAMS.
        streams: t.streams as u16,
        compress: t.compress.to_string(),
        block_size: t.block_size,
        // A pull's local receiver prints itself; remote to remote, the far sender does
        // (its stderr is shown here with its host name).
        sync: SyncOptions {
            items: !listen && t.listing.is_on(),
            ..t.sync
        },
        listen,
        advertise,
        select: t.select.clone(),
        limit: t.limit,
        listing: Listing {
            stderr: true,
            ..t.listing
        },
        keep_cache: t.keep_cache,
    }
}

fn between(
    rsh: &Rsh,
    sources: &[RemotePath],
    dest: &RemotePath,
    opts: &SendOptions,
    f: &FarOptions<'_>,
) -> Result<()> {
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
    let (mut sender, mut receiver) = (sender?, receiver?);
    sender.send(&send_request(sources, opts, false, None))?;
    let single_file = sender.ready("setting up the sender")?.single_file;
    receiver.send(&receive_request(dest, single_file, true, opts, f))?;
    let ready = receiver.ready("setting up the receiver")?;
    let (ticket, rename) = match ready.ticket {
        Some(ticket) => (ticket, ready.rename),
        None => return Err(unexpected(&receiver, "no ticket")),
    };
    sender.send(&Request::Go {
        rename,
        ticket: Some(ticket),
        encrypt: f.encrypt,
    })?;
    let sent = sender.finish(None);
    let ok = sent.as_ref().is_some_and(|d| d.code == exit::OK);
    let received = receiver.finish(Some(if ok { DONE_WAIT } else { FAILED_WAIT }));
    match (sent, received) {
        (Some(s), _) if s.code == exit::OK => {
            if !f.quiet {
                eprintln!(
                    "{}{}",
                    summary_line(
                        &format!("copied {} -> {}:", sender.host, receiver.host),
                        s.files,
                        s.bytes,
                        s.bytes,
                        started,
                    ),
                    summary_tail(0, s.deleted)
                );
            }
            Ok(())
        }
        (Some(s), r) => {
            // "receiver: …" from the sender: the receiver's own Done says it with its host.
            if s.message.starts_with("receiver:") {
                if let Some(r) = r.filter(|r| r.code != exit::OK) {
                    return Err(receiver.done_error(&r));
                }
            }
            let mut e = sender.done_error(&s);
            if s.code == exit::NETWORK {
                if let Error::Host { message, .. } = &mut e {
                    message.push_str(&format!(
                        " ({} must reach {} directly for a remote-to-remote copy)",
                        sender.host, receiver.host
                    ));
                }
            }
            Err(e)
        }
        (None, Some(r)) if r.code != exit::OK => Err(receiver.done_error(&r)),
        (None, _) => Err(Error::Host {
            host: sender.host.clone(),
            message: "the far end ended without confirming (see above)".into(),
            code: exit::NETWORK,
        }),
    }
}
