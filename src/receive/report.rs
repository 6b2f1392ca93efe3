//! What the receiver driver is told (its options) and what it tells (its report).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::progress::Counters;
use crate::protocol::{Listing, Summary};

/// How the receiver runs.
#[derive(Clone, Copy, Debug)]
pub struct ReceiveOptions {
    /// Draw a progress bar (when stderr is a terminal).
    pub progress: bool,
    /// Give up when the sender is gone (no connection, no data) this long.
    pub timeout: Duration,
    /// Whether to pass the transfer on to the receivers a chain fan-out names (`recv
    /// --relay`, or a far end a `copy --also` started): otherwise a `Chain` is refused,
    /// so that a ticket holder cannot make this host dial addresses of its choosing.
    pub relay: bool,
    /// Give up when no sender came this long (None: wait until one comes).
    pub first: Option<Duration>,
    /// This receiver's outcome key (`Secret::outcome_key` of its ticket), with which it
    /// proves its `Done` to the sender of a chain fan-out; None for a receiver that is
    /// only ever the first (a local copy's, a pull's: the sender sees its `Done` itself).
    pub outcome_key: Option<[u8; 32]>,
    /// What this side lists per change (`-v`, `-i` where the receiving user asked).
    pub listing: Listing,
}

/// What the receiver reports at the end.
#[derive(Debug)]
pub struct ReceiveReport {
    /// What was written.
    pub summary: Summary,
    /// How many files the sender could not read (they were not written).
    pub sender_failed: u64,
    /// Counters for the summary line.
    pub counters: Arc<Counters>,
    /// When the first connection arrived.
    pub started: Instant,
    /// Connections that replaced dropped ones.
    pub reconnects: u64,
}

impl ReceiveReport {
    /// The account `--json` prints.
    pub fn report(&self) -> crate::progress::Report {
        crate::progress::Report {
            files: self.summary.files,
            files_unchanged: self.summary.unchanged_files,
            bytes_read: 0,
            bytes_wire: self.counters.wire_bytes.load(Ordering::Relaxed),
            bytes_skipped: self.summary.unchanged_bytes,
            bytes_written: self.summary.bytes,
            deleted: self.summary.deleted,
            failed_files: self.sender_failed,
            changed_files: 0,
            reconnects: self.reconnects,
            seconds: self.started.elapsed().as_secs_f64(),
            stream_blake3: None,
            codec_units: None,
            replicas: None,
            congestion: None,
        }
    }
}
