//! What `up` and `down` share: the part size, the report, the manifest's key and the
//! error for a manifest that is not one.

use super::bucket::Bucket;
use super::manifest::{ManifestError, MANIFEST_NAME};
use crate::error::{exit, Error};

/// The smallest part of a multipart upload and the size of one range read.
pub const PART: usize = 8 << 20;

/// What a copy with an object store did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// Entries in the tree (directories, files, links).
    pub entries: u64,
    /// Objects sent or fetched.
    pub sent_objects: u64,
    /// Their bytes.
    pub sent_bytes: u64,
    /// Files whose object (or local copy) already had the same size and BLAKE3.
    pub unchanged: u64,
    /// Whether the manifest was written (an upload whose manifest is unchanged writes none).
    pub manifest_written: bool,
}

/// The manifest's key beneath `prefix` (empty, or ending with `/`).
pub fn manifest_key(prefix: &str) -> String {
    format!("{prefix}{MANIFEST_NAME}")
}

/// A manifest in the bucket that cannot be read as one.
pub fn bad_manifest(bucket: &Bucket, key: &str, e: ManifestError) -> Error {
    Error::Object {
        message: format!(
            "{}/{key}: {e}; it is not a manifest haul wrote (remove it to start afresh)",
            bucket.name()
        ),
        code: exit::INTEGRITY,
    }
}
