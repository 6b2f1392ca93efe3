//! What to send and in which order: the source walk (manifest entries, sparse maps,
//! hardlinks) and the largest-first work queue of blocks and packs.

pub mod queue;
pub mod walk;
