//! Unit tests of the file-mode sender's own helpers.

use super::*;
use crate::protocol::check_batch;

fn entry(id: u64, path_len: usize) -> Entry {
    Entry {
        id,
        path: vec![b'a'; path_len],
        kind: EntryKind::File {
            size: 1,
            data_bytes: 1,
        },
        mode: 0o644,
        mtime_sec: 0,
        mtime_nsec: 0,
        uid: 0,
        gid: 0,
        xattrs: None,
        checksum: None,
    }
}

#[test]
fn files_sent_again_go_in_batches_the_receiver_takes() {
    // Before, all changed files went in one batch, which a receiver now refuses
    // beyond 2,000 entries.
    let many: Vec<Entry> = (0..4500).map(|i| entry(i, 8)).collect();
    let sizes: Vec<usize> = in_batches(many).iter().map(Vec::len).collect();
    assert_eq!(sizes, [2000, 2000, 500]);
    let long: Vec<Entry> = (0..600).map(|i| entry(i, 4000)).collect();
    let batches = in_batches(long);
    assert!(batches.len() > 1);
    assert_eq!(batches.iter().map(Vec::len).sum::<usize>(), 600);
    for b in &batches {
        assert!(check_batch(b).is_ok(), "{} entries", b.len());
    }
}
