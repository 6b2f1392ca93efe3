//! The stream commands: `recv -` / `recv --stream FILE` / `recv --to-command`, `send -` /
//! `send --from-command`, and `copy` with a stream end, wired from the pipe engines in
//! `send::pipe` and `receive::pipe`.

use std::io::Write;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use super::local::take_end;
use super::ticket::{resolve_ticket, write_ticket_file};
use crate::config::{Config, Pipe, PipeCopy, SshOptions, TicketFrom, Transfer, DEFAULT_TIMEOUT};
use crate::error::{Error, Result};
use crate::progress::{stream_line, ReplicaState, Report};
use crate::receive::incoming;
use crate::receive::pipe::{receive_pipe, Output, PipeRecvOptions, PipeRecvReport, PipeTo};
use crate::remote::pipe::PipeOutcome;
use crate::send::pipe::{send_pipe, PipeFrom, PipeOptions, PipeReport};
use crate::send::ticket_dialer;
use crate::transport::{Conn, Listener, Role, Secret};

/// The sender's options for a stream configured as `t` and `p`.
pub(crate) fn pipe_options(t: &Transfer, p: &Pipe, cfg: &Config) -> PipeOptions {
    PipeOptions {
        streams: t.streams,
        compress: t.compress,
        block_size: t.block_size,
        window: p.window,
        retries: t.retries,
        progress: !cfg.quiet,
        size: p.size,
        limit: t.limit,
        keep_cache: cfg.keep_cache,
        chain: None,
        label: String::new(),
        congestion: t.congestion.clone(),
    }
}

/// Whether the command writes a stream to stdout (then everything else goes to stderr).
pub(super) fn stream_on_stdout(c: &crate::config::Command) -> bool {
    use crate::config::Command;
    match c {
        Command::RecvPipe { to, .. } => *to == PipeTo::Stdout,
        Command::CopyPipe { plan, .. } => matches!(
            plan,
            PipeCopy::Local {
                to: PipeTo::Stdout,
                ..
            } | PipeCopy::Pull {
                to: PipeTo::Stdout,
                ..
            }
        ),
        _ => false,
    }
}

fn hex(d: &[u8; 32]) -> String {
    d.iter().map(|b| format!("{b:02x}")).collect()
}

pub(super) fn run_recv_pipe(
    to: &PipeTo,
    listen: Option<SocketAddr>,
    ticket_file: Option<&Path>,
    (timeout, relay): (Option<Duration>, bool),
    window: u64,
    cfg: &Config,
) -> Result<()> {
    // Fail on a destination that cannot work before printing a ticket.
    let out = Output::open(to, cfg.keep_cache)?;
    let listener = Listener::bind(listen)?;
    let ticket = listener.ticket();
    let line = ticket.encode();
    if let Some(f) = ticket_file {
        write_ticket_file(f, &line)?;
    }
    // With the stream on stdout, nothing else may go there.
    let data_on_stdout = *to == PipeTo::Stdout;
    if data_on_stdout {
        eprintln!("{line}");
    } else {
        let mut o = std::io::stdout().lock();
        let _ = writeln!(o, "{line}");
        let _ = o.flush();
    }
    let key = ticket.secret.block_key();
    let (_handle, accepted) = listener.spawn_acceptor();
    let rx = incoming(accepted)?;
    let opts = PipeRecvOptions {
        window,
        progress: !cfg.quiet,
        timeout: timeout.unwrap_or(DEFAULT_TIMEOUT),
        relay,
        first: timeout,
        outcome_key: ticket.secret.outcome_key(),
    };
    let report = receive_pipe(out, key, rx, opts)?;
    finish_recv_pipe(&report, data_on_stdout, cfg);
    Ok(())
}

/// Prints the receiver's summary and JSON (on stderr when stdout carries the stream).
pub(crate) fn finish_recv_pipe(r: &PipeRecvReport, data_on_stdout: bool, cfg: &Config) {
    use std::sync::atomic::Ordering::Relaxed;
    let wire = r.counters.wire_bytes.load(Relaxed);
    if !cfg.quiet {
        eprintln!(
            "{}",
            stream_line("received", r.bytes, Some(wire), r.started)
        );
    }
    if cfg.json {
        let j = Report {
            bytes_wire: wire,
            bytes_written: r.bytes,
            reconnects: r.reconnects,
            seconds: r.started.elapsed().as_secs_f64(),
            stream_blake3: Some(hex(&r.digest)),
            codec_units: r.counters.codec_mix().map(crate::codec::named_levels),
            replicas: None,
            ..Report::default()
        }
        .to_json();
        super::json_out::hold(j, data_on_stdout);
    }
}

/// Prints the sender's summary and JSON (with a fan-out's `replicas`).
pub(crate) fn finish_send_pipe(
    r: &PipeReport,
    replicas: Option<Vec<ReplicaState>>,
    data_on_stdout: bool,
    cfg: &Config,
) {
    use std::sync::atomic::Ordering::Relaxed;
    let wire = r.counters.wire_bytes.load(Relaxed);
    if !cfg.quiet {
        let here = matches!(
            cfg.command,
            crate::config::Command::CopyPipe {
                plan: PipeCopy::Local { .. },
                ..
            }
        );
        let shown = (!here).then_some(wire);
        eprintln!("{}", stream_line("sent", r.bytes, shown, r.started));
    }
    crate::progress::say_congestion(r.congestion.as_ref(), cfg.listing.verbose && !cfg.quiet);
    if cfg.json {
        let j = Report {
            bytes_read: r.bytes,
            bytes_wire: wire,
            bytes_written: r.bytes,
            reconnects: r.counters.reconnects.load(Relaxed),
            seconds: r.started.elapsed().as_secs_f64(),
            stream_blake3: Some(hex(&r.digest)),
            replicas,
            congestion: r.congestion.clone(),
            ..Report::default()
        }
        .to_json();
        super::json_out::hold(j, data_on_stdout);
    }
}

/// `send -` (or `--from-command`) to one receiver or, with several, a chain fan-out.
pub(super) fn run_send_pipe(
    from: &PipeFrom,
    (ticket, chain): (&TicketFrom, &[TicketFrom]),
    t: &Transfer,
    p: &Pipe,
    cfg: &Config,
) -> Result<()> {
    let ticket = &resolve_ticket(ticket)?;
    let mut opts = pipe_options(t, p, cfg);
    opts.chain = super::fanout::chain(ticket, chain, t.encrypt)?;
    opts.label = super::fanout::label(ticket);
    let dial = ticket_dialer(ticket, t.encrypt);
    let report = send_pipe(from, &opts, ticket.secret.block_key(), dial)?;
    let replicas = super::fanout::states(
        &super::fanout::label(ticket),
        report.chain.as_ref(),
        &report.replicas,
    );
    finish_send_pipe(&report, replicas.clone(), false, cfg);
    super::fanout::failed(replicas.as_deref().unwrap_or_default(), true)
}

pub(super) fn run_copy_pipe(
    plan: &PipeCopy,
    t: &Transfer,
    p: &Pipe,
    ssh: &SshOptions,
    cfg: &Config,
) -> Result<()> {
    match plan {
        PipeCopy::Local { from, to } => copy_here(from, to, t, p, cfg),
        remote => {
            let opts = pipe_options(t, p, cfg);
            match crate::remote::pipe::run(remote, &opts, t.encrypt, ssh, cfg.quiet)? {
                PipeOutcome::Sent(r) => {
                    // A fan-out (`--also`): every destination's state, named host:path.
                    let first = match remote {
                        PipeCopy::Push { dest, .. } => crate::remote::fanout::label(dest),
                        _ => String::new(),
                    };
                    let states = super::fanout::states(&first, r.chain.as_ref(), &r.replicas);
                    finish_send_pipe(&r, states.clone(), false, cfg);
                    return super::fanout::failed(states.as_deref().unwrap_or_default(), true);
                }
                PipeOutcome::Received(r) => {
                    let on_stdout = matches!(
                        remote,
                        PipeCopy::Pull {
                            to: PipeTo::Stdout,
                            ..
                        }
                    );
                    finish_recv_pipe(&r, on_stdout, cfg)
                }
            }
            Ok(())
        }
    }
}

/// A stream copied on this host, through the same engines over socket pairs (verified
/// end to end; no TLS, no network).
fn copy_here(from: &PipeFrom, to: &PipeTo, t: &Transfer, p: &Pipe, cfg: &Config) -> Result<()> {
    let out = Output::open(to, cfg.keep_cache)?;
    let key = *Secret::random().as_bytes();
    let opts = pipe_options(t, p, cfg);
    let (tx, rx) = crossbeam_channel::unbounded();
    let mut ends = Vec::new();
    for role in std::iter::once(Role::Control).chain(std::iter::repeat_n(Role::Data, t.streams)) {
        let (a, b) = Conn::pair().map_err(|e| Error::io("creating a local stream", e))?;
        ends.push((role, a));
        let _ = tx.send((b, role));
    }
    drop(tx);
    let ends = Mutex::new(ends);
    let window = p.window;
    let receiver = std::thread::Builder::new()
        .name("haul-receiver".into())
        .spawn(move || {
            let opts = PipeRecvOptions {
                window,
                progress: false,
                timeout: DEFAULT_TIMEOUT,
                relay: false,
                first: None,
                outcome_key: None,
            };
            receive_pipe(out, key, rx, opts)
        })
        .map_err(|e| Error::io("starting the receiver", e))?;
    let dial = |role: Role| take_end(&ends, role);
    let sent = send_pipe(from, &opts, key, dial);
    drop(ends);
    let received = receiver
        .join()
        .map_err(|_| Error::io("receiver", std::io::Error::other("panicked")))?;
    let report = match (sent, received) {
        (Ok(s), Ok(_)) => s,
        (Err(e), Err(Error::Transport(_))) | (Err(e), Ok(_)) => return Err(e),
        (_, Err(e)) => return Err(e),
    };
    finish_send_pipe(&report, None, *to == PipeTo::Stdout, cfg);
    Ok(())
}
