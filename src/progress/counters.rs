//! The counters the workers of one side of a transfer bump, and the unit every display
//! shows bytes in; read by the progress display, the summary and `--stats`.

use std::sync::atomic::{AtomicU64, Ordering};

/// Counters shared by the workers of one side of a transfer.
#[derive(Default, Debug)]
pub struct Counters {
    /// Raw bytes announced by the manifest so far.
    pub total_bytes: AtomicU64,
    /// Regular files announced so far.
    pub total_files: AtomicU64,
    /// Entries of every kind announced so far (for `--stats`).
    pub entries: AtomicU64,
    /// Directories announced so far (for `--stats`).
    pub dirs: AtomicU64,
    /// Second names of files announced so far (hardlinks; for `--stats`, which counts
    /// them as regular files, as rsync does).
    pub links: AtomicU64,
    /// Lengths of every regular file name announced so far, holes and hardlinks included,
    /// and of symlinks (`--stats`' total file size, rsync's meaning; `total_bytes` counts
    /// data bytes).
    pub file_size: AtomicU64,
    /// Raw bytes sent (sender) or written (receiver).
    pub done_bytes: AtomicU64,
    /// A stream's sender: raw bytes of first sends put on the wire so far, counted piece
    /// by piece as they go (the progress line's; `done_bytes` waits for acknowledgements).
    pub sent_bytes: AtomicU64,
    /// A receiver: bytes read off its data connections so far, counted as each read
    /// brings them (the progress line's; `done_bytes` waits for whole verified units).
    pub arrived_bytes: AtomicU64,
    /// Files completed.
    pub done_files: AtomicU64,
    /// A receiver: the lengths of the files completed (holes included), `--stats`' "Total
    /// transferred file size" as rsync counts it.
    pub done_size: AtomicU64,
    /// Files an earlier run had begun, continued from its journal (receiver), and the
    /// bytes it had already written of them.
    pub resumed_files: AtomicU64,
    /// See `resumed_files`.
    pub resumed_bytes: AtomicU64,
    /// Bytes of frames put on (or taken off) the wire, before TLS.
    pub wire_bytes: AtomicU64,
    /// Source bytes read (sender): more than sent when a delta found matching pieces.
    pub read_bytes: AtomicU64,
    /// Steps of the sender's walk of its sources (an entry listed, a MiB hashed for
    /// `--checksum`): its stall rule tells a walk that moves from one waiting on the file
    /// system (a hung network mount) by this.
    pub walked: AtomicU64,
    /// Data frames written (sender) or received (receiver).
    pub units: AtomicU64,
    /// Connections re-established after they dropped.
    pub reconnects: AtomicU64,
    /// The sender's bandwidth cap in bytes per second (0: none).
    pub limit: AtomicU64,
    /// Units sent at each level of `codec::tune::LADDER` (sender, `--compress auto`).
    pub codec_units: [AtomicU64; 5],
}

impl Counters {
    /// `codec_units` read out, or `None` when no unit was sent by the adaptive codec.
    pub fn codec_mix(&self) -> Option<[u64; 5]> {
        let mix = self
            .codec_units
            .each_ref()
            .map(|c| c.load(Ordering::Relaxed));
        mix.iter().any(|&n| n > 0).then_some(mix)
    }
}

impl Counters {
    /// Adds to a counter.
    pub fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Ordering::Relaxed);
    }
}

/// Bytes in binary units, e.g. "1.50 GiB".
pub fn human(n: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.2} {}", UNITS[u])
    }
}
