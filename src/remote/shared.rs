//! What the remote copy forms share about their far ends: the options every far end of
//! one copy is started and told with, the requests a receiving and a sending far end get,
//! how long a far end may take to say `Done`, and which error to show when both sides
//! failed.

use std::net::IpAddr;
use std::time::Duration;

use super::farend::{Done, FarEnd};
use super::wire::Request;
use crate::config::{RemotePath, SshOptions};
use crate::error::{exit, Error, Result};
use crate::protocol::{Accept, Listing, SyncOptions};
use crate::send::SendOptions;

/// How long the far end may take to say `Done` once the local part is over.
pub(super) const DONE_WAIT: Duration = Duration::from_secs(30);
/// The same after the local part failed: the far end may be waiting for connections that
/// will never come, and has usually said why already if it was the one that failed.
pub(super) const FAILED_WAIT: Duration = Duration::from_secs(3);

pub(super) fn done_wait<T>(local: &Result<T>) -> Duration {
    if local.is_ok() {
        DONE_WAIT
    } else {
        FAILED_WAIT
    }
}

/// What every far end of one copy is started and told with.
pub(super) struct FarOptions<'a> {
    /// TLS on the data streams.
    pub(super) encrypt: bool,
    /// What a receiving far end keeps of the sender's metadata.
    pub(super) accept: Accept,
    /// How to start far ends.
    pub(super) ssh: &'a SshOptions,
    /// No messages but errors.
    pub(super) quiet: bool,
}

/// A fan-out whose sender is a far end (a pull, remote to remote): the chain after the
/// first receiver, how the first is named, and what the far sender's `Done` said became
/// of each receiver.
pub struct Fanned {
    /// The receivers after the first (None: no fan-out).
    pub chain: Option<crate::protocol::Chain>,
    /// The first receiver's name in messages.
    pub label: String,
    /// What became of the receivers, as the far sender reported.
    pub replicas: Vec<crate::protocol::Replica>,
}

pub(super) fn unexpected(far: &FarEnd, what: &str) -> Error {
    Error::Host {
        host: far.host.clone(),
        message: format!("unexpected answer from the far end ({what})"),
        code: exit::INTEGRITY,
    }
}

/// The local error, unless it only says the peer failed or vanished and the far end's
/// `Done` says why (that one names the cause and the host).
pub(super) fn prefer_far(local: Error, far: &FarEnd, done: Option<&Done>) -> Error {
    let peer_side = matches!(local, Error::Remote { .. } | Error::Transport(_));
    match done {
        Some(d) if d.code != exit::OK && peer_side => far.done_error(d),
        _ => local,
    }
}

/// What a receiving far end at `at` is told; `everywhere`: it is dialed by another far
/// host (a fan-out's further hop, a remote-to-remote receiver), not by this one; `relay`:
/// it is a destination of a fan-out (`--also`), so it may pass the transfer on.
pub(super) fn receive_request(
    at: &RemotePath,
    single_file: bool,
    (everywhere, relay): (bool, bool),
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
        relay,
    }
}

pub(super) fn send_request(
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
        congestion: t.congestion.clone(),
    }
}
