//! The sender driver: walks the sources, streams the manifest on the control connection,
//! and runs one blocking worker thread per data connection (read → hash → compress →
//! frame → socket), fed by the largest-first work queue.
//!
//! Calling order on the control stream is the one `protocol` documents: Start, then
//! Entries/Need pairs, then Finish, answered by Done or Error.

use std::collections::HashMap;
use std::io;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::RecvTimeoutError;

use crate::error::{Error, Result};
use crate::plan::queue::WorkQueue;
use crate::plan::walk::{self, FileData, Source};
use crate::progress::{Counters, Progress};
use crate::protocol::{
    Control, Entry, EntryKind, Item, ProtocolError, Summary, WantKind, MAX_BATCH_BYTES,
    MAX_BATCH_ENTRIES, MAX_PENDING_FILES,
};
use crate::session::lost;
use crate::transport::{Conn, Role};

mod dial;
mod link;
pub mod pace;
mod pack;
pub mod pipe;
pub mod probe;
mod readbuf;
mod report;
mod sample;
#[cfg(test)]
mod sim;
mod target;
mod vouch;
mod walker;
mod worker;

pub use dial::ticket_dialer;
pub use report::{SendOptions, SendReport};

use link::Link;
use report::Failures;
use target::Target;
use walker::WalkMsg;

/// How often a file that changes while read is sent again before giving up on it.
const CHANGE_RETRIES: usize = 3;
/// Ids of files sent again are allocated from here up (the walk counts from 0).
const RETRY_ID_BASE: u64 = 1 << 62;

/// Files the receiver holds waiting for data (this side's registry, but for those not
/// to be sent any more) before the manifest waits for some to arrive: half the receiver's
/// bound, which leaves the other half for the unreadable and changed ones it keeps too.
const RECEIVER_PENDING: usize = MAX_PENDING_FILES / 2;
/// Longest a write to the receiver may move no byte (a data unit, a manifest batch): the
/// connection is dropped and re-dialed then, so that no stream waits forever on a
/// receiver that stopped reading (docs/design.md, *Liveness*).
const WRITE_STALL: Duration = Duration::from_secs(30);
/// Files queued and not yet sent before the manifest waits: what bounds the sender's work
/// queue and the receiver's table of files in progress, whatever the size of the tree.
const QUEUE_FILES: usize = 8_192;

/// Sends `sources`. `dial` opens one authenticated connection of the given role.
pub fn send<D>(sources: &[Source], opts: &SendOptions, key: [u8; 32], dial: D) -> Result<SendReport>
where
    D: Fn(Role) -> Result<Conn> + Sync,
{
    walk::check_sources(sources)?;
    let started = Instant::now();
    let counters = Arc::new(Counters::default());
    let pace = Arc::new(pace::Pacer::new(Arc::clone(&counters), opts.limit));
    let _control = pace::control::listen(&pace);
    let pace = &*pace;
    let progress = Progress::start(Arc::clone(&counters), opts.progress);
    let start = Control::Start {
        streams: opts.streams as u16,
        block_size: opts.block_size as u32,
        options: opts.sync,
    };
    // The chain goes down with hop tickets and this run's nonce; the sender keeps the
    // tickets that check each receiver's proof.
    let (chain, vouching) = vouch::prepare(&opts.chain)?;
    let target = Target::new(&dial, key, report::has_chain(&chain), encrypts(&chain));
    target.bound_writes(WRITE_STALL);
    target.use_congestion(opts.congestion.as_deref())?;
    let succ = report::successors(&opts.label, &chain);
    let mut link = Link::open(&target, start, opts.retries, &counters, succ)?;
    link.set_stall(opts.stall, sources);
    let (printer, listing) = (progress.printer(), opts.listing);
    let print = move |items: Vec<Item>| {
        for line in items.iter().filter_map(|i| listing.line(i)) {
            printer.say(&line, listing.stderr);
        }
    };
    link.on_items(&print);
    if opts.sync.delete && !opts.select.filter.is_empty() && !opts.select.delete_excluded {
        link.tell(&Control::Protect(opts.select.filter.clone()))?;
    }
    let queue = WorkQueue::new(opts.block_size);
    let failures = Mutex::new(Failures::default());
    let seen = crate::pagecache::Seen::default();
    let mut registry = HashMap::new();

    let mut told = false;
    let result = std::thread::scope(|s| {
        let mut workers = Vec::new();
        for i in 0..opts.streams {
            let (queue, failures, counters, target) = (&queue, &failures, &counters, &target);
            let seen = &seen;
            let h = std::thread::Builder::new()
                .name(format!("haul-send-{i}"))
                .spawn_scoped(s, move || {
                    let _aborts = queue.abort_on_panic();
                    let link = dial::Redial {
                        target,
                        retries: opts.retries,
                        stream: i,
                        pace,
                    };
                    let r = worker::run(&link, queue, opts, counters, failures, seen);
                    if r.is_err() {
                        queue.abort();
                    }
                    r
                })
                .map_err(|e| Error::io("starting a stream thread", e))?;
            workers.push(h);
        }
        let (walker, wrx) = walker::start(sources, opts, key, &counters)?;

        let outcome = run_manifest(
            &mut link,
            &wrx,
            &queue,
            &counters,
            &failures,
            &mut registry,
            opts.sync.delete,
        )
        .and_then(|()| {
            resend_changed(
                &mut link,
                &queue,
                &failures,
                &mut registry,
                !opts.select.no_xattrs,
            )
        })
        .and_then(|()| finish(&mut link, &queue, &target, &failures, &mut registry));
        match &outcome {
            // Told before the streams are joined: one whose read waits on a hung file
            // system holds the join, and the receiver should not wait with it.
            Err(e) => {
                queue.abort();
                if !matches!(e, Error::Remote { .. } | Error::Transport(_)) {
                    link.tell_error(e);
                    told = true;
                }
            }
            Ok(_) => queue.close(),
        }
        target.stop();
        drop(wrx);
        // A walk that ended is joined. One still going when the run failed stops at its
        // next entry (its channel is closed), or never, if it waits on a hung file
        // system: the run's error does not wait for it.
        if outcome.is_ok() {
            let _ = walker.join();
        }
        let mut worker_err = None;
        for h in workers {
            match h.join() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    worker_err.get_or_insert(e);
                }
                Err(_) => {
                    worker_err
                        .get_or_insert(Error::io("stream thread", io::Error::other("panicked")));
                }
            }
        }
        match (outcome, worker_err) {
            (Ok(summary), _) => Ok(summary),
            // The receiver usually says why it dropped us: prefer its words.
            (Err(Error::Transport(_)), Some(w)) => Err(link.remote_reason().unwrap_or(w)),
            (Err(e), _) => Err(e),
        }
    });
    progress.finish();
    let summary = match result {
        Ok(s) => s,
        Err(e) => {
            if !told && !matches!(e, Error::Remote { .. } | Error::Transport(_)) {
                link.tell_error(&e);
            }
            return Err(e);
        }
    };
    link.done(&summary);
    link.close();
    let digest = link.manifest_digest();
    let replicas = link.settled(|r| vouching.as_ref().is_some_and(|v| v.proven(r, &digest)));
    drop(link);
    let f = failures.into_inner().unwrap_or_default();
    Ok(SendReport {
        summary,
        counters,
        failed: f.list,
        unstable: f.unstable,
        started,
        chain: opts.chain.clone(),
        replicas,
        congestion: target.congestion(),
    })
}

/// Ends the transfer: Finish, and while the receiver reports data lost with dropped
/// connections, send that again.
fn finish(
    link: &mut Link<'_>,
    queue: &WorkQueue,
    target: &Target<'_>,
    failures: &Mutex<Failures>,
    registry: &mut HashMap<u64, FileData>,
) -> Result<Summary> {
    loop {
        wait_idle(link, queue)?;
        if queue.is_aborted() {
            return Err(lost(io::Error::other(
                "a data stream could not be re-established",
            )));
        }
        // What could not be read after it was listed has an id; what the walk could not
        // read is only counted.
        let (failed, unlisted) = failures
            .lock()
            .map(|f| {
                let listed = f.unreadable.len();
                (
                    f.unreadable.clone(),
                    f.list.len().saturating_sub(listed) as u64,
                )
            })
            .unwrap_or_default();
        // Units written to the receiver answering now (the first, or the one the chain
        // went on with).
        let units = target.sent();
        let finish = Control::Finish {
            failed,
            units,
            unlisted,
        };
        let reply = link.request(&finish)?;
        forget_arrived(link, registry);
        match reply {
            Control::Done(summary) => return Ok(summary),
            Control::Need(wants) => {
                crate::progress::warn(&format!(
                    "re-sending data of {} file(s) lost with dropped connections",
                    wants.len()
                ));
                for w in wants {
                    if let Some(d) = registry.get(&w.id) {
                        queue.push(w.id, d.clone(), w.what);
                    }
                }
                queue.flush();
            }
            Control::Error { code, message } => {
                return Err(Error::Remote {
                    side: "receiver",
                    message,
                    code,
                })
            }
            other => return Err(ProtocolError::Unexpected(other.name().into()).into()),
        }
    }
}

/// Streams the manifest in batches and queues what the receiver needs. Files it needs
/// are remembered in `registry` (a small record each) so data lost with a dropped
/// connection can be sent again, until the receiver says they arrived. With `delete`,
/// anything the walk could not read (but not what vanished) turns deletion off: the
/// receiver is told to keep everything (`Filter::everything`), as rsync does.
fn run_manifest(
    link: &mut Link<'_>,
    wrx: &crossbeam_channel::Receiver<WalkMsg>,
    queue: &WorkQueue,
    counters: &Counters,
    failures: &Mutex<Failures>,
    registry: &mut HashMap<u64, FileData>,
    mut delete: bool,
) -> Result<()> {
    let mut batch = Vec::new();
    let mut batch_bytes = 0usize;
    let mut data = HashMap::new();
    loop {
        // A walk may take long between entries (a slow disk, `-c` hashing a big file):
        // the receiver hears the sender meanwhile, as long as the walk moves; one that
        // does not move for --timeout waits on the file system and ends the run.
        link.check_walk()?;
        link.beat()?;
        let msg = match batch.is_empty() {
            true => wrx.recv_timeout(QUEUE_TICK),
            false => wrx.recv_timeout(Duration::from_millis(20)),
        };
        let end = match msg {
            Ok(WalkMsg::Entry(w)) => {
                let w = *w;
                Counters::add(&counters.entries, 1);
                match w.entry.kind {
                    EntryKind::Dir => Counters::add(&counters.dirs, 1),
                    EntryKind::Hardlink { .. } => Counters::add(&counters.links, 1),
                    // rsync's total size counts a symlink's length too.
                    EntryKind::Symlink { ref target } => {
                        Counters::add(&counters.file_size, target.len() as u64)
                    }
                    _ => {}
                }
                Counters::add(&counters.file_size, w.len);
                if let Some(d) = w.data {
                    Counters::add(&counters.total_files, 1);
                    Counters::add(
                        &counters.total_bytes,
                        d.extents.iter().map(|(a, b)| b - a).sum(),
                    );
                    data.insert(w.entry.id, d);
                }
                batch_bytes += w.entry.batch_cost();
                batch.push(w.entry);
                None
            }
            Ok(WalkMsg::Skipped(sk)) => {
                let shown = crate::progress::shown_path(&sk.path);
                crate::progress::warn(&format!("cannot read {shown}: {}", sk.error));
                if delete && sk.error.kind() != io::ErrorKind::NotFound {
                    // What could not be read is not in the manifest, and its copy at the
                    // destination would look extraneous.
                    link.tell(&Control::Protect(crate::protocol::Filter::everything()))?;
                    crate::progress::warn(
                        "some of the source could not be read: --delete deletes nothing \
                         this run (rsync: IO error encountered -- skipping file deletion)",
                    );
                    delete = false;
                }
                if let Ok(mut f) = failures.lock() {
                    f.list.push((sk.path, sk.error));
                }
                None
            }
            Ok(WalkMsg::End(r)) => Some(r),
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => Some(Ok(())),
        };
        let flush = end.is_some()
            || batch.len() >= MAX_BATCH_ENTRIES
            || batch_bytes >= MAX_BATCH_BYTES
            || (!batch.is_empty() && wrx.is_empty());
        if flush && !batch.is_empty() {
            wait_room(link, queue)?;
            wait_receiver(link, queue, failures, registry, batch.len())?;
            let reply = link.request(&Control::Entries(std::mem::take(&mut batch)))?;
            batch_bytes = 0;
            forget_arrived(link, registry);
            queue_needed(reply, queue, &mut data, registry)?;
        }
        if let Some(r) = end {
            return r;
        }
    }
}

/// Queues what the receiver's answer to one `Entries` batch asks for. `data` holds the
/// batch's files and is emptied; needed ones move to `registry`.
fn queue_needed(
    reply: Control,
    queue: &WorkQueue,
    data: &mut HashMap<u64, FileData>,
    registry: &mut HashMap<u64, FileData>,
) -> Result<()> {
    match reply {
        Control::Need(wants) => {
            // A delta piece size of zero would divide by zero in a data stream.
            if wants
                .iter()
                .any(|w| matches!(w.what, WantKind::Delta { chunk: 0, .. }))
            {
                return Err(ProtocolError::Malformed("delta piece size 0").into());
            }
            for w in wants {
                if let Some(d) = data.remove(&w.id) {
                    queue.push(w.id, d.clone(), w.what);
                    registry.insert(w.id, d);
                }
            }
            queue.flush();
            data.clear();
            Ok(())
        }
        Control::Error { code, message } => Err(Error::Remote {
            side: "receiver",
            message,
            code,
        }),
        other => Err(ProtocolError::Unexpected(other.name().into()).into()),
    }
}

/// Sends files that changed while being read again, under new ids, until they read
/// consistently or `CHANGE_RETRIES` rounds have passed; then gives up on them (they are
/// reported, and the exit status says so).
fn resend_changed(
    link: &mut Link<'_>,
    queue: &WorkQueue,
    failures: &Mutex<Failures>,
    registry: &mut HashMap<u64, FileData>,
    xattrs: bool,
) -> Result<()> {
    let mut next_id = RETRY_ID_BASE;
    for round in 0..=CHANGE_RETRIES {
        wait_idle(link, queue)?;
        let changed = match failures.lock() {
            Ok(mut f) => std::mem::take(&mut f.changed),
            Err(_) => return Ok(()),
        };
        if changed.is_empty() {
            return Ok(());
        }
        // Where the walk found each: a file walked again must be beneath the same root,
        // in the same directory.
        let mut found = HashMap::new();
        for id in changed.keys() {
            if let Some(d) = registry.remove(id) {
                found.insert(*id, (d.at, d.parent));
            }
        }
        link.tell(&Control::Forget(changed.keys().copied().collect()))?;
        if round == CHANGE_RETRIES {
            if let Ok(mut f) = failures.lock() {
                for (path, _) in changed.into_values() {
                    crate::progress::warn(&format!(
                        "{} kept changing while being read; not sent",
                        crate::progress::shown_path(&path)
                    ));
                    f.unstable.push(path);
                }
            }
            return Ok(());
        }
        let mut entries: Vec<Entry> = Vec::new();
        let mut data = HashMap::new();
        for (id, (path, dest)) in changed {
            let again = match found.get(&id) {
                Some((at, parent)) => walk::file_again(next_id, &path, dest, xattrs, at, *parent),
                None => Err(std::io::Error::other("not found again")),
            };
            match again {
                Ok(Some(w)) => {
                    if let Some(d) = w.data {
                        data.insert(next_id, d);
                    }
                    entries.push(w.entry);
                    next_id += 1;
                }
                Ok(None) => {}
                Err(e) => {
                    let shown = crate::progress::shown_path(&path);
                    crate::progress::warn(&format!("cannot read {shown}: {e}"));
                    if let Ok(mut f) = failures.lock() {
                        f.list.push((path, e));
                    }
                }
            }
        }
        if entries.is_empty() {
            return Ok(());
        }
        for batch in in_batches(entries) {
            let mut batch_data: HashMap<u64, FileData> = batch
                .iter()
                .filter_map(|e| data.remove(&e.id).map(|d| (e.id, d)))
                .collect();
            wait_receiver(link, queue, failures, registry, batch.len())?;
            let reply = link.request(&Control::Entries(batch))?;
            forget_arrived(link, registry);
            queue_needed(reply, queue, &mut batch_data, registry)?;
        }
    }
    Ok(())
}

/// `entries` cut into batches within the receiver's bounds (`protocol::check_batch`).
fn in_batches(entries: Vec<Entry>) -> Vec<Vec<Entry>> {
    let mut out = Vec::new();
    let (mut batch, mut bytes) = (Vec::new(), 0);
    for e in entries {
        bytes += e.batch_cost();
        batch.push(e);
        if batch.len() >= MAX_BATCH_ENTRIES || bytes >= MAX_BATCH_BYTES {
            out.push(std::mem::take(&mut batch));
            bytes = 0;
        }
    }
    if !batch.is_empty() {
        out.push(batch);
    }
    out
}

/// Before a batch of `n` entries: while the files the receiver holds waiting for data
/// leave no room for `n` below [`RECEIVER_PENDING`], asks every [`QUEUE_TICK`] (an empty
/// `Entries`) which arrived. Ends as files arrive, or with the link's error.
fn wait_receiver(
    link: &mut Link<'_>,
    queue: &WorkQueue,
    failures: &Mutex<Failures>,
    registry: &mut HashMap<u64, FileData>,
    n: usize,
) -> Result<()> {
    loop {
        // Unreadable and changed files stay at the receiver until Finish or Forget: not
        // counted, so a tree of them cannot stop the manifest.
        let given_up = failures.lock().map(|f| f.ids.len()).unwrap_or(0);
        if registry.len().saturating_sub(given_up) + n <= RECEIVER_PENDING {
            return Ok(());
        }
        if link.data_broken() {
            link.fail_over(link::streams_broke())?;
        }
        std::thread::sleep(QUEUE_TICK);
        let reply = link.request(&Control::Entries(Vec::new()))?;
        forget_arrived(link, registry);
        queue_needed(reply, queue, &mut HashMap::new(), registry)?;
    }
}

/// Drops the records of files the receiver has whole: it never asks for them again, so
/// the registry holds only files on their way (the queue's window and what is in flight).
fn forget_arrived(link: &mut Link<'_>, registry: &mut HashMap<u64, FileData>) {
    for id in link.take_arrived() {
        registry.remove(&id);
    }
    if registry.capacity() > 4 * registry.len() + 1024 {
        registry.shrink_to_fit();
    }
}

/// How often a wait on the work queue looks whether the data streams gave up on the
/// receiver.
const QUEUE_TICK: Duration = Duration::from_millis(500);

/// `queue.wait_idle()`; meanwhile, when the data streams gave up on the first receiver of
/// a chain (and wait for it), the link goes on with the next one.
fn wait_idle(link: &mut Link<'_>, queue: &WorkQueue) -> Result<()> {
    while !queue.wait_idle_for(QUEUE_TICK) {
        if link.data_broken() {
            link.fail_over(link::streams_broke())?;
        }
        link.check_stall()?;
        link.beat()?;
    }
    Ok(())
}

/// `queue.wait_room(QUEUE_FILES)`, going on without a first receiver the data streams
/// gave up on (see [`wait_idle`]).
fn wait_room(link: &mut Link<'_>, queue: &WorkQueue) -> Result<()> {
    while !queue.wait_room_for(QUEUE_FILES, QUEUE_TICK) {
        if link.data_broken() {
            link.fail_over(link::streams_broke())?;
        }
        link.check_stall()?;
        link.beat()?;
    }
    Ok(())
}

/// Whether the hops of a chain fan-out use TLS between them (as the sender's do).
fn encrypts(chain: &Option<crate::protocol::Chain>) -> bool {
    chain.as_ref().is_none_or(|c| c.encrypt)
}

#[cfg(test)]
mod tests;
