//! `haul copy SRC... DST` on one host: the sender and the receiver in one process over
//! socket pairs; and the same as the first hop of a chain fan-out (`haul copy SRC...
//! /DST --also host2:DST`), where the local receiver passes everything on to far
//! destinations started over ssh (`remote::Further`), as a first receiver does.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::fanout;
use crate::config::{Config, RemotePath, SshOptions, Transfer, DEFAULT_TIMEOUT};
use crate::error::{Error, Result};
use crate::plan::layout::{copy_layout, dest_layout, is_single_file};
use crate::plan::walk;
use crate::progress::ReplicaState;
use crate::protocol::{Accept, Listing};
use crate::receive::{receive, ReceiveOptions};
use crate::remote::Further;
use crate::send::{send, SendOptions, SendReport};
use crate::store::Store;
use crate::transport::{Conn, Role, Secret};

/// Copies `paths` to `dest` on this host, sent with `opts` (with `opts.chain`, the local
/// receiver is the first of a chain fan-out).
pub(super) fn copy(
    paths: &[PathBuf],
    dest: &Path,
    t: &Transfer,
    accept: &Accept,
    cfg: &Config,
    opts: SendOptions,
) -> Result<SendReport> {
    let (sources, dest) = copy_layout(paths, dest);
    walk::check_sources(&sources)?;
    let store = match t.sync.dry_run {
        true => Store::open_dry(&dest)?,
        false => Store::open(&dest)?,
    };
    store.set_accept(accept.clone())?;
    store.set_keep_cache(cfg.keep_cache);
    let key = *Secret::random().as_bytes();
    // One socket pair per connection, the data streams' with a lane (units handed over in
    // memory) unless the receiver passes them on (a relay forwards what its data streams
    // verify); the receiving halves are handed over in order.
    let relay = opts.chain.is_some();
    let (tx, rx) = crossbeam_channel::unbounded();
    let mut ends = Vec::new();
    for role in std::iter::once(Role::Control).chain(std::iter::repeat_n(Role::Data, t.streams)) {
        let pair = match role {
            Role::Data if !relay => Conn::lane_pair(),
            _ => Conn::pair(),
        };
        let (a, b) = pair.map_err(|e| Error::io("creating a local stream", e))?;
        ends.push((role, a));
        let _ = tx.send((b, role));
    }
    drop(tx);
    let ends = Mutex::new(ends);
    let receiver = std::thread::Builder::new()
        .name("haul-receiver".into())
        .spawn(move || {
            let opts = ReceiveOptions {
                progress: false,
                timeout: DEFAULT_TIMEOUT,
                // The first receiver of `copy SRC /DST --also`: the sender is ours.
                relay: true,
                first: None,
                outcome_key: None,
                listing: Listing::default(),
            };
            receive(store, key, rx, opts)
        })
        .map_err(|e| Error::io("starting the receiver", e))?;
    let dial = |role: Role| take_end(&ends, role);
    let label = opts.label.clone();
    let sent = send(&sources, &opts, key, dial);
    drop(ends);
    let received = receiver
        .join()
        .map_err(|_| Error::io("receiver", std::io::Error::other("panicked")))?;
    // The receiver's error is the more precise one (e.g. disk full), unless it only saw
    // the sender go away; in a fan-out the sender went on without it and reports it.
    match (sent, received) {
        (Ok(mut s), Err(e)) if relay => {
            fanout::own_error(&mut s.replicas, &label, &e);
            Ok(s)
        }
        (Ok(s), _) if relay => Ok(s),
        (Err(e), Err(Error::Transport(_))) | (Err(e), Ok(_)) => Err(e),
        (Ok(s), Ok(_)) => Ok(s),
        (_, Err(e)) => Err(e),
    }
}

/// `haul copy SRC... DST --also host2:DST...`: starts the far destinations, then copies
/// to `dest`, whose receiver passes everything on to them. The report, and what became
/// of every replica (the local one first, named by `dest`).
#[allow(clippy::too_many_arguments)]
pub(super) fn copy_also(
    paths: &[PathBuf],
    dest: &Path,
    t: &Transfer,
    accept: &Accept,
    also: &[RemotePath],
    ssh: &SshOptions,
    cfg: &Config,
    opts: SendOptions,
) -> Result<(SendReport, Option<Vec<ReplicaState>>)> {
    let (sources, _) = copy_layout(paths, dest);
    walk::check_sources(&sources)?;
    let mut further = Further::start(
        also,
        &sources,
        &opts,
        t.encrypt,
        accept.clone(),
        ssh,
        cfg.quiet,
    )?;
    // One file is stored under one name everywhere.
    let (_, rename) = dest_layout(is_single_file(&sources), dest);
    if let Err(e) = further.same_name(&rename) {
        further.finish();
        return Err(e);
    }
    let label = dest.to_string_lossy().into_owned();
    let opts = SendOptions {
        chain: further.chain.clone(),
        label: label.clone(),
        ..opts
    };
    let sent = copy(paths, dest, t, accept, cfg, opts);
    further.finish();
    let mut report = sent?;
    further.account(&mut report);
    let states = fanout::states(&label, report.chain.as_ref(), &report.replicas);
    Ok((report, states))
}

/// Hands out the dialing end of an in-process connection pair made for `role` (a local
/// copy's, or a local pipe's, streams instead of dialing a socket).
pub(super) fn take_end(ends: &Mutex<Vec<(Role, Conn)>>, role: Role) -> Result<Conn> {
    let mut g = ends
        .lock()
        .map_err(|_| Error::io("local streams", std::io::Error::other("poisoned")))?;
    let i = g
        .iter()
        .position(|(r, _)| *r == role)
        .ok_or_else(|| Error::io("local streams", std::io::Error::other("none left")))?;
    Ok(g.swap_remove(i).1)
}
