//! What the sender is told (its options) and what it tells (its report), and the
//! record of files that could not be read or kept changing, which the driver and every
//! data stream share.

use std::collections::{HashMap, HashSet};
use std::io;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use crate::codec::Compression;
use crate::error::Error;
use crate::progress::Counters;
use crate::protocol::{Chain, Hop, Listing, Summary, SyncOptions};
use crate::session::Successors;

/// How to send.
#[derive(Clone, Debug)]
pub struct SendOptions {
    /// Data connections.
    pub streams: usize,
    /// Compression per unit.
    pub compress: Compression,
    /// Block size in bytes.
    pub block_size: u64,
    /// Draw a progress bar (when stderr is a terminal).
    pub progress: bool,
    /// What the receiver should do with what it already has.
    pub sync: SyncOptions,
    /// How often a dropped connection is re-dialed before giving up.
    pub retries: u32,
    /// What to print per change the receiver reports (`-v`, `-i`; with `sync.items`).
    pub listing: Listing,
    /// What the walk takes (filters, --files-from, symlinks followed, -x).
    pub select: crate::plan::select::Selection,
    /// Bandwidth cap in bytes per second of wire bytes, all streams together.
    pub limit: Option<u64>,
    /// `--keep-cache`: leave what is read in the page cache.
    pub keep_cache: bool,
    /// A chain fan-out: the receivers the first one passes everything on to.
    pub chain: Option<crate::protocol::Chain>,
    /// How messages and the report name the first receiver (in a chain fan-out).
    pub label: String,
    /// `--timeout`: the run ends when nothing moved this long (None: never).
    pub stall: Option<std::time::Duration>,
    /// `--cc`: the congestion control of the data connections (None: BBR where offered).
    pub congestion: Option<String>,
}

/// Whether `chain` names receivers after the first (so the sender can go on without it).
pub(super) fn has_chain(chain: &Option<Chain>) -> bool {
    chain.as_ref().is_some_and(|c| !c.hops.is_empty())
}

/// A chain fan-out's receivers as the sender sees them: the first (named `label`), then
/// the hops of `chain`; None for one receiver.
pub(super) fn successors(label: &str, chain: &Option<Chain>) -> Option<Successors> {
    let chain = chain.clone().filter(|c| !c.hops.is_empty())?;
    let first = Hop {
        label: label.to_string(),
        ticket: String::new(),
    };
    Some(Successors::behind(first, chain))
}

/// What the sender reports when the receiver confirmed the transfer.
#[derive(Debug)]
pub struct SendReport {
    /// The receiver's summary.
    pub summary: Summary,
    /// Sender-side counters (bytes read, wire bytes).
    pub counters: Arc<Counters>,
    /// Files that could not be read, and why.
    pub failed: Vec<(PathBuf, io::Error)>,
    /// Files that kept changing while read (not sent).
    pub unstable: Vec<PathBuf>,
    /// When the transfer started.
    pub started: Instant,
    /// A chain fan-out: the receivers after the first, and what became of each.
    pub chain: Option<crate::protocol::Chain>,
    /// A chain fan-out: what became of each receiver (the first included when it failed
    /// or answered), as the sender and the receivers reported it.
    pub replicas: Vec<crate::protocol::Replica>,
    /// The congestion control of the data connections and why (None: not TCP).
    pub congestion: Option<(String, String)>,
}

impl SendReport {
    /// The account `--json` prints.
    pub fn report(&self) -> crate::progress::Report {
        let c = &self.counters;
        let load = |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
        crate::progress::Report {
            files: self.summary.files,
            files_unchanged: self.summary.unchanged_files,
            bytes_read: load(&c.read_bytes),
            bytes_wire: load(&c.wire_bytes),
            bytes_skipped: self.summary.unchanged_bytes,
            bytes_written: self.summary.bytes,
            deleted: self.summary.deleted,
            failed_files: self.failed.len() as u64,
            changed_files: self.unstable.len() as u64,
            reconnects: load(&c.reconnects),
            seconds: self.started.elapsed().as_secs_f64(),
            stream_blake3: None,
            codec_units: c.codec_mix().map(crate::codec::named_levels),
            replicas: None,
            congestion: self.congestion.clone(),
        }
    }

    /// The error to exit with when some files were skipped.
    pub fn partial_error(&self) -> Option<Error> {
        if let Some((path, e)) = self.failed.first() {
            return Some(Error::Partial {
                count: self.failed.len() as u64,
                first: format!("{}: {e}", crate::progress::shown_path(path)),
            });
        }
        let path = self.unstable.first()?;
        Some(Error::Changed {
            count: self.unstable.len() as u64,
            first: crate::progress::shown_path(path),
        })
    }
}

/// Files the workers or the walk could not read, or that changed while read.
#[derive(Default)]
pub struct Failures {
    /// Ids not to send any more of (unreadable or changed).
    pub ids: HashSet<u64>,
    /// Unreadable files, and why.
    pub list: Vec<(PathBuf, io::Error)>,
    /// Files that changed while read in this round: id → (source path, destination path).
    pub changed: HashMap<u64, (PathBuf, Vec<u8>)>,
    /// Files that kept changing through every retry.
    pub unstable: Vec<PathBuf>,
    /// Ids of unreadable files (the receiver discards what it has of them).
    pub unreadable: Vec<u64>,
}
