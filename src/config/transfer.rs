//! One transfer's options (`Transfer`) from the command line's transfer flags, with the
//! defaults that depend on where the data goes (a copy on this host or across a network).

use std::time::Duration;

use super::select;
use super::size::{parse_limit, parse_size};
use crate::cli::TransferArgs;
use crate::codec::Compression;
use crate::error::{Error, Result};
use crate::plan::select::Selection;
use crate::protocol::{Rules, SyncOptions, DEFAULT_BLOCK_SIZE, MAX_BLOCK, MAX_STREAMS};

const MIN_BLOCK_SIZE: u64 = 64 << 10;

/// How many times a dropped connection is re-dialed before the transfer fails.
pub const DEFAULT_RETRIES: u32 = 5;

/// The sender's default stall limit (`--timeout` of send and copy): a busy receiver says
/// so every second and an honest slow link moves bytes every few, so only a peer stopped
/// or cut off (or a disk hung) this long trips it; the 30 s silence bounds usually end
/// such a run first (docs/design.md, *Liveness*).
pub const DEFAULT_STALL: Duration = Duration::from_secs(300);

/// Default number of data streams: twice the cores (one stream's read waits while
/// another's hash runs), at least 2, at most 8.
pub fn default_streams() -> usize {
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(2);
    (cores * 2).clamp(2, 8)
}

/// Default number of data streams of a file copy on this host: 8, whatever the cores.
/// Its streams mostly wait on the disks (a cold small file is one `O_DIRECT` read, nothing
/// reads ahead of it), so more of them keep both disks busy: measured on 2 cores, cold
/// 20,000 x 100 KiB copied in 2.12-2.15 s with 8 against 2.65-2.96 s with 4, a 4 GiB
/// file in 4.52 s (median of 3) against 5.48 (bench/RESULTS.md, *Choices inside one
/// transfer*).
pub const LOCAL_STREAMS: usize = 8;

/// Options of one transfer.
#[derive(Clone, Debug)]
pub struct Transfer {
    /// Data streams.
    pub streams: usize,
    /// Compression.
    pub compress: Compression,
    /// Block size.
    pub block_size: u64,
    /// TLS on the wire.
    pub encrypt: bool,
    /// What to do with what the destination already has.
    pub sync: SyncOptions,
    /// Re-dials of a dropped connection before failing.
    pub retries: u32,
    /// What the walk takes: filters, --files-from, symlinks followed, -x.
    pub select: Selection,
    /// Bandwidth cap, bytes per second on the wire.
    pub limit: Option<u64>,
    /// `--timeout`: end the run when nothing moved this long (None: never).
    pub stall: Option<Duration>,
    /// `--cc`: the data connections' congestion control (None: BBR where offered).
    pub congestion: Option<String>,
}

/// A file copy on this host under `--limit`, with no `--block-size` given, moves units
/// of about a quarter of a second at the cap (a power of two, 64 KiB to the default 4
/// MiB): the in-process lane hands whole units from reader to writer, so at 1 MB/s 4 MiB
/// units made any 10 s window of writes 0.78-1.18x the cap; 256 KiB units make the
/// steps 2.5% of such a window. A cap set later with `haul limit` keeps the units the copy
/// started with. Across a network, frames are paced in pieces (`transport::Gate`) and
/// keep their size.
pub(super) fn local_units(mut t: Transfer, block_given: bool) -> Transfer {
    if let (Some(rate), false) = (t.limit, block_given) {
        let quarter = (rate / 4).clamp(MIN_BLOCK_SIZE, DEFAULT_BLOCK_SIZE);
        // The largest power of two not above it (MIN_BLOCK_SIZE is one).
        t.block_size = 1u64 << (63 - quarter.leading_zeros());
    }
    t
}

pub(super) fn transfer_config(
    a: &TransferArgs,
    encrypt: bool,
    default_compress: Compression,
    default_streams: usize,
) -> Result<Transfer> {
    let streams = a.streams.unwrap_or(default_streams);
    if streams == 0 || streams > usize::from(MAX_STREAMS) {
        return Err(Error::Usage(format!(
            "--streams must be between 1 and {MAX_STREAMS}"
        )));
    }
    let compress = match &a.compress {
        Some(c) => c.parse().map_err(Error::Usage)?,
        None => default_compress,
    };
    let block_size = match &a.block_size {
        Some(s) => parse_size(s)
            .ok_or_else(|| Error::Usage(format!("invalid --block-size '{s}': use e.g. 4M")))?,
        None => DEFAULT_BLOCK_SIZE,
    };
    if !(MIN_BLOCK_SIZE..=MAX_BLOCK as u64).contains(&block_size) {
        return Err(Error::Usage(
            "--block-size must be between 64K and 64M".into(),
        ));
    }
    Ok(Transfer {
        streams,
        compress,
        block_size,
        encrypt,
        sync: SyncOptions {
            checksum: a.sync.checksum,
            inplace: a.sync.inplace,
            delete: a.sync.delete || a.sync.delete_excluded,
            dry_run: a.sync.dry_run,
            items: false,
            rules: Rules {
                update: a.sync.update,
                existing: a.sync.existing,
                ignore_existing: a.sync.ignore_existing,
                size_only: a.sync.size_only,
            },
        },
        retries: a.retries.unwrap_or(DEFAULT_RETRIES),
        select: Selection {
            delete_excluded: a.sync.delete_excluded,
            ..select::selection(&a.filter, a.sync.delete || a.sync.delete_excluded)?
        },
        limit: match (&a.limit, &a.bwlimit) {
            (Some(r), _) => parse_limit(r, 1)?,
            // rsync's --bwlimit: a bare number is KiB per second.
            (None, Some(r)) => parse_limit(r, 1024)?,
            (None, None) => None,
        },
        stall: match a.timeout {
            Some(0) => None,
            Some(s) => Some(Duration::from_secs(s)),
            None => Some(DEFAULT_STALL),
        },
        congestion: match &a.cc {
            Some(n) => {
                crate::transport::congestion::check_name(n).map_err(Error::Usage)?;
                Some(n.clone())
            }
            None => None,
        },
    })
}
