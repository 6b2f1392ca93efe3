//! The far end of a stream copy: receive one stream into a file or a command here
//! (`haul copy - host:FILE`, `--to-command`), or send one from a file or a command's
//! output here (`haul copy host:FILE -`, `--from-command`). Same engines as `recv -` and
//! `send -`; the local side always dials.

use std::net::IpAddr;

use super::endpoint::{listen, path_of, AcceptPool, Out};
use crate::codec::Compression;
use crate::config::{DEFAULT_RETRIES, DEFAULT_TIMEOUT};
use crate::error::{Error, Result};
use crate::receive::incoming;
use crate::receive::pipe::{receive_pipe, Output, PipeRecvOptions, PipeTo};
use crate::send::pipe::{send_pipe, PipeFrom, PipeOptions};
use crate::transport::Role;

/// Where a far stream goes: the file, or the command (whose standard output must not
/// reach ours: that carries the instruction lines).
fn far_to(dest: &[u8], command: Option<String>) -> PipeTo {
    match command {
        Some(command) => PipeTo::Command {
            command,
            stdout_to_stderr: true,
        },
        None => PipeTo::File(path_of(dest)),
    }
}

/// Where a far stream comes from.
fn far_from(path: &[u8], command: Option<String>) -> PipeFrom {
    match command {
        Some(c) => PipeFrom::Command(c),
        None => PipeFrom::File(path_of(path)),
    }
}

/// Receives one stream; returns its length.
pub(super) fn serve_receive_stream(
    out_lines: &Out,
    dest: &[u8],
    command: Option<String>,
    (window, advertise, keep_cache, (everywhere, relay)): (u64, Option<IpAddr>, bool, (bool, bool)),
) -> Result<u64> {
    let out = Output::open(&far_to(dest, command), keep_cache)?;
    let (listener, ticket, port) = listen(advertise, everywhere)?;
    let key = ticket.secret.block_key();
    out_lines.ready(&ticket, port, true);
    let (_handle, accepted) = listener.spawn_acceptor();
    let rx = incoming(accepted)?;
    let opts = PipeRecvOptions {
        window,
        progress: false,
        timeout: DEFAULT_TIMEOUT,
        relay,
        first: None,
        outcome_key: ticket.secret.outcome_key(),
    };
    Ok(receive_pipe(out, key, rx, opts)?.bytes)
}

/// What a `SendStream` asks for.
pub(super) struct SendStream {
    pub(super) path: Vec<u8>,
    pub(super) command: Option<String>,
    pub(super) streams: u16,
    pub(super) compress: String,
    pub(super) block_size: u64,
    pub(super) window: u64,
    pub(super) advertise: Option<IpAddr>,
    pub(super) limit: Option<u64>,
    pub(super) keep_cache: bool,
    pub(super) congestion: Option<String>,
}

/// Sends one stream to the local receiver, which dials us; returns its length.
pub(super) fn serve_send_stream(out_lines: &Out, req: SendStream) -> Result<u64> {
    let compress = req.compress.parse::<Compression>().map_err(Error::Usage)?;
    let from = far_from(&req.path, req.command);
    if let PipeFrom::File(p) = &from {
        // Fail before the ticket on a source that cannot be read.
        std::fs::File::open(p).map_err(|e| Error::Source {
            path: p.clone(),
            source: e,
        })?;
    }
    let (listener, ticket, port) = listen(req.advertise, false)?;
    out_lines.ready(&ticket, port, true);
    let key = ticket.secret.block_key();
    let (_handle, accepted) = listener.spawn_acceptor();
    let pool = AcceptPool::new(accepted);
    let dial = |role: Role| pool.take(role);
    let opts = PipeOptions {
        streams: usize::from(req.streams),
        compress,
        block_size: req.block_size,
        window: req.window,
        limit: req.limit,
        keep_cache: req.keep_cache,
        retries: DEFAULT_RETRIES,
        progress: false,
        size: None,
        chain: None,
        label: String::new(),
        congestion: req.congestion,
    };
    Ok(send_pipe(&from, &opts, key, dial)?.bytes)
}
