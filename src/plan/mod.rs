//! What to send, in which order, and where it lands: the source walk (manifest entries,
//! sparse maps, hardlinks), opening what it found again beneath its source root, the
//! largest-first work queue of blocks and packs, rsync's destination layout rules, and
//! what the walk selects (filters, --files-from, symlinks followed, -x).

pub mod balance;
pub mod beneath;
mod extents;
pub mod layout;
pub mod meta;
pub mod queue;
pub mod select;
pub mod shard;
pub mod walk;
