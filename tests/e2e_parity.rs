//! haul against rsync on the same trees: each case runs `rsync -aHAX --numeric-ids -i` and
//! `haul copy -i` side by side (local copies, into fresh directories) and compares exit
//! codes, `-i` listings and the trees that arrived, stat for stat (types, contents, modes,
//! ns mtimes, owners as root, hardlink groups, link targets). The cases are the behaviours
//! of issue 39 where haul differed: overlapping sources (one given ten times; a directory
//! in one and a file of the same name in another) and `-c` on an unchanged tree.
//!
//! A case prints `SKIPPED` when rsync is not installed; under CI that is a failure.

mod support;

use std::ffi::OsStr;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use support::process::Running;
use support::tree::set_mtime;
use support::*;

fn have_rsync() -> bool {
    let ok = Command::new("rsync").arg("--version").output().is_ok();
    if !ok {
        assert!(
            std::env::var_os("CI").is_none(),
            "rsync is missing under CI"
        );
        eprintln!("SKIPPED: rsync is not installed");
    }
    ok
}

/// What one side did: its exit code and its `-i` lines, sorted.
#[derive(Debug, PartialEq, Eq)]
struct Run {
    code: Option<i32>,
    items: Vec<String>,
}

fn items(stdout: &[u8]) -> Vec<String> {
    let mut lines: Vec<String> = String::from_utf8_lossy(stdout)
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with("created directory "))
        .map(str::to_string)
        .collect();
    lines.sort();
    lines
}

/// `rsync -aHAX --numeric-ids -i ARGS SRCS... DST` (bounded like every haul run). A
/// source directory must have a time in the past: rsync compares directory times by the
/// second and leaves alone one it made in the second its source changed.
fn rsync(args: &[&str], srcs: &[&Path], dst: &Path) -> (Run, String) {
    let mut cmd = Command::new("rsync");
    cmd.args(["-aHAX", "--numeric-ids", "-i"])
        .args(args)
        .args(srcs)
        .arg(dst);
    let out = Running::spawn("(rsync)", cmd).wait();
    let run = Run {
        code: out.code(),
        items: items(&out.stdout),
    };
    (run, out.describe())
}

/// `haul copy -i ARGS SRCS... DST`.
fn haul(args: &[&str], srcs: &[&Path], dst: &Path) -> (Run, String) {
    let mut all: Vec<&OsStr> = vec![OsStr::new("copy"), OsStr::new("-i")];
    all.extend(args.iter().map(OsStr::new));
    all.extend(srcs.iter().map(|s| s.as_os_str()));
    all.push(dst.as_os_str());
    let out = Haul::new().run(&all);
    let run = Run {
        code: out.code(),
        items: items(&out.stdout),
    };
    (run, out.describe())
}

/// Runs both into `r` and `h` and asserts the same exit code, listing and tree (the roots'
/// own metadata too, unless `srcs` land under their names and the roots are new).
fn assert_same(what: &str, args: &[&str], srcs: &[&Path], r: &Path, h: &Path) {
    let named = srcs
        .iter()
        .any(|s| !s.as_os_str().as_encoded_bytes().ends_with(b"/"));
    let (theirs, rsync_out) = rsync(args, srcs, &with_slash(r));
    let (ours, haul_out) = haul(args, srcs, &with_slash(h));
    assert_eq!(
        ours, theirs,
        "{what}: haul (left) and rsync (right) differ\n{haul_out}\n{rsync_out}"
    );
    let compare = match named {
        true => Compare::new().skip_root_metadata(),
        false => Compare::new(),
    };
    let diffs = compare.differences(r, h);
    assert!(
        diffs.is_empty(),
        "{what}: haul's tree differs from rsync's:\n  {}\n{haul_out}",
        diffs.join("\n  ")
    );
    assert_no_part_files(h);
}

#[test]
fn the_same_source_given_ten_times_is_copied_and_listed_once() {
    if !have_rsync() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let from = tmp.path().join("from");
    fs::create_dir_all(from.join("sub")).unwrap();
    for i in 1..=3 {
        fs::write(from.join(format!("name{i}")), format!("{i}\n")).unwrap();
    }
    fs::write(from.join("sub/deep"), b"deep").unwrap();
    set_mtime(&from.join("sub"), 1_600_000_000, 5);
    set_mtime(&from, 1_600_000_100, 7);
    let contents = with_slash(&from);
    let name1 = from.join("name1");
    // The duplicates raced at the receiver: several rounds, each one whole and alike.
    for round in 0..3 {
        let (r, h) = (tmp.path().join("r"), tmp.path().join("h"));
        for d in [&r, &h] {
            let _ = fs::remove_dir_all(d);
        }
        let ten: Vec<&Path> = vec![contents.as_path(); 10];
        assert_same(&format!("from/ x10, round {round}"), &[], &ten, &r, &h);
        for d in [&r, &h] {
            fs::remove_dir_all(d).unwrap();
        }
        let ten: Vec<&Path> = vec![name1.as_path(); 10];
        assert_same(&format!("from/name1 x10, round {round}"), &[], &ten, &r, &h);
    }
}

/// `a/` holds a file where `b/` holds a directory of the same name and the other way
/// round, and both hold a directory `d` whose entries clash again one level down.
fn clashing_sources(root: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let (a, b) = (root.join("a"), root.join("b"));
    for d in ["d/w", "y", "s"] {
        fs::create_dir_all(a.join(d)).unwrap();
    }
    for d in ["d/z", "x", "s"] {
        fs::create_dir_all(b.join(d)).unwrap();
    }
    for (f, body) in [
        ("a/x", "a's file x"),
        ("a/y/in", "in a's y"),
        ("a/d/f1", "a's f1"),
        ("a/d/z", "a's file z"),
        ("a/d/w/in", "in a's w"),
        ("b/y", "b's file y"),
        ("b/x/in", "in b's x"),
        ("b/d/f1", "b's f1"),
        ("b/d/f2", "b's f2"),
        ("b/d/w", "b's file w"),
        ("b/d/z/in", "in b's z"),
    ] {
        fs::write(root.join(f), body).unwrap();
    }
    for (d, mode) in [
        ("a", 0o701),
        ("b", 0o705),
        ("a/d", 0o700),
        ("b/d", 0o755),
        ("b/x", 0o750),
        ("a/y", 0o711),
    ] {
        fs::set_permissions(root.join(d), fs::Permissions::from_mode(mode)).unwrap();
    }
    // Every directory its own time: the first source's is the one that must arrive.
    for (i, d) in [
        "a", "b", "a/d", "b/d", "a/s", "b/s", "a/d/w", "b/d/z", "a/y", "b/x",
    ]
    .iter()
    .enumerate()
    {
        set_mtime(&root.join(d), 1_600_000_000 + 1000 * i as i64, 123_456_789);
    }
    (a, b)
}

#[test]
fn a_directory_and_a_file_of_one_name_in_two_sources_arrive_as_rsync_makes_them() {
    if !have_rsync() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = clashing_sources(tmp.path());
    let bx = b.join("x");
    let (a, b) = (with_slash(&a), with_slash(&b));
    let cases = [
        ("a/ b/", [&a, &b]),
        ("b/ a/", [&b, &a]),
        // A source landing under its own name where another's contents hold that name.
        ("a/ b/x", [&a, &bx]),
        ("b/x a/", [&bx, &a]),
    ];
    for (what, srcs) in cases {
        let (r, h) = (tmp.path().join("r"), tmp.path().join("h"));
        for d in [&r, &h] {
            let _ = fs::remove_dir_all(d);
        }
        let srcs: Vec<&Path> = srcs.iter().map(|p| p.as_path()).collect();
        assert_same(what, &[], &srcs, &r, &h);
    }
}
