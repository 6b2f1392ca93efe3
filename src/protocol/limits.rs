//! The wire format's size bounds, and the data-unit sizes they are computed from.
//!
//! Every length a peer claims is checked against one of these before anything is allocated;
//! they live together so the bounds can be read (and changed) in one place. `frame` bounds a
//! frame's payload by them and `data` bounds a unit's segments and raw size. Constants only:
//! no parsing, no encoding.

/// Largest control payload (a manifest batch and its MAC).
pub const MAX_CONTROL_LEN: usize = 16 << 20;
/// Bytes of the tag at the end of every frame header.
pub const FRAME_TAG_LEN: usize = 16;
/// Bytes of the MAC at the end of every control payload.
pub const CONTROL_MAC_LEN: usize = 32;
/// Largest raw size of one data unit.
pub const MAX_BLOCK: usize = 64 << 20;
/// Most segments (files) in one data unit.
pub const MAX_SEGMENTS: usize = 4096;
/// Bytes of the fixed part of a data payload.
pub const DATA_FIXED_LEN: usize = 44;
/// Bytes of one segment entry in a data payload.
pub(super) const SEGMENT_LEN: usize = 20;
/// Largest data payload.
pub const MAX_DATA_LEN: usize = DATA_FIXED_LEN + MAX_SEGMENTS * SEGMENT_LEN + MAX_BLOCK;
/// Most entries in one `Entries` batch (a receiver refuses more).
pub const MAX_BATCH_ENTRIES: usize = 2000;
/// A batch ends with the entry whose [`crate::protocol::Entry::batch_cost`] takes the
/// batch's to this (a receiver refuses a batch that reaches it before its last entry).
pub const MAX_BATCH_BYTES: usize = 1 << 20;
/// Most files a receiver holds waiting for their data (a sender keeps about 10,000: its
/// queued window, a batch and what is in flight; it waits at half this). A record costs
/// about 400 bytes, so this bounds them to about 100 MiB; more end the transfer (exit 8).
pub const MAX_PENDING_FILES: usize = 1 << 18;
/// Most data streams a sender may ask for in `Start`.
pub const MAX_STREAMS: u16 = 64;
/// The block size when none is given: large enough to amortise per-unit costs, small
/// enough that a handful of streams share even a modest file.
pub const DEFAULT_BLOCK_SIZE: u64 = 4 << 20;
