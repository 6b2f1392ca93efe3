//! What the receiver keeps of files that wait for no more data: settled ids as ranges (a
//! duplicate is ignored, an id never announced is refused) and the `Arrived` report.

use super::tests::{entry, file, store, write};
use crate::protocol::{EntryKind, Segment};

fn whole(id: u64, len: u32) -> Segment {
    Segment {
        file: id,
        offset: 0,
        len,
        keep: false,
    }
}

#[test]
fn settled_ids_stay_ranges_and_arrived_files_are_reported_once() {
    let tmp = tempfile::tempdir().unwrap();
    let s = std::sync::Arc::new(store(tmp.path()));
    s.start();
    let need = s
        .apply_entries(vec![
            entry(1, "d", EntryKind::Dir, 0o755),
            entry(2, "d/a", file(10), 0o644),
            entry(3, "d/b", file(10), 0o644),
            entry(4, "d/empty", file(0), 0o644),
        ])
        .unwrap();
    assert_eq!(need.iter().map(|w| w.id).collect::<Vec<_>>(), [2, 3]);
    // The directory and the empty file wait for nothing; the two files do.
    assert!(s.is_settled(1) && s.is_settled(4));
    assert!(!s.is_settled(2) && !s.is_settled(3));
    assert!(s.take_arrived().is_empty());

    write(&s, &[whole(2, 10)], &[5; 10]).unwrap();
    assert!(s.is_settled(2));
    assert_eq!(s.take_arrived(), [2]);
    // A duplicate (re-sent after a reconnect) is ignored and reported no second time.
    write(&s, &[whole(2, 10)], &[5; 10]).unwrap();
    assert!(s.take_arrived().is_empty());
    // Data for an id no manifest announced is a protocol violation.
    assert!(write(&s, &[whole(99, 10)], &[5; 10]).is_err());

    write(&s, &[whole(3, 10)], &[6; 10]).unwrap();
    assert_eq!(s.take_arrived(), [3]);
    let ranges: Vec<(u64, u64)> = s
        .settled
        .lock()
        .unwrap()
        .iter()
        .map(|(&a, &b)| (a, b))
        .collect();
    assert_eq!(ranges, [(1, 5)], "every id settled, kept as one range");
    s.finish().unwrap();
    assert_eq!(std::fs::read(tmp.path().join("d/b")).unwrap(), [6; 10]);
}
