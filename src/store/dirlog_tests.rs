//! Unit tests of the directory log: every record comes back once, deepest first, and the
//! memory it holds stays bounded however many directories are recorded.

use std::io;
use std::os::fd::OwnedFd;

use proptest::prelude::*;

use super::super::tests::entry;
use super::*;
use crate::protocol::EntryKind;

fn dir_fd(d: &tempfile::TempDir) -> OwnedFd {
    OwnedFd::from(File::open(d.path()).unwrap())
}

fn path(s: &str) -> SafeRelPath {
    SafeRelPath::parse(s.as_bytes()).unwrap()
}

/// `n` directories spread over depths 1 to 7, recorded shallow and deep mixed.
fn record(log: &mut DirLog, n: usize) -> Vec<String> {
    let mut names = Vec::new();
    for i in 0..n {
        let depth = 1 + (i * 7919) % 7;
        let p: Vec<String> = (0..depth).map(|d| format!("d{d}_{}", i % 97)).collect();
        let p = format!("{}/x{i}", p.join("/"));
        log.meta(path(&p), entry(i as u64, &p, EntryKind::Dir, 0o755));
        names.push(p);
    }
    names
}

fn read_back(log: &DirLog) -> Vec<(usize, String)> {
    let mut got = Vec::new();
    log.deepest_first(
        |e| e,
        |r| {
            match r {
                DirRecord::Meta(p, e) => {
                    assert_eq!(e.path, p.as_bytes(), "the entry comes back with its path");
                    got.push((p.components().count(), p.display()));
                }
                DirRecord::Sync(p) => {
                    got.push((p.components().count(), format!("sync {}", p.display())))
                }
            }
            Ok::<(), io::Error>(())
        },
    )
    .unwrap();
    got
}

#[test]
fn every_directory_comes_back_once_deepest_first_from_disk() {
    let d = tempfile::tempdir().unwrap();
    let mut log = DirLog::new(Some(dir_fd(&d)));
    let names = record(&mut log, 60_000);
    assert!(log.file.is_some(), "the records went to an anonymous file");
    let got = read_back(&log);
    assert_eq!(got.len(), names.len());
    assert!(
        got.windows(2).all(|w| w[0].0 >= w[1].0),
        "deepest first throughout"
    );
    let mut want = names.clone();
    let mut have: Vec<String> = got.into_iter().map(|(_, p)| p).collect();
    want.sort();
    have.sort();
    assert_eq!(have, want, "each directory once");
    assert_eq!(log.dir_paths().unwrap().len(), names.len());
    // Nothing was left in the destination: the file had no name.
    assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 0);
}

#[test]
fn memory_stays_bounded_however_many_directories() {
    let d = tempfile::tempdir().unwrap();
    let mut log = DirLog::new(Some(dir_fd(&d)));
    record(&mut log, 200_000);
    let on_disk = log.end as usize;
    assert!(on_disk > 4 * PENDING_MAX, "{on_disk} bytes written out");
    assert!(
        log.held() <= PENDING_MAX + 4096,
        "{} bytes held in memory",
        log.held()
    );
    let chunks: usize = log.chunks.values().map(Vec::len).sum();
    assert!(chunks < 200, "{chunks} chunks indexed");
}

#[test]
fn without_an_anonymous_file_everything_stays_in_memory_and_still_comes_back() {
    let mut log = DirLog::new(None);
    let names = record(&mut log, 30_000);
    assert!(log.file.is_none());
    assert!(log.held() > PENDING_MAX, "kept in memory");
    let got = read_back(&log);
    assert_eq!(got.len(), names.len());
    assert!(got.windows(2).all(|w| w[0].0 >= w[1].0));
}

#[test]
fn a_directory_an_entry_was_made_in_is_synced_once() {
    let mut log = DirLog::new(None);
    log.meta(path("a"), entry(1, "a", EntryKind::Dir, 0o755));
    // Entries made in the root, then in a (whose own record already syncs it), then in b.
    for _ in 0..100 {
        log.touch(&SafeRelPath::root());
        log.touch(&path("a"));
    }
    for _ in 0..100 {
        log.touch(&path("a/b"));
    }
    // A directory touched between the entries of many others is still recorded once.
    for i in 0..5 * RECENT {
        log.touch(&path(&format!("a/c{i}")));
        log.touch(&path("a/b"));
    }
    let got = read_back(&log);
    assert_eq!(got.len(), 3 + 5 * RECENT);
    let got: Vec<_> = got
        .into_iter()
        .filter(|(_, p)| !p.starts_with("sync a/c"))
        .collect();
    assert_eq!(
        got,
        vec![
            (2, "sync a/b".to_string()),
            (1, "a".to_string()),
            (0, "sync ".to_string() + &SafeRelPath::root().display()),
        ]
    );
}

#[test]
fn a_record_that_does_not_decode_is_an_error_not_a_panic() {
    let mut log = DirLog::new(None);
    log.pending.insert(1, vec![0, 200, 1, 2]);
    let r = log.deepest_first(|e| e, |_| Ok::<(), io::Error>(()));
    let e = r.unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidData);
    assert!(e.to_string().contains("directory log"), "{e}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Whatever the order and mix of records, and however small the chunks, each comes
    /// back once, deepest first, and within a depth in the order recorded.
    #[test]
    fn any_records_come_back_once_deepest_first_in_order_within_a_depth(
        recs in proptest::collection::vec((0usize..6, 0u32..50, any::<bool>()), 0..400),
        spill_at in 1usize..4096,
        on_disk in any::<bool>(),
    ) {
        let d = tempfile::tempdir().unwrap();
        let mut log = DirLog::new(on_disk.then(|| dir_fd(&d)));
        log.spill_at = spill_at;
        let mut want: Vec<(usize, String)> = Vec::new();
        for (i, (depth, name, meta)) in recs.iter().enumerate() {
            let p: Vec<String> = (0..*depth).map(|l| format!("n{}", name + l as u32)).collect();
            let p = p.join("/");
            let sp = path(&p);
            if *meta {
                want.push((*depth, format!("meta {} {i}", sp.display())));
                log.meta(sp, entry(i as u64, &format!("./{p}"), EntryKind::Dir, 0o700));
            } else if !log.recent.contains(&sp) && !log.older.contains(&sp) {
                log.touch(&sp);
                want.push((*depth, format!("sync {}", sp.display())));
            } else {
                log.touch(&sp);
            }
        }
        let mut got = Vec::new();
        log.deepest_first(|e| e, |r| {
            got.push(match r {
                DirRecord::Meta(p, e) => {
                    assert_eq!(e.path, p.as_bytes());
                    (p.components().count(), format!("meta {} {}", p.display(), e.id))
                }
                DirRecord::Sync(p) => (p.components().count(), format!("sync {}", p.display())),
            });
            Ok::<(), io::Error>(())
        }).unwrap();
        // Stable: by depth, deepest first, then in the order recorded.
        want.sort_by_key(|(depth, _)| std::cmp::Reverse(*depth));
        prop_assert_eq!(got, want);
    }
}
