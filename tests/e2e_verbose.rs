//! End-to-end tests of what haul says it does, in rsync's spellings: `-v` (names sent,
//! created and deleted), `-i` (rsync's `%i` strings, compared with what rsync itself prints
//! for the same change), `-n` (a dry run changes nothing on disk and lists what the real
//! run then does), `--stats` (agrees with `--json`), the summary naming deletions, the
//! harmless rsync flags (`-avP`), control characters escaped in every line, `send`/`recv`
//! and one copy over ssh.

mod support;

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime};

use support::sshd::Sshd;
use support::*;

/// Sets the mtime of `p` (not following a symlink) to `secs` after 2020-01-01.
fn set_mtime(p: &Path, secs: u64) {
    if fs::symlink_metadata(p).unwrap().file_type().is_symlink() {
        let at = format!("@{}", 1_577_836_800 + secs);
        let ok = Command::new("touch")
            .args(["-h", "-d", &at])
            .arg(p)
            .status();
        assert!(ok.unwrap().success());
        return;
    }
    let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_577_836_800 + secs);
    fs::File::open(p).unwrap().set_modified(t).unwrap();
}

/// Gives every file and directory under `root` (and `root`) a fixed, whole-second mtime,
/// so that haul and rsync see the same differences whatever the clock did.
fn pin_times(root: &Path) {
    for p in walk(root).into_iter().rev() {
        set_mtime(&p, 1000);
    }
}

/// `root` and everything beneath it, parents first, sorted.
fn walk(root: &Path) -> Vec<PathBuf> {
    let mut out = vec![root.to_path_buf()];
    if fs::symlink_metadata(root).unwrap().is_dir() {
        let mut names: Vec<_> = fs::read_dir(root)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        names.sort();
        for n in names {
            out.extend(walk(&n));
        }
    }
    out
}

/// Everything `stat` says about every entry under `root` (and file contents, link
/// targets), keyed by relative path: equal before and after means nothing changed.
fn snapshot(root: &Path) -> BTreeMap<PathBuf, String> {
    let mut out = BTreeMap::new();
    if !root.exists() {
        return out;
    }
    for p in walk(root) {
        let m = fs::symlink_metadata(&p).unwrap();
        let extra = if m.file_type().is_symlink() {
            format!("{:?}", fs::read_link(&p).unwrap())
        } else if m.is_file() {
            format!("{:?}", fs::read(&p).unwrap())
        } else {
            String::new()
        };
        out.insert(
            p.strip_prefix(root).unwrap().to_path_buf(),
            format!(
                "ino={} mode={:o} size={} mtime={}.{} ctime={}.{} nlink={} {extra}",
                m.ino(),
                m.mode(),
                m.size(),
                m.mtime(),
                m.mtime_nsec(),
                m.ctime(),
                m.ctime_nsec(),
                m.nlink()
            ),
        );
    }
    out
}

fn lines(b: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(b)
        .lines()
        .map(str::to_string)
        .collect()
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

/// A small tree: `a`, `sub/b`, `lnk -> a`, all with pinned times.
fn small_tree(parent: &Path) -> PathBuf {
    let src = parent.join("src");
    fs::create_dir_all(src.join("sub")).unwrap();
    fs::write(src.join("a"), "hello\n").unwrap();
    fs::write(src.join("sub/b"), "world\n").unwrap();
    std::os::unix::fs::symlink("a", src.join("lnk")).unwrap();
    pin_times(&src);
    src
}

/// `rsync -ai ARGS SRC/ DST/`: its itemized lines, sorted.
fn rsync_items(src: &Path, dst: &Path, args: &[&str]) -> Vec<String> {
    let out = Command::new("rsync")
        .arg("-ai")
        .args(args)
        .arg(with_slash(src))
        .arg(with_slash(dst))
        .output()
        .expect("rsync is installed");
    assert!(out.status.success(), "{out:?}");
    sorted(lines(&out.stdout))
}

/// `haul copy -i ARGS SRC/ DST`: its itemized lines (stdout), sorted.
fn haul_items(src: &Path, dst: &Path, args: &[&str]) -> Vec<String> {
    let mut all = vec!["-i"];
    all.extend_from_slice(args);
    let out = copy(&[&with_slash(src)], dst, &all);
    out.assert_code(0);
    sorted(lines(&out.stdout))
}

#[test]
fn verbose_lists_exactly_the_names_sent_and_deleted() {
    let tmp = tempfile::tempdir().unwrap();
    let src = small_tree(tmp.path());
    let dst = tmp.path().join("dst");
    let out = copy(&[&src], &dst, &["-v"]);
    out.assert_code(0);
    assert_eq!(
        sorted(lines(&out.stdout)),
        ["src/", "src/a", "src/lnk -> a", "src/sub/", "src/sub/b"]
    );
    // Nothing changed: nothing named (the symlink is the same).
    let out = copy(&[&src], &dst, &["-v"]);
    out.assert_code(0);
    assert_eq!(lines(&out.stdout), Vec::<String>::new());

    fs::write(src.join("a"), "changed, longer\n").unwrap();
    fs::create_dir(dst.join("src/gone")).unwrap();
    fs::write(dst.join("src/gone/x"), "x").unwrap();
    fs::write(dst.join("src/extra"), "x").unwrap();
    let out = copy(&[&src], &dst, &["-v", "--delete"]);
    out.assert_code(0);
    assert_eq!(
        sorted(lines(&out.stdout)),
        [
            "deleting src/extra",
            "deleting src/gone/",
            "deleting src/gone/x",
            "src/a"
        ]
    );
    assert!(out.stderr.contains("deleted 3"), "{}", out.describe());

    // Without -v the summary still says that something was deleted.
    fs::write(dst.join("src/extra"), "x").unwrap();
    let out = copy(&[&src], &dst, &["--delete"]);
    out.assert_code(0);
    assert!(out.stdout.is_empty(), "{}", out.describe());
    assert!(out.stderr.contains(", deleted 1"), "{}", out.describe());
    assert!(!dst.join("src/extra").exists());
}

#[test]
fn itemize_prints_what_rsync_prints() {
    let tmp = tempfile::tempdir().unwrap();
    let src = small_tree(tmp.path());
    let (hd, rd) = (tmp.path().join("h"), tmp.path().join("r"));
    fs::create_dir(&hd).unwrap();
    fs::create_dir(&rd).unwrap();
    set_mtime(&hd, 1000);
    set_mtime(&rd, 1000);
    let check = |what: &str, args: &[&str]| {
        let r = rsync_items(&src, &rd, args);
        let h = haul_items(&src, &hd, args);
        assert_eq!(h, r, "{what}: haul (left) and rsync (right) differ");
        h
    };
    // New file, new directory, new symlink.
    let first = check("new entries", &[]);
    assert!(first.contains(&">f+++++++++ a".to_string()), "{first:?}");
    assert!(first.contains(&"cd+++++++++ sub/".to_string()), "{first:?}");
    assert!(
        first.contains(&"cL+++++++++ lnk -> a".to_string()),
        "{first:?}"
    );
    assert_eq!(check("nothing changed", &[]), Vec::<String>::new());

    // Changed content (size and time).
    fs::write(src.join("a"), "hello, again\n").unwrap();
    set_mtime(&src.join("a"), 2000);
    assert_eq!(check("changed content", &[]), [">f.st...... a"]);
    // Changed mode only.
    fs::set_permissions(src.join("sub/b"), fs::Permissions::from_mode(0o600)).unwrap();
    assert_eq!(check("changed mode", &[]), [".f...p..... sub/b"]);
    // Changed mtime only (same size): sent again, as rsync's quick check says.
    set_mtime(&src.join("sub/b"), 3000);
    set_mtime(&src.join("sub"), 1000);
    assert_eq!(check("changed mtime", &[]), [">f..t...... sub/b"]);
    // A directory's time.
    set_mtime(&src.join("sub"), 4000);
    assert_eq!(check("directory time", &[]), [".d..t...... sub/"]);
    // A symlink pointing elsewhere.
    fs::remove_file(src.join("lnk")).unwrap();
    std::os::unix::fs::symlink("sub", src.join("lnk")).unwrap();
    set_mtime(&src.join("lnk"), 1000);
    set_mtime(&src, 1000);
    assert_eq!(check("symlink target", &[]), ["cLc........ lnk -> sub"]);
    // Deletion (the destination root's time changes with it, for both).
    for d in [&hd, &rd] {
        fs::write(d.join("extra"), "x").unwrap();
    }
    let del = check("deletion", &["--delete"]);
    assert!(del.contains(&"*deleting   extra".to_string()), "{del:?}");
}

#[test]
fn dry_run_changes_nothing_and_lists_what_the_real_run_does() {
    let tmp = tempfile::tempdir().unwrap();
    let src = small_tree(tmp.path());
    fs::create_dir(src.join("newdir")).unwrap();
    fs::write(src.join("newdir/big"), vec![7u8; 3 << 20]).unwrap();
    let dst = tmp.path().join("dst");
    copy(&[&with_slash(&src)], &dst, &[]).assert_code(0);
    fs::remove_dir_all(dst.join("newdir")).unwrap();
    fs::write(src.join("a"), "new content\n").unwrap();
    fs::write(dst.join("extra"), "x").unwrap();
    fs::create_dir(dst.join("olddir")).unwrap();
    fs::write(dst.join("olddir/f"), "y").unwrap();

    let before = snapshot(&dst);
    let args = ["-i", "-n", "--delete", "--block-size", "64K"];
    let dry = copy(&[&with_slash(&src)], &dst, &args);
    dry.assert_code(0);
    assert_eq!(snapshot(&dst), before, "a dry run changed the destination");
    assert_no_part_files(&dst);
    assert!(dry.stderr.contains("dry run"), "{}", dry.describe());
    let planned = sorted(lines(&dry.stdout));
    for want in [
        ">f.st...... a",
        "cd+++++++++ newdir/",
        ">f+++++++++ newdir/big",
        "*deleting   extra",
        "*deleting   olddir/",
        "*deleting   olddir/f",
    ] {
        assert!(planned.contains(&want.to_string()), "{want}: {planned:?}");
    }

    // The real run (same options, without -n) does what the dry run listed.
    let real = copy(
        &[&with_slash(&src)],
        &dst,
        &["-i", "--delete", "--block-size", "64K"],
    );
    real.assert_code(0);
    assert_eq!(sorted(lines(&real.stdout)), planned);
    assert_trees_equal(&src, &dst);

    // Into a destination that does not exist: nothing is created, everything listed.
    let absent = tmp.path().join("absent/deeper");
    let out = copy(&[&src], &absent, &["-v", "-n"]);
    out.assert_code(0);
    assert!(!tmp.path().join("absent").exists());
    assert!(lines(&out.stdout).contains(&"src/newdir/big".to_string()));
}

/// `haul recv DIR` must create DIR before it knows the sender's `-n` (to fail early on an
/// unwritable place); a dry run then takes back what the receiver created.
#[test]
fn a_dry_run_to_a_waiting_receiver_leaves_no_directory_behind() {
    let tmp = tempfile::tempdir().unwrap();
    let src = small_tree(tmp.path());
    let dst = tmp.path().join("new/deeper");
    let (sent, received) = transfer(&[&src], &dst, &["-v", "-n"], &[]);
    sent.assert_code(0);
    received.assert_code(0);
    assert!(
        lines(&sent.stdout).contains(&"src/a".to_string()),
        "{}",
        sent.describe()
    );
    assert!(
        !tmp.path().join("new").exists(),
        "the dry run left the receiver's directory"
    );
    // A directory that was there before stays.
    fs::create_dir(tmp.path().join("there")).unwrap();
    let (sent, received) = transfer(&[&src], &tmp.path().join("there"), &["-n"], &[]);
    sent.assert_code(0);
    received.assert_code(0);
    assert!(tmp.path().join("there").is_dir());
    assert_eq!(fs::read_dir(tmp.path().join("there")).unwrap().count(), 0);
}

/// The number after `label` in --stats output (digits with `,`).
fn stat(text: &str, label: &str) -> u64 {
    let line = text
        .lines()
        .find(|l| l.starts_with(label))
        .unwrap_or_else(|| panic!("no {label:?} in {text}"));
    let digits: String = line[label.len()..]
        .trim_start()
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == ',')
        .filter(|c| *c != ',')
        .collect();
    digits.parse().unwrap()
}

fn json_field(json: &str, name: &str) -> u64 {
    let key = format!("\"{name}\":");
    let at = json
        .find(&key)
        .unwrap_or_else(|| panic!("{name} in {json}"))
        + key.len();
    json[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect::<String>()
        .parse()
        .unwrap()
}

#[test]
fn stats_agree_with_json() {
    let tmp = tempfile::tempdir().unwrap();
    let src = small_tree(tmp.path());
    let mut big = vec![0u8; 1 << 20];
    Rng::new(7).fill(&mut big);
    fs::write(src.join("big"), &big).unwrap();
    let dst = tmp.path().join("dst");
    let args = ["--stats", "--json", "--block-size", "64K", "--delete"];
    copy(&[&with_slash(&src)], &dst, &args).assert_code(0);
    // A few bytes in the middle change: a delta sends a piece, matches the rest.
    big[500_000] ^= 1;
    fs::write(src.join("big"), &big).unwrap();
    fs::write(dst.join("extra"), "x").unwrap();
    let out = copy(&[&with_slash(&src)], &dst, &args);
    out.assert_code(0);
    let json = String::from_utf8(out.stdout.clone()).unwrap();
    let text = &out.stderr;
    assert_eq!(
        stat(text, "Number of regular files transferred:"),
        json_field(&json, "files")
    );
    assert_eq!(stat(text, "Number of deleted files:"), 1);
    assert_eq!(json_field(&json, "deleted"), 1);
    assert_eq!(
        stat(text, "Literal data:"),
        json_field(&json, "bytes_written")
    );
    assert_eq!(
        stat(text, "Total bytes on the wire:"),
        json_field(&json, "bytes_wire")
    );
    assert_eq!(
        stat(text, "Skipped (already there):"),
        json_field(&json, "bytes_skipped")
    );
    assert_eq!(stat(text, "Number of files:"), 6);
    // As rsync: the two files, big, and the symlink's length (1).
    assert_eq!(stat(text, "Total file size:"), (1 << 20) + 13);
    let matched = stat(text, "Matched data:");
    assert!(matched > 0 && matched < 1 << 20, "{text}");
    assert_eq!(
        stat(text, "Total transferred file size:"),
        1 << 20,
        "{text}"
    );
    assert!(text.contains("skipped: already there"), "{text}");
}

#[test]
fn rsync_habits_are_accepted() {
    let tmp = tempfile::tempdir().unwrap();
    let src = small_tree(tmp.path());
    let dst = tmp.path().join("dst");
    let out = copy(&[&src], &dst, &["-avP"]);
    out.assert_code(0);
    assert!(lines(&out.stdout).contains(&"src/a".to_string()));
    assert_trees_equal(&src, &dst.join("src"));
    let out = copy(
        &[&src],
        &dst,
        &[
            "-rlptgoDHSz",
            "-vv",
            "--archive",
            "--partial",
            "--progress",
            "--recursive",
            "--links",
            "--times",
            "--perms",
            "--owner",
            "--group",
            "--hard-links",
            "--sparse",
        ],
    );
    out.assert_code(0);
    let help = Haul::new().run(&[OsStr::new("copy"), OsStr::new("--help")]);
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(!help.contains("--archive"), "{help}");
    assert!(help.contains("--dry-run") && help.contains("--itemize-changes"));
}

#[test]
fn control_characters_are_escaped_in_every_line() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    fs::create_dir(&src).unwrap();
    let evil = "evil\nhaul: sent 999 files";
    fs::write(src.join(evil), "x").unwrap();
    let dst = tmp.path().join("dst");
    let shown = "evil\\#012haul: sent 999 files";
    for args in [&["-i", "-n"][..], &["-v"]] {
        let out = copy(&[&with_slash(&src)], &dst, args);
        out.assert_code(0);
        // The new root is listed too (as rsync does: `./`).
        let l: Vec<_> = lines(&out.stdout)
            .into_iter()
            .filter(|l| !l.ends_with("./"))
            .collect();
        assert_eq!(l.len(), 1, "{}", out.describe());
        assert!(l[0].ends_with(shown), "{}", out.describe());
    }
    fs::remove_file(src.join(evil)).unwrap();
    for args in [&["-i", "--delete", "-n"][..], &["-v", "--delete"]] {
        let out = copy(&[&with_slash(&src)], &dst, args);
        out.assert_code(0);
        let l: Vec<_> = lines(&out.stdout)
            .into_iter()
            .filter(|l| !l.ends_with("./"))
            .collect();
        assert_eq!(l.len(), 1, "{}", out.describe());
        assert!(l[0].contains("deleting") && l[0].ends_with(shown), "{l:?}");
    }
}

#[test]
fn send_and_recv_print_where_asked() {
    let tmp = tempfile::tempdir().unwrap();
    let src = small_tree(tmp.path());
    let dst = tmp.path().join("dst");
    // The sender asked: the receiver's account travels back and the sender prints it.
    let (sent, received) = transfer(&[&src], &dst, &["-i"], &[]);
    assert_transfer_ok(&sent, &received);
    let l = sorted(lines(&sent.stdout));
    assert!(l.contains(&"<f+++++++++ src/a".to_string()), "{l:?}");
    assert!(
        !received.stderr.contains("src/a"),
        "{}",
        received.describe()
    );
    // The receiver asked: it prints on stderr (its stdout is the ticket's).
    fs::write(src.join("a"), "changed!\n").unwrap();
    let (sent, received) = transfer(&[&src], &dst, &[], &["-v", "--stats"]);
    assert_transfer_ok(&sent, &received);
    assert!(sent.stdout.is_empty(), "{}", sent.describe());
    assert!(
        received.stderr.lines().any(|l| l == "src/a"),
        "{}",
        received.describe()
    );
    assert!(received
        .stderr
        .contains("Number of regular files transferred: 1"));
    // A dry run from the sender: nothing changes at the receiver.
    fs::write(src.join("a"), "changed again\n").unwrap();
    let before = snapshot(&dst);
    let (sent, received) = transfer(&[&src], &dst, &["-v", "-n"], &[]);
    assert_transfer_ok(&sent, &received);
    assert_eq!(lines(&sent.stdout), ["src/a"]);
    assert_eq!(snapshot(&dst), before);
}

#[test]
fn over_ssh_push_itemizes_and_pull_dry_runs() {
    let Some(sshd) = Sshd::start("over_ssh_push_itemizes_and_pull_dry_runs") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let src = small_tree(tmp.path());
    let dst = tmp.path().join("far");
    let rsh = sshd.rsh();
    let far = format!("127.0.0.1:{}", dst.display());
    let run = |args: &[&str]| {
        let mut all = vec!["copy", "-e", &rsh, "--remote-haul", haul_bin()];
        all.extend_from_slice(args);
        let all: Vec<&OsStr> = all.iter().map(OsStr::new).collect();
        Haul::new().run(&all)
    };
    let src_s = src.to_str().unwrap();
    // Push, dry run first: nothing is made at the far end.
    let out = run(&["-n", "-i", src_s, &far]);
    out.assert_code(0);
    assert!(!dst.exists(), "{}", out.describe());
    assert!(lines(&out.stdout).contains(&"<f+++++++++ src/a".to_string()));
    let out = run(&["-i", src_s, &far]);
    out.assert_code(0);
    assert!(lines(&out.stdout).contains(&"<f+++++++++ src/a".to_string()));
    assert_trees_equal(&src, &dst.join("src"));
    // Pull with -v and -n after a change at the far end: the local receiver lists it and
    // changes nothing.
    fs::write(dst.join("src/a"), "far change\n").unwrap();
    let back = tmp.path().join("back");
    copy(&[&src], &back, &[]).assert_code(0);
    let before = snapshot(&back);
    let far_src = format!("127.0.0.1:{}", dst.join("src").display());
    let out = run(&["-v", "-n", &far_src, back.to_str().unwrap()]);
    out.assert_code(0);
    assert_eq!(lines(&out.stdout), ["src/a"], "{}", out.describe());
    assert_eq!(snapshot(&back), before);
    // Remote to remote: the far sender lists, its stderr shown with its host name.
    let third = tmp.path().join("third");
    let out = run(&["-i", &far_src, &format!("localhost:{}", third.display())]);
    out.assert_code(0);
    assert!(
        out.stderr.contains("haul: 127.0.0.1: <f+++++++++ src/a"),
        "{}",
        out.describe()
    );
    assert_trees_equal(&dst.join("src"), &third.join("src"));
    // Its summary line says what --delete removed.
    fs::write(third.join("src/extra"), "x").unwrap();
    let out = run(&[
        "--delete",
        &far_src,
        &format!("localhost:{}", third.display()),
    ]);
    out.assert_code(0);
    assert!(out.stderr.contains(", deleted 1"), "{}", out.describe());
    assert!(!third.join("src/extra").exists());
}
