//! Unit tests of the store against a hostile local user: someone who can write a
//! directory inside the destination and swaps or plants files while the receiver works.
//! Races are made deterministic with `fsops::race_point`.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::Duration;

use super::fsops;
use super::state::Store;
use crate::protocol::{Entry, EntryKind, SyncOptions, Want, WantKind};

const NOBODY: u32 = 65534;
const MIB: u64 = 1 << 20;
const MTIME: i64 = 1_700_000_000;

fn entry(id: u64, path: &str, kind: EntryKind, mode: u32) -> Entry {
    Entry {
        id,
        path: path.as_bytes().to_vec(),
        kind,
        mode,
        mtime_sec: MTIME,
        mtime_nsec: 7,
        uid: 0,
        gid: 0,
    }
}

fn file(size: u64) -> EntryKind {
    EntryKind::File {
        size,
        data_bytes: size,
    }
}

/// A store on `dir` with a 1 MiB block size and default options.
fn store(dir: &Path) -> Store {
    let s = Store::open(dir).unwrap();
    s.configure(MIB, SyncOptions::default(), [9u8; 32]);
    s
}

/// Runs `f` at race point `point` (once), on this thread.
fn at_point(point: &'static str, f: impl FnOnce() + 'static) {
    let mut f = Some(f);
    fsops::RACE.with(|r| {
        *r.borrow_mut() = Some(Box::new(move |p: &str| {
            if p == point {
                if let Some(f) = f.take() {
                    f()
                }
            }
        }))
    });
}

fn no_race() {
    fsops::RACE.with(|r| *r.borrow_mut() = None);
}

fn mode_of(p: &Path) -> u32 {
    fs::symlink_metadata(p).unwrap().mode() & 0o7777
}

fn set_mtime(p: &Path) {
    let t = std::time::UNIX_EPOCH + Duration::new(MTIME as u64, 7);
    fs::File::options()
        .write(true)
        .open(p)
        .unwrap()
        .set_modified(t)
        .unwrap();
}

#[test]
fn quick_check_never_chmods_through_a_symlink_swapped_in() {
    let tmp = tempfile::tempdir().unwrap();
    let (root, victim) = (tmp.path().join("d"), tmp.path().join("victim"));
    fs::create_dir(&root).unwrap();
    fs::write(&victim, b"secret").unwrap();
    fs::set_permissions(&victim, fs::Permissions::from_mode(0o600)).unwrap();
    fs::write(root.join("f"), b"hello").unwrap();
    set_mtime(&root.join("f"));
    let s = store(&root);
    let (f, v) = (root.join("f"), victim.clone());
    at_point("quick-check", move || {
        fs::remove_file(&f).unwrap();
        std::os::unix::fs::symlink(&v, &f).unwrap();
    });
    let _ = s.apply_entries(vec![entry(1, "f", file(5), 0o4755)]);
    no_race();
    assert_eq!(mode_of(&victim), 0o600, "chmod followed a symlink");
}

#[test]
fn fifo_metadata_never_follows_a_symlink_swapped_in() {
    let tmp = tempfile::tempdir().unwrap();
    let (root, victim) = (tmp.path().join("d"), tmp.path().join("victim"));
    fs::create_dir(&root).unwrap();
    fs::write(&victim, b"secret").unwrap();
    fs::set_permissions(&victim, fs::Permissions::from_mode(0o600)).unwrap();
    let s = store(&root);
    let (t, v) = (
        root.join(std::str::from_utf8(&fsops::temp_name(b"p")).unwrap()),
        victim.clone(),
    );
    at_point("special-made", move || {
        fs::remove_file(&t).unwrap();
        std::os::unix::fs::symlink(&v, &t).unwrap();
    });
    let _ = s.apply_entries(vec![entry(1, "p", EntryKind::Fifo, 0o4777)]);
    no_race();
    assert_eq!(mode_of(&victim), 0o600, "chmod followed a symlink");
}

#[test]
fn symlink_owner_is_never_applied_to_a_file_swapped_in() {
    if !fsops::is_root() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("d");
    fs::create_dir(&root).unwrap();
    let s = store(&root);
    let t = root.join(std::str::from_utf8(&fsops::temp_name(b"l")).unwrap());
    at_point("special-made", move || {
        fs::remove_file(&t).unwrap();
        fs::write(&t, b"#!/bin/sh\n").unwrap();
        std::os::unix::fs::chown(&t, Some(NOBODY), Some(NOBODY)).unwrap();
    });
    let link = EntryKind::Symlink {
        target: b"elsewhere".to_vec(),
    };
    let _ = s.apply_entries(vec![entry(1, "l", link, 0o777)]);
    no_race();
    let published = fs::symlink_metadata(root.join("l"));
    assert!(
        !published.is_ok_and(|m| m.is_file() && m.uid() == 0),
        "a planted file was given to root"
    );
}

#[test]
fn special_files_get_their_metadata() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("d");
    fs::create_dir(&root).unwrap();
    let s = store(&root);
    let link = EntryKind::Symlink {
        target: b"nowhere".to_vec(),
    };
    s.apply_entries(vec![
        entry(1, "p", EntryKind::Fifo, 0o640),
        entry(2, "l", link, 0o777),
    ])
    .unwrap();
    for name in ["p", "l"] {
        let m = fs::symlink_metadata(root.join(name)).unwrap();
        assert_eq!((m.mtime(), m.mtime_nsec()), (MTIME, 7), "{name}");
    }
    assert_eq!(mode_of(&root.join("p")), 0o640);
    assert_eq!(fs::read_link(root.join("l")).unwrap(), Path::new("nowhere"));
}

#[test]
fn delta_reads_an_old_version_that_cannot_be_written() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("d");
    fs::create_dir(&root).unwrap();
    // A running executable cannot be opened for writing, even by root (ETXTBSY).
    let old = root.join("tool");
    fs::copy("/bin/sleep", &old).unwrap();
    fs::set_permissions(&old, fs::Permissions::from_mode(0o755)).unwrap();
    let mut running = std::process::Command::new(&old).arg("30").spawn().unwrap();
    let s = Store::open(&root).unwrap();
    s.configure(16 << 10, SyncOptions::default(), [9u8; 32]);
    let size = fs::metadata(&old).unwrap().len() + 100_000;
    let r = s.apply_entries(vec![entry(1, "tool", file(size), 0o755)]);
    let _ = running.kill();
    let _ = running.wait();
    let need = r.unwrap();
    assert!(
        matches!(
            &need[..],
            [Want {
                id: 1,
                what: WantKind::Delta { .. }
            }]
        ),
        "{need:?}"
    );
}
