//! The wire protocol, without I/O: frame layout, control messages, data-unit headers.
//!
//! Participants: a *sender* (has the files) and a *receiver* (writes them under one root
//! directory). Either may be the one that dials; `transport` authenticates every
//! connection before this module sees a byte.
//!
//! Goals: every length is bounded before anything is allocated; any byte string decodes to
//! a frame or an error, never a panic; integers are little-endian with explicit widths.
//! Non-goals: I/O, timing, retries (the drivers in `send` and `receive` own those).
//!
//! Layout: `limits` (every size bound), `frame` (the envelope), `reader` ([`FrameReader`]),
//! `item` (what a transfer changes, and rsync's lines for it),
//! `seal`
//! (every frame's tag and every control message's MAC, per connection), `data` (the
//! data-unit header), `msg` (control messages), `path` (safe relative paths), `filter`
//! (rsync's include/exclude rules), `xattr` (extended attributes in an entry, bounded),
//! `vouch` (a fan-out receiver's proof of its own outcome).
//!
//! # Streams and order
//! One control stream, then N data streams. On the control stream the sender writes
//! [`Control::Start`], then for each manifest batch [`Control::Entries`], which the
//! receiver answers with [`Control::Need`] (the ids whose data it wants), preceded, when
//! `Start` asked for them, by [`Control::Items`] (what changes, for `-v`/`-i`). Data streams
//! carry only [`FrameKind::Data`] frames and end with [`FrameKind::End`]. When everything
//! is queued and sent, the sender writes [`Control::Finish`]; the receiver answers with
//! [`Control::Done`] once every file is durable, or [`Control::Error`] at any point.
//! With `--delete` and filter rules, [`Control::Protect`] follows `Start`: the rules, so
//! the receiver keeps what they exclude. A chain fan-out sends [`Control::Chain`] right
//! after `Start` (the receivers to pass everything on to, and the run's nonce; the last
//! receiver gets one without hops); such a receiver sends [`Control::Replicas`] (what
//! became of each of them) and every receiver of a chain [`Control::Proof`] before `Done`.
//!
//! A pipe transfer (one byte stream, not files) opens with [`Control::StreamStart`]
//! instead. Its blocks travel as data units of file 0 at block-aligned offsets, on any
//! data stream, in any order. The receiver answers with [`Control::StreamAck`] (what the
//! consumer has, what arrived, how much may be in flight: the credit that bounds both
//! sides' memory) and, when a data connection breaks, [`Control::StreamLost`] (which
//! blocks to send again). [`Control::StreamEnd`] gives the length and BLAKE3 of the
//! whole stream; [`Control::Done`] or [`Control::Error`] ends it.

mod accept;
mod batch;
mod chain;
mod data;
mod filter;
mod frame;
mod item;
mod limits;
mod msg;
mod path;
mod reader;
mod seal;
pub mod vouch;
mod xattr;

pub use accept::{Accept, Chown, OwnerSpec};
pub use batch::check_batch;
pub use chain::{MAX_CHAIN, MAX_HOP_TEXT};
pub use data::{body_at, encode_data_header, hashed_parts, set_hash, Codec, DataHeader, Segment};
pub use filter::{Filter, FilterRule, MAX_PATTERN, MAX_RULES};
pub use frame::{Frame, FrameHeader, FrameKind, ReadError, FRAME_HEADER_LEN};
pub use item::{Change, Item, ItemKind, Listing};
pub use limits::{
    CONTROL_MAC_LEN, DATA_FIXED_LEN, DEFAULT_BLOCK_SIZE, FRAME_TAG_LEN, MAX_BATCH_BYTES,
    MAX_BATCH_ENTRIES, MAX_BLOCK, MAX_CONTROL_LEN, MAX_DATA_LEN, MAX_PENDING_FILES, MAX_SEGMENTS,
    MAX_STREAMS,
};
pub use msg::{
    Chain, Control, Entry, EntryKind, Hop, Outcome, Replica, Rules, Summary, SyncOptions, Want,
    WantKind,
};
pub use path::{PathError, SafeRelPath};
pub use reader::FrameReader;
pub use seal::{Opener, Sealer};
pub use xattr::{
    known_name, Xattr, XattrError, Xattrs, MAX_XATTRS, MAX_XATTR_NAME, MAX_XATTR_TOTAL,
    MAX_XATTR_VALUE,
};

/// Everything the decoder can reject. Each is a reason to drop the connection; only
/// [`ProtocolError::Forged`] (and a data payload that fails to parse or verify, which
/// nobody could tell from one edited on the way) may be damage in transit rather than
/// the peer's doing.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ProtocolError {
    /// A frame type this version does not know.
    #[error("unknown frame type {0}")]
    UnknownFrame(u8),
    /// A header field that must be zero was not.
    #[error("reserved header bits set")]
    Reserved,
    /// A length exceeds the protocol's bound.
    #[error("{what} length {len} exceeds the limit {max}")]
    TooLong {
        /// Which length.
        what: &'static str,
        /// The length claimed.
        len: u64,
        /// The bound.
        max: u64,
    },
    /// The peer has more of something at once than the protocol allows.
    #[error("the peer sent {count} {what}, more than the {max} allowed")]
    TooMany {
        /// Of what.
        what: &'static str,
        /// How many it has.
        count: u64,
        /// The bound.
        max: u64,
    },
    /// The payload's structure is inconsistent.
    #[error("malformed {0}")]
    Malformed(&'static str),
    /// A compression codec id this version does not know.
    #[error("unknown codec {0}")]
    UnknownCodec(u8),
    /// A control message could not be decoded.
    #[error("undecodable control message: {0}")]
    Control(String),
    /// A message arrived where the protocol does not allow it.
    #[error("unexpected message: {0}")]
    Unexpected(String),
    /// A frame's tag or a control message's MAC is wrong: the bytes were altered, dropped
    /// or reordered on the way, or do not belong to this connection.
    #[error("{0} failed verification (altered in transit?)")]
    Forged(&'static str),
    /// A path in the manifest is not a safe relative path.
    #[error("unsafe path in manifest: {0}")]
    Path(#[from] PathError),
}
