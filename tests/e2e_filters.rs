//! Filters and symlinks against rsync itself: each case builds the same tree, runs
//! `rsync -a ARGS` and `haul copy ARGS` (local) into fresh directories and compares what
//! arrived, name by name (type, symlink target, file contents). The cases are rsync's
//! documented pattern rules, a DBA's excludes for a PostgreSQL directory, include-then-
//! exclude, the `-from` files, `--delete` keeping excluded destination entries, `-L` and
//! `--copy-unsafe-links`; and one pull over ssh with excludes and `--delete`.
//!
//! A case prints `SKIPPED` when rsync is not installed; under CI that is a failure.

mod support;

use std::ffi::OsStr;
use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::Command;

use support::sshd::Sshd;
use support::*;

/// A PostgreSQL-like data directory with the names the rules below pick at.
fn pg_tree(root: &Path) -> PathBuf {
    let d = root.join("data");
    for dir in [
        "pg_replslot/slot1",
        "pg_replslot/slot2",
        "lost+found",
        "base/1",
        "log/sub",
        "foo/bar",
        "x/foo/bar",
        "cache/deep",
        "empty",
    ] {
        fs::create_dir_all(d.join(dir)).unwrap();
    }
    for (f, body) in [
        ("postmaster.pid", "4242\n"),
        ("PG_VERSION", "16\n"),
        ("postgresql.conf", "shared_buffers = 1GB\n"),
        ("pg_hba.conf", "local all all peer\n"),
        ("pg_replslot/slot1/state", "s1"),
        ("pg_replslot/slot2/state", "s2"),
        ("base/1/123", "rel"),
        ("base/1/124.tmp", "tmp"),
        ("base/x.conf", "x"),
        // A file named like the directory rule below: `lost+found/` must not match it.
        ("base/lost+found", "file, not dir"),
        ("log/a.log", "a"),
        ("log/keep.log", "keep"),
        ("log/sub/b.log", "b"),
        ("foo/bar/f", "f"),
        ("x/foo/bar/g", "g"),
        ("cache/deep/c", "c"),
        ("cache/top", "t"),
    ] {
        fs::write(d.join(f), body).unwrap();
    }
    d
}

/// Every entry below `dir`, sorted: `name/` for a directory, `name -> target` for a
/// symlink, `name = contents` for a file.
fn listing(dir: &Path) -> Vec<String> {
    fn walk(base: &Path, dir: &Path, out: &mut Vec<String>) {
        let mut names: Vec<_> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        names.sort();
        for p in names {
            let rel = p.strip_prefix(base).unwrap().display().to_string();
            let meta = fs::symlink_metadata(&p).unwrap();
            if meta.file_type().is_symlink() {
                out.push(format!("{rel} -> {}", fs::read_link(&p).unwrap().display()));
            } else if meta.is_dir() {
                out.push(format!("{rel}/"));
                walk(base, &p, out);
            } else {
                let body = String::from_utf8_lossy(&fs::read(&p).unwrap()).into_owned();
                out.push(format!("{rel} = {body}"));
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out
}

/// Runs `rsync -a ARGS SRC DST/` and `haul copy ARGS SRC DST/` (into two fresh copies
/// of `prefill`'s destination) and returns their exit codes and what arrived.
struct Both {
    rsync: (i32, Vec<String>),
    haul: (i32, Vec<String>),
    stderr: String,
}

fn run_both(src: &Path, args: &[&str], prefill: impl Fn(&Path)) -> Both {
    let tmp = tempfile::tempdir().unwrap();
    let (r, h) = (tmp.path().join("rsync"), tmp.path().join("haul"));
    for d in [&r, &h] {
        fs::create_dir(d).unwrap();
        prefill(d);
    }
    let out = Command::new("rsync")
        .arg("-a")
        .args(args)
        .arg(src)
        .arg(with_slash(&r))
        .output()
        .unwrap();
    let rsync_code = out.status.code().unwrap_or(-1);
    let mut all: Vec<&OsStr> = vec![OsStr::new("copy"), OsStr::new("-q")];
    all.extend(args.iter().map(OsStr::new));
    all.push(src.as_os_str());
    let hs = with_slash(&h);
    all.push(hs.as_os_str());
    let got = Haul::new().run(&all);
    Both {
        rsync: (rsync_code, listing(&r)),
        haul: (got.code().unwrap_or(-1), listing(&h)),
        stderr: got.describe(),
    }
}

fn assert_same(what: &str, b: &Both) {
    assert_eq!(
        b.haul, b.rsync,
        "{what}: haul (left) and rsync (right) differ\n{}",
        b.stderr
    );
}

#[test]
fn patterns_select_what_rsync_selects() {
    if !have_rsync() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let data = pg_tree(tmp.path());
    let data_slash = with_slash(&data);
    let list = tmp.path().join("excludes");
    fs::write(
        &list,
        "# a DBA's list\npostmaster.pid\n; another comment\n\npg_replslot/*\n+ keep.log\n*.log\n",
    )
    .unwrap();
    let list = list.to_str().unwrap();
    let cases: &[(&str, &Path, &[&str])] = &[
        (
            "plain name at any depth",
            &data,
            &["--exclude", "postmaster.pid"],
        ),
        (
            "contents of a directory",
            &data,
            &["--exclude", "pg_replslot/*"],
        ),
        (
            "directory only (trailing slash)",
            &data,
            &["--exclude", "lost+found/"],
        ),
        (
            "the three together",
            &data_slash,
            &[
                "--exclude",
                "postmaster.pid",
                "--exclude",
                "pg_replslot/*",
                "--exclude",
                "lost+found",
            ],
        ),
        (
            "anchored under a named source",
            &data,
            &["--exclude", "/data/log"],
        ),
        (
            "anchored at the contents' root",
            &data_slash,
            &["--exclude", "/log"],
        ),
        ("anchored: not at depth", &data_slash, &["--exclude", "/1"]),
        (
            "infix slash matches at any depth",
            &data,
            &["--exclude", "foo/bar"],
        ),
        (
            "star does not cross a slash",
            &data_slash,
            &["--exclude", "/*.conf"],
        ),
        ("double star does", &data_slash, &["--exclude", "/**.conf"]),
        (
            "double star in the middle",
            &data,
            &["--exclude", "data/**/b.log"],
        ),
        (
            "everything below, not the dir",
            &data_slash,
            &["--exclude", "cache/**"],
        ),
        (
            "dir and all below (***)",
            &data_slash,
            &["--exclude", "cache/***"],
        ),
        (
            "question mark and class",
            &data,
            &["--exclude", "12?", "--exclude", "[pP][gG]_hba.*"],
        ),
        (
            "include then exclude",
            &data,
            &["--include", "*/", "--include", "*.conf", "--exclude", "*"],
        ),
        (
            "first match wins (include first)",
            &data,
            &["--include", "keep.log", "--exclude", "*.log"],
        ),
        (
            "first match wins (exclude first)",
            &data,
            &["--exclude", "*.log", "--include", "keep.log"],
        ),
        (
            "exclude-from with comments and +",
            &data,
            &["--exclude-from", list],
        ),
        (
            "exclude-from between options",
            &data,
            &[
                "--include",
                "a.log",
                "--exclude-from",
                list,
                "--exclude",
                "*.conf",
            ],
        ),
        ("the source itself", &data, &["--exclude", "data"]),
    ];
    for (what, src, args) in cases {
        let b = run_both(src, args, |_| {});
        assert_same(what, &b);
        assert_eq!(b.haul.0, 0, "{what}: {}", b.stderr);
    }
}

#[test]
fn files_from_sends_the_listed_paths_with_their_parents() {
    if !have_rsync() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let data = pg_tree(tmp.path());
    let list = tmp.path().join("list");
    fs::write(
        &list,
        "# what to copy\nbase/1/123\nlog\n/postgresql.conf\n./x/foo/../foo/bar/\n",
    )
    .unwrap();
    let list = list.to_str().unwrap();
    // With -r: rsync's -r with --files-from.
    let tmp2 = tempfile::tempdir().unwrap();
    let r = tmp2.path().join("r");
    let st = Command::new("rsync")
        .args(["-a", "-r", "--files-from", list])
        .arg(&data)
        .arg(&r)
        .status()
        .unwrap();
    assert!(st.success());
    let h = tmp2.path().join("h");
    let out = copy(
        &[&data],
        &h,
        &["-q", "-r", "--files-from", list, "--exclude", "sub/"],
    );
    out.assert_code(0);
    let want: Vec<String> = listing(&r)
        .into_iter()
        .filter(|l| !l.starts_with("log/sub"))
        .collect();
    assert_eq!(listing(&h), want);
    // A listed path that does not exist is reported (exit 23), the rest still arrives.
    fs::write(tmp.path().join("list2"), "missing\nPG_VERSION\n").unwrap();
    let h2 = tmp2.path().join("h2");
    let out = copy(
        &[&data],
        &h2,
        &["--files-from", tmp.path().join("list2").to_str().unwrap()],
    );
    out.assert_code(23);
    assert!(out.stderr.contains("missing"), "{}", out.describe());
    assert_eq!(listing(&h2), ["PG_VERSION = 16\n"]);
    // And refused where it would be ambiguous.
    let out = copy(&[&data, &data], &h2, &["--files-from", list]);
    out.assert_code(2);
    let out = copy(&[&data], &h2, &["--files-from", list, "--delete"]);
    out.assert_code(2);
}

/// What the destination holds before a `--delete` run: things the source lacks, some of
/// them excluded.
fn stale_destination(d: &Path) {
    let d = d.join("data");
    fs::create_dir_all(d.join("pg_replslot/old_slot")).unwrap();
    fs::create_dir_all(d.join("log/gone_dir")).unwrap();
    fs::create_dir_all(d.join("lost+found/recovered")).unwrap();
    fs::write(d.join("postmaster.pid"), "999\n").unwrap();
    fs::write(d.join("pg_replslot/old_slot/state"), "old").unwrap();
    fs::write(d.join("extra.txt"), "extra").unwrap();
    fs::write(d.join("log/old.log"), "old").unwrap();
    fs::write(d.join("log/gone_dir/x"), "x").unwrap();
    fs::write(d.join("stale.conf"), "stale").unwrap();
}

#[test]
fn delete_leaves_excluded_destination_entries_alone() {
    if !have_rsync() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let data = pg_tree(tmp.path());
    for args in [
        &[
            "--delete",
            "--exclude",
            "postmaster.pid",
            "--exclude",
            "pg_replslot/*",
            "--exclude",
            "lost+found/",
        ][..],
        &["--delete", "--exclude", "*.log", "--exclude", "/data/x"],
        &[
            "--delete",
            "--include",
            "*/",
            "--include",
            "*.conf",
            "--exclude",
            "*",
        ],
    ] {
        let b = run_both(&data, args, stale_destination);
        assert_same(&format!("{args:?}"), &b);
        assert_eq!(b.haul.0, 0, "{}", b.stderr);
    }
    // Without rules, --delete still removes what the source lacks.
    let b = run_both(&data, &["--delete"], stale_destination);
    assert_same("no rules", &b);
    assert!(!b.haul.1.iter().any(|l| l.starts_with("data/extra.txt")));
}

/// A tree with every kind of symlink rsync's link options tell apart.
fn link_tree(root: &Path) -> PathBuf {
    let data = pg_tree(root);
    let wal = root.join("wal_disk/pg_wal");
    fs::create_dir_all(&wal).unwrap();
    fs::write(wal.join("000000010000000000000001"), "wal").unwrap();
    fs::write(root.join("outside_file"), "outside").unwrap();
    symlink(&wal, data.join("pg_wal")).unwrap(); // absolute, outside
    symlink("../PG_VERSION", data.join("base/up")).unwrap(); // relative, inside
                                                             // Above `data/`, but not above `data`'s parent: unsafe only for the contents form.
    symlink("../../outside_file", data.join("base/upup")).unwrap();
    symlink("base/1", data.join("rel_dir")).unwrap(); // inside
    symlink("postgresql.conf", data.join("conf_link")).unwrap(); // inside
    data
}

#[test]
fn symlink_options_match_rsync() {
    if !have_rsync() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let data = link_tree(tmp.path());
    let data_slash = with_slash(&data);
    for (src, args) in [
        (&data, &[][..]),
        (&data, &["-L"][..]),
        (&data_slash, &["--copy-links"][..]),
        (&data, &["--copy-unsafe-links"][..]),
        (&data_slash, &["--copy-unsafe-links"][..]),
    ] {
        let b = run_both(src, args, |_| {});
        assert_same(&format!("{} {args:?}", src.display()), &b);
        assert_eq!(b.haul.0, 0, "{}", b.stderr);
    }
    // Without them, the link that leaves the tree is named in a warning.
    let out = copy(&[&data], &tmp.path().join("plain"), &[]);
    out.assert_code(0);
    assert!(
        out.stderr.contains("data/pg_wal is a symlink to") && out.stderr.contains("-L"),
        "{}",
        out.describe()
    );
    assert!(!out.stderr.contains("rel_dir"), "{}", out.describe());
    // -L with a link to nowhere: reported like rsync's "no referent" (exit 23), the rest
    // arrives.
    symlink("nowhere", data.join("dangling")).unwrap();
    let b = run_both(&data, &["-L"], |_| {});
    assert_same("-L with a dangling link", &b);
    assert_eq!(b.haul.0, 23, "{}", b.stderr);
}

#[test]
fn keep_dirlinks_matches_rsync() {
    if !have_rsync() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let data = pg_tree(tmp.path());
    fs::create_dir_all(data.join("pg_wal/archive_status")).unwrap();
    fs::write(data.join("pg_wal/000000010000000000000001"), "wal").unwrap();
    // The destination keeps its WAL on another disk, through a symlink.
    let prefill = |d: &Path| {
        fs::create_dir_all(d.join("wal_disk")).unwrap();
        fs::create_dir_all(d.join("data")).unwrap();
        fs::write(d.join("wal_disk/old_segment"), "old").unwrap();
        symlink("../wal_disk", d.join("data/pg_wal")).unwrap();
    };
    for args in [&["-K"][..], &["--keep-dirlinks", "--delete"], &[]] {
        let b = run_both(&data, args, prefill);
        assert_same(&format!("{args:?}"), &b);
        assert_eq!(b.haul.0, 0, "{}", b.stderr);
    }
}

#[test]
fn a_symlink_loop_under_copy_links_ends() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    fs::create_dir_all(src.join("a")).unwrap();
    fs::write(src.join("a/f"), "f").unwrap();
    symlink("..", src.join("a/up")).unwrap();
    let out = copy(&[&src], &tmp.path().join("dst"), &["-q", "-L"]);
    out.assert_code(23);
    assert!(out.stderr.contains("leads back"), "{}", out.describe());
    assert_eq!(
        fs::read_to_string(tmp.path().join("dst/src/a/f")).unwrap(),
        "f"
    );
}

#[test]
fn pull_over_ssh_applies_excludes_at_the_far_end() {
    if !have_rsync() {
        return;
    }
    let Some(sshd) = Sshd::start("pull_over_ssh_applies_excludes_at_the_far_end") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let data = pg_tree(tmp.path());
    let list = tmp.path().join("ex");
    fs::write(&list, "pg_replslot/*\n").unwrap();
    let rules = [
        "--delete",
        "--exclude",
        "postmaster.pid",
        "--exclude-from",
        list.to_str().unwrap(),
        "--exclude",
        "lost+found/",
    ];
    let r = tmp.path().join("r");
    let h = tmp.path().join("h");
    for d in [&r, &h] {
        fs::create_dir(d).unwrap();
        stale_destination(d);
    }
    let st = Command::new("rsync")
        .arg("-a")
        .args(rules)
        .arg(&data)
        .arg(with_slash(&r))
        .status()
        .unwrap();
    assert!(st.success());
    let rsh = sshd.rsh();
    let far = format!("127.0.0.1:{}", data.display());
    let mut args: Vec<&str> = vec!["copy", "-q", "-e", &rsh, "--remote-haul", haul_bin()];
    args.extend(rules);
    let hs = with_slash(&h);
    args.extend([far.as_str(), hs.to_str().unwrap()]);
    let os: Vec<&OsStr> = args.iter().map(OsStr::new).collect();
    let out = Haul::new().run(&os);
    if out.code() != Some(0) {
        eprintln!("--- sshd log ---\n{}", sshd.log());
    }
    out.assert_code(0);
    assert_eq!(listing(&h), listing(&r));

    // --files-from is read here and its list walked there.
    let files = tmp.path().join("files");
    fs::write(
        &files,
        "base/1/123
log/
",
    )
    .unwrap();
    let (r2, h2) = (tmp.path().join("r2"), tmp.path().join("h2"));
    let st = Command::new("rsync")
        .args(["-a", "-r", "--exclude", "sub/", "--files-from"])
        .arg(&files)
        .arg(&data)
        .arg(&r2)
        .status()
        .unwrap();
    assert!(st.success());
    let h2s = h2.to_str().unwrap();
    let fl = files.to_str().unwrap();
    let args = [
        "copy",
        "-q",
        "-r",
        "-e",
        &rsh,
        "--remote-haul",
        haul_bin(),
        "--exclude",
        "sub/",
        "--files-from",
        fl,
        far.as_str(),
        h2s,
    ];
    let os: Vec<&OsStr> = args.iter().map(OsStr::new).collect();
    let out = Haul::new().run(&os);
    out.assert_code(0);
    assert_eq!(listing(&h2), listing(&r2));
}
