//! Directories opened once for their files (`dirs`): a hostile local user who swaps a
//! directory for a symlink, or plants a file in a directory this run made, gets nothing
//! written through the link and nothing of theirs used; the cache stays bounded.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::sync::Arc;

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
fn a_directory_swapped_for_a_symlink_is_never_written_through() {
    let tmp = tempfile::tempdir().unwrap();
    let (root, victim) = (tmp.path().join("d"), tmp.path().join("victim"));
    fs::create_dir(&root).unwrap();
    fs::create_dir(&victim).unwrap();
    let s = Arc::new(store(&root));
    s.start();
    s.apply_entries(vec![
        entry(1, "sub", EntryKind::Dir, 0o755),
        entry(2, "sub/a", file(5), 0o644),
        entry(3, "sub/b", file(5), 0o644),
    ])
    .unwrap();
    // The directory is moved aside and a symlink to the victim put in its place.
    fs::rename(root.join("sub"), root.join("moved")).unwrap();
    std::os::unix::fs::symlink(&victim, root.join("sub")).unwrap();
    write(&s, &[whole(2, 5)], b"hello").unwrap();
    write(&s, &[whole(3, 5)], b"world").unwrap();
    // Finishing may fail (the path now leads through a symlink); nothing went through it.
    let _ = s.finish();
    assert_eq!(
        fs::read_dir(&victim).unwrap().count(),
        0,
        "wrote through a symlink"
    );
    assert_eq!(fs::read(root.join("moved/a")).unwrap(), b"hello");
    assert_eq!(fs::read(root.join("moved/b")).unwrap(), b"world");
}

#[test]
fn a_file_planted_in_a_directory_this_run_made_is_replaced_not_used() {
    let tmp = tempfile::tempdir().unwrap();
    let (root, victim) = (tmp.path().join("d"), tmp.path().join("victim"));
    fs::create_dir(&root).unwrap();
    fs::write(&victim, b"secret").unwrap();
    let s = Arc::new(store(&root));
    s.start();
    s.apply_entries(vec![entry(1, "sub", EntryKind::Dir, 0o755)])
        .unwrap();
    // Planted after the directory was made, before its files are looked at.
    std::os::unix::fs::symlink(&victim, root.join("sub/a")).unwrap();
    fs::write(root.join("sub/b"), b"planted").unwrap();
    let need = s
        .apply_entries(vec![
            entry(2, "sub/a", file(5), 0o600),
            entry(3, "sub/b", file(7), 0o600),
        ])
        .unwrap();
    assert_eq!(need.len(), 2, "a planted file counted as an older version");
    write(&s, &[whole(2, 5)], b"hello").unwrap();
    write(&s, &[whole(3, 7)], b"theirs!").unwrap();
    s.finish().unwrap();
    assert_eq!(fs::read(&victim).unwrap(), b"secret");
    let a = fs::symlink_metadata(root.join("sub/a")).unwrap();
    assert!(a.file_type().is_file() && a.mode() & 0o7777 == 0o600);
    assert_eq!(fs::read(root.join("sub/a")).unwrap(), b"hello");
    assert_eq!(fs::read(root.join("sub/b")).unwrap(), b"theirs!");
}

#[test]
fn an_existing_directory_still_gets_its_quick_check() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("d");
    fs::create_dir_all(root.join("sub")).unwrap();
    let s = Arc::new(store(&root));
    s.start();
    let e = entry(2, "sub/a", file(5), 0o644);
    fs::write(root.join("sub/a"), b"hello").unwrap();
    let t = std::time::UNIX_EPOCH + std::time::Duration::new(e.mtime_sec as u64, e.mtime_nsec);
    let f = fs::File::options()
        .write(true)
        .open(root.join("sub/a"))
        .unwrap();
    f.set_modified(t).unwrap();
    let need = s
        .apply_entries(vec![entry(1, "sub", EntryKind::Dir, 0o755), e])
        .unwrap();
    assert!(need.is_empty(), "an unchanged file was asked for");
    s.finish().unwrap();
}

#[test]
fn the_cache_holds_a_bounded_number_of_directories() {
    let tmp = tempfile::tempdir().unwrap();
    let s = Arc::new(store(tmp.path()));
    s.start();
    let mut entries = Vec::new();
    for i in 0..600u64 {
        entries.push(entry(2 * i + 1, &format!("d{i}"), EntryKind::Dir, 0o755));
        entries.push(entry(2 * i + 2, &format!("d{i}/f"), file(1), 0o644));
    }
    let need = s.apply_entries(entries).unwrap();
    assert_eq!(need.len(), 600);
    assert!(
        s.dir_cache.len() <= 256,
        "{} directories held",
        s.dir_cache.len()
    );
    for i in 0..600u64 {
        write(&s, &[whole(2 * i + 2, 1)], b"x").unwrap();
    }
    s.finish().unwrap();
    for i in 0..600u64 {
        assert_eq!(fs::read(tmp.path().join(format!("d{i}/f"))).unwrap(), b"x");
    }
}
