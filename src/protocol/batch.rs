//! The bounds of one manifest batch (`Control::Entries`), as the sender cuts batches and
//! as the receiver checks them: [`MAX_BATCH_ENTRIES`] entries, and [`MAX_BATCH_BYTES`] of
//! [`Entry::batch_cost`] reached by the last entry at the soonest. Pure functions: the
//! sender's batching and the receiver's refusal live in `send` and `receive`.

use super::limits::{MAX_BATCH_BYTES, MAX_BATCH_ENTRIES};
use super::msg::Entry;
use super::ProtocolError;

impl Entry {
    /// What the entry counts toward a batch's [`MAX_BATCH_BYTES`]: its path, its
    /// extended attributes and a fixed 64 for the rest.
    pub fn batch_cost(&self) -> usize {
        let xattrs = self
            .xattrs
            .as_ref()
            .map_or(0, |x| x.bytes() + 8 * x.list().len());
        self.path.len() + 64 + xattrs
    }
}

/// Checks an `Entries` batch against the batch bounds a sender keeps: at most
/// [`MAX_BATCH_ENTRIES`], and [`MAX_BATCH_BYTES`] reached by the last entry at the soonest.
pub fn check_batch(entries: &[Entry]) -> Result<(), ProtocolError> {
    if entries.len() > MAX_BATCH_ENTRIES {
        return Err(ProtocolError::TooMany {
            what: "entries in one manifest batch",
            count: entries.len() as u64,
            max: MAX_BATCH_ENTRIES as u64,
        });
    }
    let before_last = entries.split_last().map_or(&[][..], |(_, rest)| rest);
    let cost: usize = before_last.iter().map(Entry::batch_cost).sum();
    if cost >= MAX_BATCH_BYTES {
        return Err(ProtocolError::TooMany {
            what: "bytes of manifest in one batch before its last entry",
            count: cost as u64,
            max: MAX_BATCH_BYTES as u64 - 1,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::EntryKind;

    fn small(id: u64, path_len: usize) -> Entry {
        Entry {
            id,
            path: vec![b'a'; path_len],
            kind: EntryKind::Dir,
            mode: 0o755,
            mtime_sec: 0,
            mtime_nsec: 0,
            uid: 0,
            gid: 0,
            xattrs: None,
            checksum: None,
        }
    }

    #[test]
    fn batches_beyond_the_senders_bounds_are_refused() {
        let at_most: Vec<Entry> = (0..2000).map(|i| small(i, 10)).collect();
        assert!(check_batch(&at_most).is_ok());
        let one_more: Vec<Entry> = (0..2001).map(|i| small(i, 10)).collect();
        assert!(matches!(
            check_batch(&one_more),
            Err(ProtocolError::TooMany {
                count: 2001,
                max: 2000,
                ..
            })
        ));
        // 1 MiB may be reached by the last entry, not before it.
        let cost = small(0, 4000).batch_cost();
        let n = (MAX_BATCH_BYTES / cost) as u64;
        let crossing: Vec<Entry> = (0..=n).map(|i| small(i, 4000)).collect();
        assert!(check_batch(&crossing).is_ok());
        let beyond: Vec<Entry> = (0..=n + 1).map(|i| small(i, 4000)).collect();
        assert!(check_batch(&beyond).is_err());
    }
}
