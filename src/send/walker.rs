//! The walk of the sources on a thread of its own, handing the sender's manifest loop
//! each entry (with `--checksum`, its content hash) and each unreadable one. It counts
//! its steps (`Counters::walked`) so that the sender tells a walk that moves from one
//! waiting on a hung file system (`Link::check_walk`).
//!
//! Not a scoped thread: a `stat` or `read` that never returns must not hold the run's
//! end, so it owns what it reads, and a run that fails leaves it to stop by itself.

use std::sync::Arc;
use std::thread::JoinHandle;

use crossbeam_channel::Receiver;

use super::report::SendOptions;
use super::worker;
use crate::error::{Error, Result};
use crate::plan::walk::{self, Skipped, Source, Walked};
use crate::progress::Counters;
use crate::protocol::MAX_BATCH_ENTRIES;

/// What the walk hands on.
pub(super) enum WalkMsg {
    /// An entry, in walk order.
    Entry(Box<Walked>),
    /// Something that could not be read.
    Skipped(Skipped),
    /// The walk's end and outcome.
    End(Result<()>),
}

/// Starts the walk of `sources`: its thread (joined only after it ended) and where its
/// entries come. It stops at its next entry once that receiver is dropped.
pub(super) fn start(
    sources: &[Source],
    opts: &SendOptions,
    key: [u8; 32],
    counters: &Arc<Counters>,
) -> Result<(JoinHandle<()>, Receiver<WalkMsg>)> {
    let (tx, rx) = crossbeam_channel::bounded::<WalkMsg>(MAX_BATCH_ENTRIES * 2);
    let (srcs, select) = (sources.to_vec(), opts.select.clone());
    let (checksum, counters) = (opts.sync.checksum, Arc::clone(counters));
    let walker = std::thread::Builder::new()
        .name("haul-walk".into())
        .stack_size(64 << 20)
        .spawn(move || {
            let walked = &counters.walked;
            let skipped = tx.clone();
            let r = walk::walk(
                &srcs,
                &select,
                |w| {
                    Counters::add(walked, 1);
                    let w = worker::summed(w, &key, checksum, walked);
                    tx.send(WalkMsg::Entry(w)).is_ok()
                },
                |sk| {
                    Counters::add(walked, 1);
                    let _ = skipped.send(WalkMsg::Skipped(sk));
                },
            );
            let _ = tx.send(WalkMsg::End(r));
        })
        .map_err(|e| Error::io("starting the walk thread", e))?;
    Ok((walker, rx))
}
