//! Unit tests of the store against a hostile local user: someone who can write a
//! directory inside the destination and swaps or plants files while the receiver works.
//! Races are made deterministic with `fsops::race_point`.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use super::fsops;
use super::state::{Store, WriterCache};
use crate::codec::{unit_hash, Decoder};
use crate::error::Result;
use crate::protocol::{
    encode_data_header, hashed_parts, set_hash, Codec, DataHeader, Entry, EntryKind, Segment,
    SyncOptions, Want, WantKind,
};

const NOBODY: u32 = 65534;
const MIB: u64 = 1 << 20;
const MTIME: i64 = 1_700_000_000;

pub(super) fn entry(id: u64, path: &str, kind: EntryKind, mode: u32) -> Entry {
    Entry {
        id,
        path: path.as_bytes().to_vec(),
        kind,
        mode,
        mtime_sec: MTIME,
        mtime_nsec: 7,
        uid: 0,
        gid: 0,
        xattrs: None,
        checksum: None,
    }
}

pub(super) fn file(size: u64) -> EntryKind {
    EntryKind::File {
        size,
        data_bytes: size,
    }
}

/// A store on `dir` with a 1 MiB block size, default options and journal key `key`
/// (never the real state directory's).
fn store_with(dir: &Path, key: [u8; 32]) -> Store {
    let s = Store::open(dir).unwrap();
    s.configure(MIB, SyncOptions::default(), [9u8; 32]);
    s.journal_key.set(Some(key)).unwrap();
    s
}

pub(super) fn store(dir: &Path) -> Store {
    store_with(dir, [1u8; 32])
}

/// Runs `f` at race point `point` (once), on this thread.
pub(super) fn at_point(point: &'static str, f: impl FnOnce() + 'static) {
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

pub(super) fn no_race() {
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

/// Writes `raw` as one verified unit with segments `segs`.
pub(super) fn write(store: &Store, segs: &[Segment], raw: &[u8]) -> Result<()> {
    let key = [3u8; 32];
    let mut payload = Vec::new();
    encode_data_header(&mut payload, Codec::Raw, raw.len() as u32, segs);
    let hash = unit_hash(&key, hashed_parts(&payload), raw);
    set_hash(&mut payload, &hash);
    payload.extend_from_slice(raw);
    let h = DataHeader::parse(&payload).unwrap();
    let mut dec = Decoder::new(key);
    let unit = dec.decode(&h).unwrap();
    store.write_unit(&unit, h.segments(), &mut WriterCache::default())
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

/// Plants what a local user can make: a partial file of her own and a journal whose
/// header she computed (BLAKE3 of the source's size and mtime) claiming all of it.
fn plant_resume_files(root: &Path, name: &[u8], size: u64, journal_is_fifo: bool) {
    let part = root.join(std::str::from_utf8(&fsops::partial_name(name)).unwrap());
    let jpath = root.join(std::str::from_utf8(&fsops::journal_name(name)).unwrap());
    fs::write(&part, vec![b'E'; size as usize]).unwrap();
    std::os::unix::fs::chown(&part, Some(NOBODY), Some(NOBODY)).unwrap();
    if journal_is_fifo {
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &jpath,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o666),
            0,
        )
        .unwrap();
        return;
    }
    let mut h = Vec::new();
    h.extend_from_slice(b"HAULJNL1");
    h.extend_from_slice(&size.to_le_bytes());
    h.extend_from_slice(&MTIME.to_le_bytes());
    h.extend_from_slice(&7u32.to_le_bytes());
    h.extend_from_slice(&0u32.to_le_bytes());
    h.extend_from_slice(&size.to_le_bytes());
    let check = blake3::hash(&h);
    h.extend_from_slice(&check.as_bytes()[..8]);
    super::journal::encode_records(&[(0, size as u32)], &mut h);
    fs::write(&jpath, h).unwrap();
    std::os::unix::fs::chown(&jpath, Some(NOBODY), Some(NOBODY)).unwrap();
}

#[test]
fn planted_partial_and_journal_are_not_trusted() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("d");
    fs::create_dir(&root).unwrap();
    plant_resume_files(&root, b"big", 2 * MIB, false);
    let s = store(&root);
    let need = s
        .apply_entries(vec![entry(1, "big", file(2 * MIB), 0o4755)])
        .unwrap();
    assert_eq!(
        need,
        [Want {
            id: 1,
            what: WantKind::All
        }]
    );
}

#[test]
fn fifo_named_as_the_journal_does_not_hang() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("d");
    fs::create_dir(&root).unwrap();
    plant_resume_files(&root, b"big", 2 * MIB, true);
    let s = Arc::new(store(&root));
    let (tx, rx) = std::sync::mpsc::channel();
    let s2 = Arc::clone(&s);
    std::thread::spawn(move || {
        let r = s2.apply_entries(vec![entry(1, "big", file(2 * MIB), 0o644)]);
        let _ = tx.send(r.map_err(|e| e.to_string()));
    });
    let need = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("the receiver hung on a FIFO")
        .unwrap();
    assert_eq!(
        need,
        [Want {
            id: 1,
            what: WantKind::All
        }]
    );
}

/// Starts a 2 MiB file in a store with key `[1; 32]` and makes its first MiB durable.
fn leave_half_done(root: &Path) {
    let s = store(root);
    s.apply_entries(vec![entry(1, "big", file(2 * MIB), 0o644)])
        .unwrap();
    let seg = Segment {
        file: 1,
        offset: 0,
        len: MIB as u32,
        keep: false,
    };
    write(&s, &[seg], &vec![1u8; MIB as usize]).unwrap();
    s.save_progress();
}

/// What a store with key `key` asks for of the 2 MiB file.
fn asked(root: &Path, key: [u8; 32]) -> WantKind {
    let s = store_with(root, key);
    let mut need = s
        .apply_entries(vec![entry(1, "big", file(2 * MIB), 0o644)])
        .unwrap();
    need.pop().unwrap().what
}

#[test]
fn leftovers_are_resumed_only_when_ours_with_one_link_and_our_key() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("d");
    fs::create_dir(&root).unwrap();
    let part = root.join(std::str::from_utf8(&fsops::partial_name(b"big")).unwrap());
    let jpath = root.join(std::str::from_utf8(&fsops::journal_name(b"big")).unwrap());

    leave_half_done(&root);
    assert_eq!(
        asked(&root, [1u8; 32]),
        WantKind::Ranges(vec![(MIB, 2 * MIB)])
    );
    leave_half_done(&root);
    assert_eq!(asked(&root, [2u8; 32]), WantKind::All, "another key");
    if fsops::is_root() {
        leave_half_done(&root);
        std::os::unix::fs::chown(&jpath, Some(NOBODY), None).unwrap();
        assert_eq!(asked(&root, [1u8; 32]), WantKind::All, "another owner");
    }
    leave_half_done(&root);
    fs::hard_link(&part, tmp.path().join("extra")).unwrap();
    assert_eq!(asked(&root, [1u8; 32]), WantKind::All, "a second link");
    // The planted files were replaced, not reused: the extra link kept the old inode.
    assert_ne!(
        fs::metadata(&part).unwrap().ino(),
        fs::metadata(tmp.path().join("extra")).unwrap().ino()
    );
}

#[test]
fn partial_file_swapped_after_creation_is_not_written() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("d");
    fs::create_dir(&root).unwrap();
    let s = store(&root);
    s.apply_entries(vec![entry(1, "big", file(2 * MIB), 0o644)])
        .unwrap();
    let part = root.join(std::str::from_utf8(&fsops::partial_name(b"big")).unwrap());
    fs::remove_file(&part).unwrap();
    fs::write(&part, b"mine").unwrap();
    if fsops::is_root() {
        std::os::unix::fs::chown(&part, Some(NOBODY), Some(NOBODY)).unwrap();
    }
    let seg = Segment {
        file: 1,
        offset: 0,
        len: 4096,
        keep: false,
    };
    assert!(write(&s, &[seg], &[1u8; 4096]).is_err());
    assert_eq!(fs::read(&part).unwrap(), b"mine");
}

#[test]
fn large_file_is_preallocated_only_when_its_data_arrives() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("d");
    fs::create_dir(&root).unwrap();
    let s = store(&root);
    s.apply_entries(vec![entry(1, "big", file(8 * MIB), 0o644)])
        .unwrap();
    let part = root.join(std::str::from_utf8(&fsops::partial_name(b"big")).unwrap());
    assert_eq!(
        fs::metadata(&part).unwrap().blocks(),
        0,
        "disk space taken before any data arrived"
    );
    let seg = Segment {
        file: 1,
        offset: 0,
        len: 4096,
        keep: false,
    };
    write(&s, &[seg], &[1u8; 4096]).unwrap();
    let m = fs::metadata(&part).unwrap();
    assert!(
        m.blocks() * 512 >= 8 * MIB,
        "not preallocated: {}",
        m.blocks()
    );
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
    let s = store(&root);
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

#[test]
fn single_bytes_with_gaps_end_the_transfer_at_a_bound() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("d");
    fs::create_dir(&root).unwrap();
    let s = store(&root);
    // What is bounded here is the range table, not the page cache: with the default
    // each 1-byte write waited for its page's writeback, ~2M synchronous writes that took
    // over 20 minutes on a loaded disk.
    s.set_keep_cache(true);
    let size = 4 * MIB;
    s.apply_entries(vec![entry(1, "big", file(size), 0o644)])
        .unwrap();
    let raw = [7u8; 4096];
    let mut offset = 0u64;
    let failed = loop {
        let segs: Vec<Segment> = (0..4096)
            .map(|i| Segment {
                file: 1,
                offset: offset + 2 * i,
                len: 1,
                keep: false,
            })
            .collect();
        offset += 2 * 4096;
        if write(&s, &segs, &raw).is_err() {
            break true;
        }
        if offset >= size {
            break false;
        }
    };
    assert!(failed, "2M disjoint ranges were accepted");
    assert!(offset <= 2 * ((1 << 20) + 4096), "bound passed: {offset}");
}

#[test]
fn devices_and_foreign_owners_get_their_metadata_as_root() {
    if !fsops::is_root() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("d");
    fs::create_dir(&root).unwrap();
    let s = store(&root);
    let mut fifo = entry(1, "p", EntryKind::Fifo, 0o2640);
    (fifo.uid, fifo.gid) = (NOBODY, NOBODY);
    let mut link = entry(
        2,
        "l",
        EntryKind::Symlink {
            target: b"p".to_vec(),
        },
        0o777,
    );
    (link.uid, link.gid) = (NOBODY, NOBODY);
    let null = EntryKind::Device {
        block: false,
        rdev: rustix::fs::makedev(1, 3),
    };
    let mut entries = vec![fifo, link];
    // Containers may forbid mknod of devices even to root.
    let devices = rustix::fs::mknodat(
        rustix::fs::CWD,
        tmp.path().join("probe"),
        rustix::fs::FileType::CharacterDevice,
        rustix::fs::Mode::from_raw_mode(0o600),
        rustix::fs::makedev(1, 3),
    )
    .is_ok();
    if devices {
        entries.push(entry(3, "null", null, 0o620));
    }
    s.apply_entries(entries).unwrap();
    let p = fs::symlink_metadata(root.join("p")).unwrap();
    assert_eq!((p.uid(), p.mode() & 0o7777), (NOBODY, 0o2640));
    let l = fs::symlink_metadata(root.join("l")).unwrap();
    assert_eq!((l.uid(), l.mtime()), (NOBODY, MTIME));
    assert!(l.file_type().is_symlink());
    if devices {
        let d = fs::symlink_metadata(root.join("null")).unwrap();
        assert_eq!(
            (d.mode() & 0o7777, d.rdev(), d.mtime()),
            (0o620, rustix::fs::makedev(1, 3), MTIME)
        );
    }
}

/// A store in `root` that received both 1 MiB blocks of file 1 ("big", `mode`, every byte
/// `byte`): complete and queued for a finisher, none started yet.
fn whole_file_queued(root: &std::path::Path, mode: u32, byte: u8) -> Arc<Store> {
    let s = Arc::new(store(root));
    s.apply_entries(vec![entry(1, "big", file(2 * MIB), mode)])
        .unwrap();
    for i in 0..2 {
        let seg = Segment {
            file: 1,
            offset: i * MIB,
            len: MIB as u32,
            keep: false,
        };
        write(&s, &[seg], &vec![byte; MIB as usize]).unwrap();
    }
    s
}

#[test]
fn partial_file_swapped_before_its_rename_is_not_published() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("d");
    fs::create_dir(&root).unwrap();
    let s = whole_file_queued(&root, 0o4755, 1);
    // Complete and queued; no finisher has run yet.
    let part = root.join(std::str::from_utf8(&fsops::partial_name(b"big")).unwrap());
    fs::remove_file(&part).unwrap();
    fs::write(&part, b"mine").unwrap();
    s.start();
    assert!(s.finish().is_err());
    assert!(
        fs::read(root.join("big")).map_or(true, |b| b != b"mine"),
        "a planted file was published"
    );
}

#[test]
fn resumed_ranges_merge_with_new_data() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("d");
    fs::create_dir(&root).unwrap();
    let unit = |offset: u64| Segment {
        file: 1,
        offset,
        len: MIB as u32,
        keep: false,
    };
    let data = vec![1u8; MIB as usize];
    let s = store(&root);
    s.apply_entries(vec![entry(1, "big", file(4 * MIB), 0o644)])
        .unwrap();
    write(&s, &[unit(0)], &data).unwrap();
    write(&s, &[unit(2 * MIB)], &data).unwrap();
    s.save_progress();
    drop(s);
    let s = Arc::new(store(&root));
    let need = s
        .apply_entries(vec![entry(1, "big", file(4 * MIB), 0o644)])
        .unwrap();
    let want = vec![(MIB, 2 * MIB), (3 * MIB, 4 * MIB)];
    assert_eq!(need[0].what, WantKind::Ranges(want));
    write(&s, &[unit(MIB)], &data).unwrap();
    write(&s, &[unit(3 * MIB)], &data).unwrap();
    s.start();
    s.finish().unwrap();
    assert_eq!(
        fs::read(root.join("big")).unwrap(),
        vec![1u8; 4 * MIB as usize]
    );
}

/// A transfer that stops (disk full on another file) while a file that arrived whole waits
/// for its finisher: saving progress finishes it first, so the next run does not send it
/// again (its journal's last records left with it when it left the files in progress).
#[test]
fn saving_progress_finishes_files_that_arrived_whole() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("d");
    fs::create_dir(&root).unwrap();
    let s = whole_file_queued(&root, 0o644, 7);
    // Complete and queued; the finishers start now and the transfer stops at once.
    s.start();
    s.save_progress();
    assert_eq!(
        fs::read(root.join("big")).unwrap(),
        vec![7u8; 2 * MIB as usize]
    );
    let left: Vec<_> = fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(
        left,
        vec![std::ffi::OsString::from("big")],
        "journal or part left"
    );
}
