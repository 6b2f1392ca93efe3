//! The walk's order, links and selection rules, on small trees in temporary directories.

use super::*;
use crate::protocol::EntryKind;
use std::os::unix::fs::MetadataExt;

#[test]
fn rsync_trailing_slash_rule() {
    assert_eq!(
        Source::from_arg(Path::new("a/b")).dest_name,
        Some(b"b".to_vec())
    );
    assert_eq!(Source::from_arg(Path::new("a/b/")).dest_name, None);
    assert_eq!(Source::from_arg(Path::new(".")).dest_name, None);
    assert_eq!(Source::from_arg(Path::new("/")).dest_name, None);
}

#[test]
fn walk_emits_parents_first_and_links_once() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("t");
    fs::create_dir_all(root.join("a/b")).unwrap();
    fs::write(root.join("a/b/f"), b"x").unwrap();
    fs::hard_link(root.join("a/b/f"), root.join("a/g")).unwrap();
    std::os::unix::fs::symlink("nowhere", root.join("l")).unwrap();
    let mut got = Vec::new();
    walk(
        &[Source::from_arg(&root)],
        &Selection::default(),
        |w| {
            got.push(w.entry);
            true
        },
        |s| panic!("{s:?}"),
    )
    .unwrap();
    let paths: Vec<_> = got
        .iter()
        .map(|e| String::from_utf8_lossy(&e.path).into_owned())
        .collect();
    assert_eq!(paths, ["t", "t/a", "t/a/b", "t/a/b/f", "t/a/g", "t/l"]);
    assert!(matches!(&got[4].kind, EntryKind::Hardlink { target } if target == b"t/a/b/f"));
    assert!(matches!(&got[5].kind, EntryKind::Symlink { target } if target == b"nowhere"));
}

fn paths(sources: &[Source], select: &Selection) -> Vec<String> {
    let mut got = Vec::new();
    walk(
        sources,
        select,
        |w| {
            got.push(String::from_utf8_lossy(&w.entry.path).into_owned());
            true
        },
        |_| {},
    )
    .unwrap();
    got
}

#[test]
fn excluded_directories_are_not_descended() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("t");
    fs::create_dir_all(root.join("keep/skip/deep")).unwrap();
    fs::write(root.join("keep/skip/deep/f"), b"x").unwrap();
    fs::write(root.join("keep/g"), b"x").unwrap();
    let select = Selection {
        filter: vec![crate::protocol::FilterRule {
            include: false,
            pattern: b"skip/".to_vec(),
        }]
        .into(),
        ..Selection::default()
    };
    assert_eq!(
        paths(&[Source::from_arg(&root)], &select),
        ["t", "t/keep", "t/keep/g"]
    );
}

#[test]
fn one_file_system_stops_at_mount_points() {
    // /dev/pts is its own file system wherever a terminal layer exists.
    let (Ok(dev), Ok(pts)) = (fs::metadata("/dev"), fs::metadata("/dev/pts")) else {
        eprintln!("SKIPPED: no /dev/pts");
        return;
    };
    if dev.dev() == pts.dev() {
        eprintln!("SKIPPED: /dev/pts is not a mount point here");
        return;
    }
    let select = Selection {
        one_file_system: true,
        ..Selection::default()
    };
    let got = paths(&[Source::from_arg(Path::new("/dev/"))], &select);
    assert!(got.iter().any(|p| p == "pts"), "{got:?}");
    assert!(!got.iter().any(|p| p.starts_with("pts/")), "{got:?}");
    let all = paths(
        &[Source::from_arg(Path::new("/dev/"))],
        &Selection::default(),
    );
    assert!(all.iter().any(|p| p.starts_with("pts/")), "{all:?}");
}

/// A directory swapped for a symlink while its entries are walked: the rest of its
/// entries are read from the directory that was opened, never through the symlink.
#[test]
fn a_directory_swapped_for_a_symlink_mid_walk_is_not_followed() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("t");
    fs::create_dir_all(root.join("a")).unwrap();
    fs::write(root.join("a/1"), b"1").unwrap();
    fs::write(root.join("a/2"), b"22").unwrap();
    let elsewhere = dir.path().join("elsewhere");
    fs::create_dir(&elsewhere).unwrap();
    fs::write(elsewhere.join("2"), b"secret").unwrap();
    fs::write(elsewhere.join("3"), b"secret").unwrap();
    let mut got = Vec::new();
    walk(
        &[Source::from_arg(&root)],
        &Selection::default(),
        |w| {
            if w.entry.path == b"t/a/1" {
                fs::rename(root.join("a"), root.join("a.old")).unwrap();
                std::os::unix::fs::symlink(&elsewhere, root.join("a")).unwrap();
            }
            got.push(w.entry);
            true
        },
        |s| panic!("{s:?}"),
    )
    .unwrap();
    let paths: Vec<_> = got.iter().map(|e| e.path.as_slice()).collect();
    assert_eq!(paths, [&b"t"[..], b"t/a", b"t/a/1", b"t/a/2"]);
    assert!(
        matches!(got[3].kind, EntryKind::File { size: 2, .. }),
        "{:?}",
        got[3]
    );
}

/// A directory replaced (by a symlink, or by another directory) between its stat and its
/// opening is not walked; a path over 4096 bytes fails as it would by path.
#[test]
fn a_directory_replaced_after_its_stat_is_not_opened() {
    use std::os::fd::AsFd;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    fs::create_dir(d.join("a")).unwrap();
    fs::create_dir(d.join("other")).unwrap();
    let fd = fs::File::open(d).unwrap();
    let path = d.join("a");
    let at = at::At {
        path: &path,
        dir: Some(fd.as_fd()),
    };
    let meta = at.stat().unwrap();
    assert!(meta.is_dir());
    assert!(at.open_dir(&meta).is_ok());
    fs::rename(d.join("a"), d.join("a.old")).unwrap();
    std::os::unix::fs::symlink("other", d.join("a")).unwrap();
    let e = at.open_dir(&meta).unwrap_err();
    assert!(e.to_string().contains("replaced"), "{e}");
    fs::remove_file(d.join("a")).unwrap();
    fs::rename(d.join("other"), d.join("a")).unwrap();
    let e = at.open_dir(&meta).unwrap_err();
    assert!(e.to_string().contains("replaced"), "{e}");
    let long = d.join("x".repeat(4096));
    let e = at::At {
        path: &long,
        dir: Some(fd.as_fd()),
    }
    .stat()
    .unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ENAMETOOLONG));
}

/// A file that changed while being read is walked again only in the directory the walk
/// found it in: its directory swapped for a symlink (or for another directory) after the
/// walk fails then, instead of sending a file from outside the source.
#[test]
fn a_file_walked_again_is_looked_up_only_in_the_directory_it_was_found_in() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("t");
    fs::create_dir_all(root.join("a")).unwrap();
    fs::write(root.join("a/f"), b"mine").unwrap();
    let elsewhere = dir.path().join("elsewhere");
    fs::create_dir(&elsewhere).unwrap();
    fs::write(elsewhere.join("f"), b"secret!").unwrap();
    let mut data = None;
    walk(
        &[Source::from_arg(&root)],
        &Selection::default(),
        |w| {
            if w.entry.path == b"t/a/f" {
                data = w.data;
            }
            true
        },
        |s| panic!("{s:?}"),
    )
    .unwrap();
    let d = data.unwrap();
    assert!(d.parent.is_some());
    let again = |id| file_again(id, &d.path, d.dest.clone(), false, &d.at, d.parent);
    // Changed in place: found again, as it is now.
    fs::write(root.join("a/f"), b"mine, longer").unwrap();
    let w = again(9).unwrap().unwrap();
    assert!(matches!(w.entry.kind, EntryKind::File { size: 12, .. }));
    // Its directory swapped for a symlink to another one.
    fs::rename(root.join("a"), root.join("a.old")).unwrap();
    std::os::unix::fs::symlink(&elsewhere, root.join("a")).unwrap();
    let e = again(10).unwrap_err();
    assert!(e.to_string().contains("replaced"), "{e}");
    // Or for another directory.
    fs::remove_file(root.join("a")).unwrap();
    fs::create_dir(root.join("a")).unwrap();
    fs::write(root.join("a/f"), b"other").unwrap();
    assert!(again(11).is_err());
}

/// The descriptors this process has open on `path` (what `/proc/self/fd` links to).
fn open_on(path: &Path) -> usize {
    fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| fs::read_link(e.ok()?.path()).ok())
        .filter(|l| l == path)
        .count()
}

fn mkfifo(path: &Path) {
    rustix::fs::mknodat(
        rustix::fs::CWD,
        path,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .unwrap();
}

/// The sender opens each file again after the walk, by then perhaps long after: a
/// directory swapped for a symlink to outside the source in between must not make it
/// open what the symlink leads to (here a FIFO with no writer, which an open by path with
/// `O_NONBLOCK` opened: as root, a device node opened may act). The error says why.
#[test]
fn a_directory_swapped_for_a_symlink_after_the_walk_is_not_opened_through() {
    use std::os::unix::fs::OpenOptionsExt;
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("t");
    fs::create_dir_all(root.join("a/b")).unwrap();
    fs::write(root.join("a/b/f"), b"mine").unwrap();
    // Outside the source, what `t/a/b/f` leads to once `t/a` or `t/a/b` is a symlink.
    let outside = dir.path().join("outside");
    fs::create_dir_all(outside.join("b")).unwrap();
    mkfifo(&outside.join("b/f"));
    for (swapped, target) in [("a/b", outside.join("b")), ("a", outside.clone())] {
        let mut data = None;
        walk(
            &[Source::from_arg(&root)],
            &Selection::default(),
            |w| {
                if w.entry.path == b"t/a/b/f" {
                    data = w.data;
                }
                true
            },
            |s| panic!("{s:?}"),
        )
        .unwrap();
        let d = data.unwrap();
        // Between the walk and the sender's open.
        let moved = root.join(format!("{swapped}.old"));
        fs::rename(root.join(swapped), &moved).unwrap();
        std::os::unix::fs::symlink(&target, root.join(swapped)).unwrap();
        let fifo = outside.join("b/f");
        // What an open by the file's path does: it opens the FIFO outside.
        let by_path = fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(&d.path)
            .unwrap();
        assert_eq!(open_on(&fifo), 1);
        drop(by_path);
        let e = d.at.open_file().unwrap_err();
        let says = "its directory was replaced since the walk (by a symlink?); not followed";
        assert!(e.to_string().contains(says), "{swapped}: {e}");
        assert_eq!(open_on(&fifo), 0, "{swapped}");
        // Walked again (as after a change while read): refused the same way.
        let again = file_again(7, &d.path, d.dest.clone(), true, &d.at, d.parent);
        let e = again.unwrap_err();
        assert!(e.to_string().contains(says), "{swapped}: {e}");
        fs::remove_file(root.join(swapped)).unwrap();
        fs::rename(&moved, root.join(swapped)).unwrap();
    }
}

/// A source named as a single file is opened again only in the directory the walk found
/// it in.
#[test]
fn a_single_file_source_is_opened_again_only_in_its_directory() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("d");
    fs::create_dir(&d).unwrap();
    fs::write(d.join("f"), b"mine").unwrap();
    let mut data = None;
    walk(
        &[Source::from_arg(&d.join("f"))],
        &Selection::default(),
        |w| {
            data = w.data;
            true
        },
        |s| panic!("{s:?}"),
    )
    .unwrap();
    let data = data.unwrap();
    assert!(data.at.open_file().is_ok());
    let outside = dir.path().join("outside");
    fs::create_dir(&outside).unwrap();
    fs::write(outside.join("f"), b"secret").unwrap();
    fs::rename(&d, dir.path().join("d.old")).unwrap();
    std::os::unix::fs::symlink(&outside, &d).unwrap();
    let e = data.at.open_file().unwrap_err();
    assert!(e.to_string().contains("replaced"), "{e}");
}
