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
    assert_same_as(what, args, srcs, r, h, true)
}

/// [`assert_same`], comparing the listings only when `listings` (a first copy of hardlinks
/// names them the other way round: issue 39, item 9).
fn assert_same_as(what: &str, args: &[&str], srcs: &[&Path], r: &Path, h: &Path, listings: bool) {
    let named = srcs
        .iter()
        .any(|s| !s.as_os_str().as_encoded_bytes().ends_with(b"/"));
    let (theirs, rsync_out) = rsync(args, srcs, &with_slash(r));
    let (mut ours, haul_out) = haul(args, srcs, &with_slash(h));
    if !listings {
        ours.items.clone_from(&theirs.items);
    }
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

/// `-c` on an unchanged tree: rsync lists nothing and leaves every inode alone; before,
/// haul listed `>fc........` for every small file and replaced them (breaking a hardlink
/// pair). Then a same-size, same-mtime edit (what `-c` is for) is found and sent, and a
/// file whose time alone changed gets its time, as rsync does.
#[test]
fn checksum_on_an_unchanged_tree_sends_and_lists_nothing() {
    if !have_rsync() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    fs::create_dir_all(src.join("sub")).unwrap();
    for i in 0..300 {
        fs::write(
            src.join(format!("sub/f{i:03}")),
            format!("small file {i}\n"),
        )
        .unwrap();
    }
    fs::write(src.join("pair1"), b"one inode, two names").unwrap();
    fs::hard_link(src.join("pair1"), src.join("sub/pair2")).unwrap();
    fs::write(src.join("empty"), b"").unwrap();
    // Larger than a block: the path that hashes pieces.
    write_random_file(&src.join("big"), 5 << 20, 39);
    for (i, d) in ["sub", ""].iter().enumerate() {
        set_mtime(&src.join(d), 1_600_000_000 + i as i64, 0);
    }
    let (r, h) = (tmp.path().join("r"), tmp.path().join("h"));
    let s = with_slash(&src);
    assert_same_as("first copy", &[], &[&s], &r, &h, false);
    let inodes = |d: &Path| -> Vec<u64> {
        use std::os::unix::fs::MetadataExt;
        ["pair1", "sub/pair2", "sub/f007", "big"]
            .iter()
            .map(|n| fs::symlink_metadata(d.join(n)).unwrap().ino())
            .collect()
    };
    let before = inodes(&h);
    for args in [&["-c", "-n"][..], &["-c"][..]] {
        assert_same(&format!("unchanged, {args:?}"), args, &[&s], &r, &h);
    }
    assert_eq!(inodes(&h), before, "-c replaced files it should have kept");

    // Same size and mtime, other content: only -c sees it.
    let f = src.join("sub/f007");
    let stamp = fs::symlink_metadata(&f).unwrap();
    fs::write(&f, b"SMALL FILE 7\n").unwrap();
    use std::os::unix::fs::MetadataExt;
    set_mtime(&f, stamp.mtime(), stamp.mtime_nsec());
    // Same content, another time: rsync -c sets the time and sends nothing.
    set_mtime(&src.join("sub/f008"), 1_500_000_000, 0);
    for d in ["sub", ""] {
        set_mtime(&src.join(d), 1_600_000_000, 0);
    }
    assert_same("one edit and one touch, -c", &["-c"], &[&s], &r, &h);
}

/// `--files-from` as rsync reads it (issue 39, item 2): a `/./` in a listed path marks
/// where the part that is sent begins (`from/./dir/subdir` arrives as `dir/subdir`, its
/// parents before the marker are not sent); without `-r` a listed directory arrives
/// without its contents (rsync's `--files-from` turns off the `-r` of `-a`), with `-r`
/// with all of them. Before, haul sent `from/dir/subdir` and always recursed.
#[test]
fn files_from_honours_the_dot_marker_and_recurses_only_with_r() {
    if !have_rsync() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    for d in [
        "from/dir/subdir/deep",
        "from/other",
        "base2/dir/more",
        "plain/d",
    ] {
        fs::create_dir_all(src.join(d)).unwrap();
    }
    for (f, body) in [
        ("from/dir/subdir/f", "f"),
        ("from/dir/subdir/deep/g", "g"),
        ("from/dir/top", "top"),
        ("from/other/o", "o"),
        ("base2/dir/more/m", "m"),
        ("base2/dir/n", "n"),
        ("plain/d/p", "p"),
        ("plain/q", "q"),
    ] {
        fs::write(src.join(f), body).unwrap();
    }
    for (i, d) in [
        "from/dir/subdir/deep",
        "from/dir/subdir",
        "from/dir",
        "from/other",
        "from",
        "base2/dir/more",
        "base2/dir",
        "base2",
        "plain/d",
        "plain",
        "",
    ]
    .iter()
    .enumerate()
    {
        set_mtime(&src.join(d), 1_600_000_000 + 1000 * i as i64, 4321);
    }
    let list = tmp.path().join("list");
    fs::write(
        &list,
        "from/./dir/subdir\nfrom/other\n./base2/./dir/more\nplain/d\nfrom/./dir/top\n",
    )
    .unwrap();
    let list = list.to_str().unwrap();
    // Without a slash (the same for --files-from): the roots, which neither sends, are
    // not compared.
    let s = src.clone();
    for r in ["", "-r"] {
        let args: Vec<&str> = [r, "--files-from", list]
            .into_iter()
            .filter(|a| !a.is_empty())
            .collect();
        let (r, h) = (tmp.path().join("r"), tmp.path().join("h"));
        for d in [&r, &h] {
            let _ = fs::remove_dir_all(d);
        }
        let mut dry = args.clone();
        dry.push("-n");
        let (theirs, _) = rsync(&dry, &[&s], &with_slash(&r));
        let (ours, out) = haul(&dry, &[&s], &with_slash(&h));
        assert_eq!(ours, theirs, "{dry:?}: haul (left), rsync (right)\n{out}");
        assert_same(&format!("{args:?}"), &args, &[&s], &r, &h);
        // Again: nothing changed, nothing listed.
        assert_same(&format!("{args:?}, again"), &args, &[&s], &r, &h);
    }
}

/// `--copy-unsafe-links` counts links as rsync 3.4 and later do (issue 39, item 8): a
/// `..` after any other part of the target (`dir/..`, `a/../x`, `./../x`) makes a link
/// unsafe, so what it points to is sent; `from -> nodir/..` has nothing to point to, and
/// rsync leaves it out and exits 23. Before, haul counted only how far a link climbs: it
/// sent `from` as a link and exited 0.
#[test]
fn copy_unsafe_links_counts_a_dot_dot_after_a_name_as_unsafe() {
    if !have_rsync() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path().join("t");
    fs::create_dir_all(t.join("d/e")).unwrap();
    fs::write(t.join("x"), b"x").unwrap();
    fs::write(t.join("d/y"), b"y").unwrap();
    for (link, target) in [
        ("from", "nodir/.."),
        ("l2", "d/../x"),
        ("l3", "./x"),
        ("l9", "d/./y"),
        ("d/e/a1", "./../../x"),
        ("d/e/a3", "..//../x"),
        ("d/e/a4", "../y"),
        ("d/e/a5", ".././y"),
        ("d/e/a7", "../e/../y"),
    ] {
        std::os::unix::fs::symlink(target, t.join(link)).unwrap();
        // In the past: rsync leaves alone a time it made in the second of the source's.
        set_mtime(&t.join(link), 1_500_000_000, 7);
    }
    for d in ["d/e", "d", ""] {
        set_mtime(&t.join(d), 1_600_000_000, 0);
    }
    let (r, h) = (tmp.path().join("r"), tmp.path().join("h"));
    let s = with_slash(&t);
    assert_same(
        "--copy-unsafe-links",
        &["--copy-unsafe-links"],
        &[&s],
        &r,
        &h,
    );
}
