//! What to send, in which order, and where it lands: the source walk (manifest entries,
//! sparse maps, hardlinks), the largest-first work queue of blocks and packs, and
//! rsync's destination layout rules, and what the walk selects (filters, --files-from,
//! symlinks followed, -x).

pub mod balance;
mod extents;
pub mod layout;
pub mod meta;
pub mod queue;
pub mod select;
pub mod shard;
pub mod walk;
