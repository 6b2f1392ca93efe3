//! A chain fan-out receiver's proof of its own outcome, so that a relay before it cannot
//! claim it complete (`Replicas[T2: Done]` from a first hop that never dialed T2).
//!
//! Participants: the sender (knows every hop's ticket), the receivers (each knows its own),
//! and the relays between them, which hold only *hop tickets* of the hops after them
//! (`Ticket::for_hop`: enough to connect, not to vouch). Each receiver MACs, under its
//! ticket's outcome key, the sender's nonce for this run (carried down the chain), the
//! digest of what it received (the manifest, or the stream's BLAKE3) and its summary; the
//! sender checks every `Done` it heard rather than saw. A missing or wrong proof, or one
//! over another manifest, counts as a failed replica.
//!
//! Not covered: file *contents* a hostile relay passes on (it re-hashes every unit for the
//! next hop with that hop's block key, so it could hand on other bytes with the right
//! manifest); a stream's proof does cover its bytes (its BLAKE3).

use super::msg::{Entry, Summary};

/// The proof of `summary` by the receiver whose outcome key is `key`, for the run `nonce`
/// over what it received (`digest`).
pub fn proof(key: &[u8; 32], nonce: &[u8; 32], digest: &[u8; 32], summary: &Summary) -> [u8; 32] {
    let mut h = blake3::Hasher::new_keyed(key);
    h.update(b"haul 2026 replica outcome\0");
    h.update(nonce);
    h.update(digest);
    for n in [
        summary.files,
        summary.other,
        summary.bytes,
        summary.skipped,
        summary.unchanged_files,
        summary.unchanged_bytes,
        summary.deleted,
        summary.matched,
        summary.resumed_files,
        summary.resumed_bytes,
    ] {
        h.update(&n.to_le_bytes());
    }
    h.update(&[u8::from(summary.dry_run)]);
    *h.finalize().as_bytes()
}

/// Whether `claimed` is the proof [`proof`] gives (compared in constant time).
pub fn holds(
    key: &[u8; 32],
    nonce: &[u8; 32],
    digest: &[u8; 32],
    summary: &Summary,
    claimed: &[u8; 32],
) -> bool {
    blake3::Hash::from(proof(key, nonce, digest, summary)) == blake3::Hash::from(*claimed)
}

/// The digest of a manifest as one side sent or received it: every `Entries` batch once,
/// in order (a repeated batch, answered from the receiver's cache, is not added again).
#[derive(Clone)]
pub struct ManifestDigest(blake3::Hasher);

impl Default for ManifestDigest {
    fn default() -> ManifestDigest {
        let mut h = blake3::Hasher::new();
        h.update(b"haul 2026 manifest\0");
        ManifestDigest(h)
    }
}

impl ManifestDigest {
    /// Adds one batch.
    pub fn batch(&mut self, entries: &[Entry]) {
        // What `Control::encode` sent; a batch that does not encode was never sent.
        if let Ok(bytes) = postcard::to_stdvec(entries) {
            self.0.update(&(bytes.len() as u64).to_le_bytes());
            self.0.update(&bytes);
        }
    }

    /// The digest of the batches so far.
    pub fn digest(&self) -> [u8; 32] {
        *self.0.finalize().as_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::EntryKind;

    fn entry(id: u64) -> Entry {
        Entry {
            id,
            path: format!("f{id}").into_bytes(),
            kind: EntryKind::Dir,
            mode: 0o755,
            mtime_sec: 1,
            mtime_nsec: 0,
            uid: 0,
            gid: 0,
            xattrs: None,
            checksum: None,
        }
    }

    #[test]
    fn a_proof_binds_key_nonce_digest_and_summary() {
        let s = Summary {
            files: 3,
            bytes: 10,
            ..Summary::default()
        };
        let p = proof(&[1; 32], &[2; 32], &[3; 32], &s);
        assert!(holds(&[1; 32], &[2; 32], &[3; 32], &s, &p));
        assert!(!holds(&[9; 32], &[2; 32], &[3; 32], &s, &p), "another key");
        assert!(!holds(&[1; 32], &[9; 32], &[3; 32], &s, &p), "another run");
        assert!(
            !holds(&[1; 32], &[2; 32], &[9; 32], &s, &p),
            "another manifest"
        );
        let more = Summary { files: 4, ..s };
        assert!(
            !holds(&[1; 32], &[2; 32], &[3; 32], &more, &p),
            "other counts"
        );
        let dry = Summary {
            dry_run: true,
            ..Summary::default()
        };
        assert_ne!(
            proof(&[1; 32], &[2; 32], &[3; 32], &dry),
            proof(&[1; 32], &[2; 32], &[3; 32], &Summary::default())
        );
    }

    #[test]
    fn the_manifest_digest_is_of_every_batch_in_order() {
        let (a, b) = (vec![entry(1), entry(2)], vec![entry(3)]);
        let mut x = ManifestDigest::default();
        x.batch(&a);
        x.batch(&b);
        let mut y = ManifestDigest::default();
        y.batch(&a);
        assert_ne!(x.digest(), y.digest(), "a batch missing");
        y.batch(&b);
        assert_eq!(x.digest(), y.digest());
        let mut z = ManifestDigest::default();
        z.batch(&b);
        z.batch(&a);
        assert_ne!(x.digest(), z.digest(), "another order");
        // Batches cut elsewhere are another manifest too (the receiver answers per batch).
        let mut w = ManifestDigest::default();
        w.batch(&[entry(1)]);
        w.batch(&[entry(2), entry(3)]);
        assert_ne!(x.digest(), w.digest());
    }
}
