//! The commands, wired from the library's parts: `recv` (listener + receiver), `send`
//! (dialer + sender), `copy` (both in one process over socket pairs, no network hop, no
//! TLS; or, with a `host:path`, between hosts: see `remote`) and the hidden `serve` (the
//! far end of a remote copy).

mod docs;
mod fanout;
mod json_out;
mod local;
mod object;
mod pipe;
mod probe;
mod shards;
mod sst;
mod sst_proc;
mod ticket;

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::config::{Command, Config, TicketFrom, Transfer, DEFAULT_TIMEOUT};
use crate::error::{Error, Result};
use crate::plan::walk::Source;
use crate::progress::{dry_run_line, summary_line, summary_tail, Counters, Stats};
use crate::protocol::{Accept, Listing, Summary, SyncOptions};
use crate::receive::probe::{incoming_answering_probes, ProbeDesk};
use crate::receive::{receive, ReceiveOptions, ReceiveReport};
use crate::remote::Outcome;
use crate::send::{send, ticket_dialer, SendOptions, SendReport};
use crate::store::Store;
use crate::transport::Listener;
use ticket::{resolve_ticket, write_ticket_file};

/// Runs the configured command. `Ok` means everything arrived; a partial transfer is
/// `Err(Error::Partial)`.
pub fn run(cfg: &Config) -> Result<()> {
    lift_descriptor_limit();
    crate::progress::set_asked(cfg.progress && !cfg.quiet);
    // `serve` speaks on its wire.
    let json = cfg.json && !matches!(cfg.command, Command::Serve { .. });
    let on_stderr = pipe::stream_on_stdout(&cfg.command);
    if json {
        crate::signals::last_word(move |sig, code| {
            json_out::print(
                &crate::progress::failure_json(&format!("stopped by {sig}"), code),
                on_stderr,
            )
        });
    }
    let r = run_command(cfg);
    if json {
        json_out::finish(&r, on_stderr);
    }
    r
}

/// Takes the hard limit on open descriptors as the soft one (as Go's runtime does): the
/// sender holds each source directory open until its files are sent (`plan::beneath`),
/// and `haul send dir1/ ... dir5000/` must not run out at the usual soft 1024.
fn lift_descriptor_limit() {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let mut limit = getrlimit(Resource::Nofile);
    if limit.current < limit.maximum {
        limit.current = limit.maximum;
        // Not lifted: the default stays, and only a very long list of sources can tell.
        let _ = setrlimit(Resource::Nofile, limit);
    }
}

fn run_command(cfg: &Config) -> Result<()> {
    match &cfg.command {
        Command::Recv {
            dir,
            listen,
            ticket_file,
            timeout,
            relay,
            accept,
        } => run_recv(
            dir,
            *listen,
            ticket_file.as_deref(),
            (*timeout, *relay),
            accept.clone(),
            cfg,
        ),
        Command::Send {
            paths,
            ticket,
            chain,
            transfer,
        } => run_send(paths, ticket, chain, transfer, cfg),
        Command::RecvPipe {
            to,
            listen,
            ticket_file,
            timeout,
            relay,
            window,
        } => pipe::run_recv_pipe(
            to,
            *listen,
            ticket_file.as_deref(),
            (*timeout, *relay),
            *window,
            cfg,
        ),
        Command::SendPipe {
            from,
            ticket,
            chain,
            transfer,
            pipe,
        } => pipe::run_send_pipe(from, (ticket, chain), transfer, pipe, cfg),
        Command::CopyPipe {
            plan,
            transfer,
            pipe,
            ssh,
        } => pipe::run_copy_pipe(plan, transfer, pipe, ssh, cfg),
        Command::Copy {
            sources,
            dest,
            transfer,
            accept,
            also,
        } => {
            let opts = send_options(transfer, cfg, false);
            let (report, states) = match also {
                None => (
                    local::copy(sources, dest, transfer, accept, cfg, opts)?,
                    None,
                ),
                Some((also, ssh)) => {
                    local::copy_also(sources, dest, transfer, accept, also, ssh, cfg, opts)?
                }
            };
            finish_send(&report, states, cfg)
        }
        Command::Object(job) => object::run(job, cfg),
        Command::Remote {
            plan,
            transfer,
            ssh,
            accept,
        } => {
            let outgoing = !matches!(plan, crate::config::RemoteCopy::Pull { .. });
            let opts = send_options(transfer, cfg, outgoing);
            match crate::remote::run(
                plan,
                &opts,
                transfer.encrypt,
                accept.clone(),
                ssh,
                cfg.quiet,
            )? {
                Outcome::Sent(report) => {
                    let first = match plan {
                        crate::config::RemoteCopy::Push { dest, .. } => {
                            crate::remote::fanout::label(dest)
                        }
                        _ => String::new(),
                    };
                    {
                        let states =
                            fanout::states(&first, report.chain.as_ref(), &report.replicas);
                        finish_send(&report, states, cfg)
                    }
                }
                Outcome::Received(report, fanned) => {
                    let states = fanout::far_states(&fanned, report.as_ref().err());
                    match report {
                        Ok(report) => finish_recv(&report, states, cfg),
                        // The local replica failed, the chain after it went on.
                        Err(_) => {
                            if cfg.json {
                                let j = crate::progress::Report {
                                    replicas: states.clone(),
                                    ..Default::default()
                                };
                                json_out::hold(j.to_json(), false);
                            }
                            fanout::failed(states.as_deref().unwrap_or_default(), false)
                        }
                    }
                }
                Outcome::Between(between) => {
                    let states = fanout::far_states(&between.fanned, None);
                    if cfg.stats {
                        print_stats(&fanout::far_stats(&between.done), cfg);
                    }
                    if cfg.json {
                        let mut j = fanout::far_report(&between.done, between.started);
                        j.replicas = states.clone();
                        json_out::hold(j.to_json(), false);
                    }
                    fanout::failed(states.as_deref().unwrap_or_default(), false)?;
                    match between.partial {
                        Some(e) => Err(e),
                        None => Ok(()),
                    }
                }
            }
        }
        Command::Plan(job) => shards::run(job, cfg),
        Command::Limit { rate, pid } => run_limit(*rate, *pid),
        Command::Probe(p, ssh) => probe::run_probe(p, ssh, cfg),
        Command::Completions(shell) => docs::completions(*shell, &mut std::io::stdout().lock()),
        Command::Man => docs::man(&mut std::io::stdout().lock()),
        Command::Sst(job) => sst::run(job),
        Command::Serve { probe: true, .. } => {
            let mut out = std::io::stdout().lock();
            writeln!(out, "{}", crate::remote::wire::greeting(None))
                .and_then(|()| out.flush())
                .map_err(|e| Error::io("writing to stdout", e))
        }
        Command::Serve {
            probe: false,
            uploaded,
        } => match crate::remote::serve::run(*uploaded) {
            // The far end already said everything on its stdout; only the code is left.
            0 => Ok(()),
            code => Err(Error::Reported { code }),
        },
    }
}

/// `haul limit`: tells a running sender of this user its new cap. Sockets nothing listens
/// on (their sender died) are removed and do not count; one that another user or process
/// holds is never told anything.
fn run_limit(rate: Option<u64>, pid: Option<u32>) -> Result<()> {
    use crate::send::pace::control::{self, place::Reach, Place};
    let usage = |m: String| Error::Usage(m);
    let place = Place::open().map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            usage(format!("no running haul transfer of yours found ({e})"))
        } else {
            usage(format!("cannot look for your transfers: {e}"))
        }
    })?;
    let (pid, stream) = match pid {
        Some(p) => match place.reach(p) {
            Ok(Reach::Live(s)) => (p, s),
            Ok(r @ (Reach::Stale | Reach::Gone)) => {
                if matches!(r, Reach::Stale) {
                    place.remove(&control::place::name(p));
                }
                return Err(usage(format!(
                    "no running haul transfer of yours has pid {p} (in {})",
                    place.shown().display()
                )));
            }
            Ok(Reach::Refused(why)) => return Err(usage(why)),
            Err(e) => {
                return Err(usage(format!(
                    "cannot reach the transfer with pid {p}: {e}"
                )))
            }
        },
        None => {
            let (mut live, refused) = place.senders();
            for why in &refused {
                crate::progress::warn(why);
            }
            match live.len() {
                1 => live.remove(0),
                0 => {
                    return Err(usage(match refused.first() {
                        Some(why) => why.clone(),
                        None => format!(
                            "no running haul transfer of yours found (in {})",
                            place.shown().display()
                        ),
                    }))
                }
                _ => {
                    let list: Vec<String> = live.iter().map(|(p, _)| p.to_string()).collect();
                    return Err(usage(format!(
                        "several transfers run (pids {}): say which with --pid",
                        list.join(", ")
                    )));
                }
            }
        }
    };
    let reply = control::tell(stream, rate)
        .map_err(|e| usage(format!("cannot reach the transfer with pid {pid}: {e}")))?;
    if !reply.starts_with("ok") {
        return Err(usage(format!("the transfer with pid {pid} said: {reply}")));
    }
    Ok(())
}

/// The sender's options for a transfer configured as `t`; `outgoing`: the data leaves
/// this host (`<` in `-i` lines). The sender prints the changes the receiver reports.
fn send_options(t: &Transfer, cfg: &Config, outgoing: bool) -> SendOptions {
    let listing = Listing {
        outgoing,
        ..cfg.listing
    };
    SendOptions {
        streams: t.streams,
        compress: t.compress,
        block_size: t.block_size,
        progress: !cfg.quiet,
        sync: SyncOptions {
            items: listing.is_on(),
            ..t.sync
        },
        retries: t.retries,
        listing,
        select: crate::plan::select::Selection {
            quiet: cfg.quiet,
            ..t.select.clone()
        },
        limit: t.limit,
        keep_cache: cfg.keep_cache,
        chain: None,
        label: String::new(),
        stall: t.stall,
        congestion: t.congestion.clone(),
    }
}

/// `--stats`' lines: on stdout, or on stderr where stdout carries `--json` or a ticket.
fn print_stats(stats: &Stats, cfg: &Config) {
    let text = stats.text();
    match cfg.listing.stderr || matches!(cfg.command, Command::Recv { .. }) {
        true => eprintln!("{text}"),
        false => crate::stdio::println(&text),
    }
}

/// The end of a file transfer: the summary line (or a dry run's), `--stats`.
fn print_end(verb: &str, s: &Summary, c: &Counters, started: Instant, cfg: &Config) {
    let load = |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
    if cfg.stats {
        let stats = Stats {
            entries: load(&c.entries),
            // rsync's meanings: every name of a regular file, and its length.
            regular: load(&c.total_files) + load(&c.links),
            dirs: load(&c.dirs),
            transferred: s.files,
            deleted: s.deleted,
            total_size: load(&c.file_size),
            transferred_size: s.transferred_size,
            literal: s.bytes,
            matched: s.matched,
            skipped: s.unchanged_bytes,
            wire: load(&c.wire_bytes),
            dry_run: s.dry_run,
        };
        print_stats(&stats, cfg);
    }
    if cfg.quiet {
        return;
    }
    if s.dry_run {
        eprintln!("{}", dry_run_line(s.files, s.unchanged_files, s.deleted));
        return;
    }
    let bytes = match verb {
        "sent" => load(&c.done_bytes),
        _ => s.bytes,
    };
    // A copy on this host has no wire (its socket pairs carry frames all the same).
    let here = matches!(cfg.command, Command::Copy { also: None, .. });
    let wire = (!here).then(|| load(&c.wire_bytes));
    let line = summary_line(verb, s.files, bytes, wire, started);
    // Only the receiver knows what it resumed: its summary says (also across the network).
    let resumed = (s.resumed_files, s.resumed_bytes);
    eprintln!(
        "{line}{}",
        summary_tail(s.unchanged_bytes, resumed, s.deleted)
    );
}

fn run_recv(
    dir: &Path,
    listen: Option<SocketAddr>,
    ticket_file: Option<&Path>,
    (timeout, relay): (Option<std::time::Duration>, bool),
    accept: Accept,
    cfg: &Config,
) -> Result<()> {
    let quiet = cfg.quiet;
    // Fail on an unwritable destination before printing a ticket.
    let store = Store::open(dir)?;
    store.set_accept(accept)?;
    store.set_keep_cache(cfg.keep_cache);
    let listener = Listener::bind(listen)?;
    let ticket = listener.ticket();
    let line = ticket.encode();
    if let Some(f) = ticket_file {
        write_ticket_file(f, &line)?;
    }
    {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
    }
    let key = ticket.secret.block_key();
    let (_handle, accepted) = listener.spawn_acceptor();
    let desk = ProbeDesk {
        dir: store.root_dup().map_err(|e| Error::destination(dir, e))?,
        path: dir.to_path_buf(),
        quiet,
    };
    let rx = incoming_answering_probes(accepted, desk)?;
    let opts = ReceiveOptions {
        progress: !quiet,
        timeout: timeout.unwrap_or(DEFAULT_TIMEOUT),
        relay,
        first: timeout,
        outcome_key: ticket.secret.outcome_key(),
        // Its stdout is the ticket's.
        listing: Listing {
            stderr: true,
            ..cfg.listing
        },
    };
    let report = receive(store, key, rx, opts)?;
    finish_recv(&report, None, cfg)
}

/// Prints the receiver's summary (and JSON report); the partial error when the sender
/// skipped files.
/// Prints the receiver's summary (and JSON report); a failed replica of a fan-out (a
/// pull's), or the partial error when the sender skipped files.
fn finish_recv(
    report: &ReceiveReport,
    replicas: Option<Vec<crate::progress::ReplicaState>>,
    cfg: &Config,
) -> Result<()> {
    print_end(
        "received",
        &report.summary,
        &report.counters,
        report.started,
        cfg,
    );
    if cfg.json {
        let mut j = report.report();
        j.replicas = replicas.clone();
        json_out::hold(j.to_json(), false);
    }
    fanout::failed(replicas.as_deref().unwrap_or_default(), false)?;
    if report.sender_failed > 0 {
        return Err(Error::Partial {
            count: report.sender_failed,
            first: "see the sender's output".into(),
        });
    }
    Ok(())
}

fn run_send(
    paths: &[PathBuf],
    ticket: &TicketFrom,
    chain: &[TicketFrom],
    t: &Transfer,
    cfg: &Config,
) -> Result<()> {
    let ticket = &resolve_ticket(ticket)?;
    let mut opts = send_options(t, cfg, true);
    opts.chain = fanout::chain(ticket, chain, t.encrypt)?;
    opts.label = fanout::label(ticket);
    let sources: Vec<Source> = paths.iter().map(|p| Source::from_arg(p)).collect();
    let dial = ticket_dialer(ticket, t.encrypt);
    let report = send(&sources, &opts, ticket.secret.block_key(), dial)?;
    let replicas = fanout::states(
        &fanout::label(ticket),
        report.chain.as_ref(),
        &report.replicas,
    );
    finish_send(&report, replicas, cfg)
}

/// Prints the sender's summary (and JSON report); a failed replica of a fan-out, or the
/// partial error when some files were skipped.
fn finish_send(
    report: &SendReport,
    replicas: Option<Vec<crate::progress::ReplicaState>>,
    cfg: &Config,
) -> Result<()> {
    if cfg.json {
        let mut j = report.report();
        j.replicas = replicas.clone();
        json_out::hold(j.to_json(), false);
    }
    crate::progress::say_congestion(
        report.congestion.as_ref(),
        cfg.listing.verbose && !cfg.quiet,
    );
    print_end(
        "sent",
        &report.summary,
        &report.counters,
        report.started,
        cfg,
    );
    fanout::failed(replicas.as_deref().unwrap_or_default(), false)?;
    match report.partial_error() {
        Some(e) => Err(e),
        None => Ok(()),
    }
}
