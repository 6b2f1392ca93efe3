//! Stream copies between hosts, like `tar c | ssh host 'tar x'` but parallel, verified and
//! resumable within the run: `haul copy - host:FILE`, `haul copy - host: --to-command CMD`
//! (push), `haul copy host:FILE -`, `haul copy host: - --from-command CMD` (pull). The
//! far end (`serve`) listens; the local side dials it, directly or through ssh.

use super::fanout::First;
use super::farend::FarEnd;
use super::route::Route;
use super::rsh::Rsh;
use super::wire::Request;
use super::{done_wait, prefer_far, unexpected};
use crate::config::{PipeCopy, RemotePath, SshOptions, DEFAULT_TIMEOUT};
use crate::error::{exit, Error, Result};
use crate::receive::pipe::{receive_pipe, Output, PipeRecvOptions, PipeRecvReport};
use crate::send::pipe::{send_pipe, PipeOptions, PipeReport};
use crate::transport::Ticket;

/// How a stream copy between hosts ended, for the caller to report.
pub enum PipeOutcome {
    /// Push: what the local sender reports.
    Sent(PipeReport),
    /// Pull: what the local receiver reports.
    Received(PipeRecvReport),
}

/// Runs a stream copy between hosts (`plan` is not `Local`).
pub fn run(
    plan: &PipeCopy,
    opts: &PipeOptions,
    encrypt: bool,
    ssh: &SshOptions,
    quiet: bool,
) -> Result<PipeOutcome> {
    // Several sessions to one host would race for one shared connection.
    let share = !matches!(plan, PipeCopy::Push { also, .. } if !also.is_empty());
    let rsh = Rsh::new(ssh.rsh.clone(), share);
    match plan {
        PipeCopy::Push {
            from,
            dest,
            to_command,
            also,
        } => {
            let receive = |at: &RemotePath, everywhere| Request::ReceiveStream {
                dest: at.path.clone(),
                command: to_command.clone(),
                window: opts.window,
                advertise: ssh.advertise,
                keep_cache: opts.keep_cache,
                everywhere,
                // Every destination of a fan-out may pass the stream on.
                relay: !also.is_empty(),
            };
            // A fan-out (`--also`): the further receivers first, their tickets the chain.
            let mut further =
                super::fanout::start(&rsh, also, ssh, quiet, encrypt, |at| receive(at, true))?;
            let chain = further.chain.clone();
            let first = super::fanout::start_first(
                &rsh,
                dest,
                ssh,
                quiet,
                &receive(dest, false),
                chain.is_some(),
            )?;
            // Err: the first destination could not be started (a failed replica; the
            // chain starts at the next).
            let mut far = match first {
                First::Ready(far, ticket, port, _) => Ok((
                    far,
                    Route::new(&rsh, dest, ticket, port, encrypt, ssh.via_ssh),
                )),
                First::Lost(e) => Err(e),
            };
            let opts = &PipeOptions {
                chain,
                label: super::fanout::label(dest),
                ..opts.clone()
            };
            let sent = match &far {
                Ok((_, route)) => send_pipe(from, opts, route.key(), |role| route.dial(role)),
                Err(lost) => send_pipe(from, opts, [0; 32], |_| {
                    Err(super::fanout::unreachable(lost))
                }),
            };
            let done = far
                .as_mut()
                .ok()
                .and_then(|(far, _)| far.finish(Some(done_wait(&sent))));
            // What became of the further ones is in the sender's report (`Replicas`), and
            // of those that could not be started, here.
            further.finish(super::FAILED_WAIT);
            let sent = sent.map(|mut report| {
                report.chain = further.account(&mut report.replicas);
                PipeOutcome::Sent(report)
            });
            match &far {
                Ok((far, _)) => sent.map_err(|e| prefer_far(e, far, done.as_ref())),
                Err(_) => sent,
            }
        }
        PipeCopy::Pull {
            source,
            from_command,
            to,
        } => {
            // Fail on a destination that cannot work before starting anything there.
            let out = Output::open(to, opts.keep_cache)?;
            let mut far = FarEnd::start(&rsh, source, ssh, quiet)?;
            far.send(&Request::SendStream {
                path: source.path.clone(),
                command: from_command.clone(),
                // Lossless: validated to be at most MAX_STREAMS.
                streams: opts.streams as u16,
                compress: opts.compress.to_string(),
                block_size: opts.block_size,
                window: opts.window,
                advertise: ssh.advertise,
                limit: opts.limit,
                keep_cache: opts.keep_cache,
                congestion: opts.congestion.clone(),
            })?;
            let ready = far.ready("setting up the sender")?;
            let Some(ticket) = ready.ticket else {
                return Err(unexpected(&far, "no ticket"));
            };
            let ticket = Ticket::parse(&ticket)?;
            let route = Route::new(&rsh, source, ticket, ready.port, encrypt, ssh.via_ssh);
            let key = route.key();
            let streams = opts.streams;
            let (tx, rx) = crossbeam_channel::unbounded();
            let received = std::thread::scope(|s| {
                let route = &route;
                s.spawn(move || route.dial_into(streams, &tx));
                let ropts = PipeRecvOptions {
                    window: opts.window,
                    progress: opts.progress,
                    timeout: DEFAULT_TIMEOUT,
                    // A stream from a host does not fan out.
                    relay: false,
                    first: None,
                    outcome_key: None,
                };
                receive_pipe(out, key, rx, ropts)
            });
            let done = far.finish(Some(done_wait(&received)));
            let report = received.map_err(|e| prefer_far(e, &far, done.as_ref()))?;
            match done {
                Some(d) if d.code != exit::OK => Err(far.done_error(&d)),
                Some(_) => Ok(PipeOutcome::Received(report)),
                None => Err(Error::Host {
                    host: far.host.clone(),
                    message: "the far end ended without confirming (see above)".into(),
                    code: exit::NETWORK,
                }),
            }
        }
        PipeCopy::Local { .. } => Err(Error::Usage(
            "a stream copy on this host needs no far end".into(),
        )),
    }
}
