//! Object stores as a copy's far end: `haul copy DIR/ s3://bucket/prefix/` and back.
//!
//! A tree goes up as one object per regular file (its key is its path beneath the
//! prefix; a name that cannot be a key is kept under `.haul-objects/` by the hash of its
//! path), N objects and N parts of a large one in flight (`--streams`), and then one
//! manifest object (`manifest`) holding what the store cannot: modes, owners, nanosecond
//! mtimes, symlinks, hardlinks, empty directories, and every file's size and BLAKE3. A
//! download reads the manifest first, fetches large objects by parallel range reads,
//! checks each against its BLAKE3 before it takes its name, and writes zero blocks as
//! holes. Either way, an object whose size and BLAKE3 already match is not sent again.
//!
//! Children: `bucket` (the requests, through OpenDAL), `manifest` (sans-IO), `walk`
//! (the local tree through descriptors), `up` and `down`, `common`, what those share, and
//! `http`, the HTTP client with the silence rule (`--timeout`). Not here yet: streams (`-`),
//! resuming a multipart upload, `--delete`, filters, objects haul did not write.

mod bucket;
mod common;
mod down;
mod http;
mod manifest;
mod up;
mod walk;

use crate::config::{ObjectCopy, ObjectPlan};
use crate::error::Result;

pub use bucket::Side;
pub use common::Report;

/// Runs the copy `job`.
pub fn copy(job: &ObjectCopy) -> Result<Report> {
    let streams = job.streams.max(1);
    match &job.plan {
        ObjectPlan::Up { sources, dest } => {
            let b = bucket::Bucket::open(
                &dest.bucket,
                job.endpoint.as_deref(),
                streams,
                job.silence,
                Side::Destination,
            )?;
            up::upload(sources, dest, &b, streams)
        }
        ObjectPlan::Down { source, dest } => {
            let b = bucket::Bucket::open(
                &source.bucket,
                job.endpoint.as_deref(),
                streams,
                job.silence,
                Side::Source,
            )?;
            down::download(source, dest, &b, streams)
        }
    }
}
