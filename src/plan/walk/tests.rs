//! The walk's order, links and selection rules, on small trees in temporary directories.

use super::*;
use crate::protocol::EntryKind;

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
