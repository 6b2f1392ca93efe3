//! `haul copy host:SRC... DST`: the far end sends, the local side receives (it dials the
//! far sender's connections). With `--also host2:DST…` (a chain fan-out) the further
//! destinations are started first, listening on every address; the far sender gets the
//! chain with `Go` and tells the local receiver, which passes everything on to the next,
//! each to the one after it. The far sender reads the sources once; when the local
//! receiver fails it goes on with the next (through that one's ticket), and its `Done`
//! says what became of every replica.

use std::path::Path;

use super::fanout;
use super::farend::{Done, FarEnd};
use super::route::Route;
use super::rsh::Rsh;
use super::shared::{
    done_wait, prefer_far, receive_request, send_request, unexpected, Fanned, FarOptions,
    FAILED_WAIT,
};
use super::wire::Request;
use crate::config::{RemotePath, DEFAULT_TIMEOUT};
use crate::error::{exit, Error, Result};
use crate::plan::layout::dest_layout;
use crate::receive::{receive, ReceiveOptions, ReceiveReport};
use crate::send::SendOptions;
use crate::store::Store;
use crate::transport::Ticket;

/// What a pull ended with: the local receiver's report (in a fan-out, its error when it
/// failed while the chain after it went on) and what became of the replicas.
pub(super) type Pulled = (Result<ReceiveReport>, Fanned);

pub(super) fn pull(
    rsh: &Rsh,
    sources: &[RemotePath],
    dest: &Path,
    also: &[RemotePath],
    opts: &SendOptions,
    f: &FarOptions<'_>,
) -> Result<Pulled> {
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
    let mut further = fanout::start(rsh, also, f.ssh, f.quiet, f.encrypt, |at| {
        receive_request(at, single_file, (true, true), opts, f)
    })?;
    let chain = further.chain.clone();
    // One file is stored under one name everywhere.
    if let Err(e) = fanout::same_name(&rename, &further.renames) {
        further.finish(FAILED_WAIT);
        return Err(e);
    }
    let store = match opts.sync.dry_run {
        true => Store::open_dry(&root),
        false => Store::open(&root),
    };
    let store = match store.and_then(|s| s.set_accept(f.accept.clone()).map(|()| s)) {
        Ok(s) => s,
        Err(e) => {
            further.finish(FAILED_WAIT);
            return Err(e);
        }
    };
    store.set_keep_cache(opts.keep_cache);
    let label = dest.to_string_lossy().into_owned();
    far.send(&Request::Go {
        rename,
        ticket: None,
        encrypt: f.encrypt,
        chain: chain.clone(),
        label: label.clone(),
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
            // The first receiver of a pull's fan-out: the far sender is ours.
            relay: true,
            first: None,
            outcome_key: None,
            listing: opts.listing,
        };
        receive(store, key, rx, opts)
    });
    // In a fan-out the far sender goes on without a failed local receiver: wait for it.
    let wait = match (&received, &chain) {
        (Err(_), Some(_)) => None,
        _ => Some(done_wait(&received)),
    };
    let done = far.finish(wait);
    further.finish(FAILED_WAIT);
    let mut replicas = done
        .as_ref()
        .map(|d| d.replicas.clone())
        .unwrap_or_default();
    let ran = chain.is_some();
    let fanned = Fanned {
        chain: further.account(&mut replicas),
        replicas,
        label,
    };
    let sender_ok = |d: &Done| d.code == exit::OK || d.code == exit::PARTIAL;
    match (received, done) {
        (Ok(report), Some(d)) if sender_ok(&d) => Ok((Ok(report), fanned)),
        (Ok(_), Some(d)) => Err(far.done_error(&d)),
        (Ok(_), None) => Err(Error::Host {
            host: far.host.clone(),
            message: "the far end ended without confirming (see above)".into(),
            code: exit::NETWORK,
        }),
        // The chain went on without the local receiver.
        (Err(e), Some(d)) if ran && sender_ok(&d) => Ok((Err(e), fanned)),
        (Err(e), done) => Err(prefer_far(e, &far, done.as_ref())),
    }
}
