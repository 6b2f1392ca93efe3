//! haul against rsync for hardlinked devices and FIFOs (issue 39, item 5): `rsync
//! -aHAX --numeric-ids -i` and `haul copy -i` side by side, comparing exit codes, `-i`
//! listings, file types, device numbers and which names share an inode.
//!
//! A case prints `SKIPPED` when rsync is not installed; under CI that is a failure.

mod support;

use std::ffi::OsStr;
use std::fs;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;
use std::process::Command;

use rustix::fs::{FileType, Mode};
use support::process::Running;
use support::tree::set_mtime;
use support::*;

/// Exit code and sorted `-i` lines.
fn lines(code: Option<i32>, stdout: &[u8]) -> (Option<i32>, Vec<String>) {
    let mut l: Vec<String> = String::from_utf8_lossy(stdout)
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with("created directory "))
        .map(str::to_string)
        .collect();
    l.sort();
    (code, l)
}

fn rsync(src: &Path, dst: &Path) -> (Option<i32>, Vec<String>) {
    let mut cmd = Command::new("rsync");
    cmd.args(["-aHAX", "--numeric-ids", "-i"]).arg(src).arg(dst);
    let out = Running::spawn("(rsync)", cmd).wait();
    lines(out.code(), &out.stdout)
}

fn haul(src: &Path, dst: &Path) -> ((Option<i32>, Vec<String>), String) {
    let all = [
        OsStr::new("copy"),
        OsStr::new("-i"),
        src.as_os_str(),
        dst.as_os_str(),
    ];
    let out = Haul::new().run(&all);
    (lines(out.code(), &out.stdout), out.describe())
}

/// Each name's type, device number and the names sharing its inode.
fn shape(root: &Path, names: &[&str]) -> Vec<String> {
    names
        .iter()
        .map(|n| {
            let m = fs::symlink_metadata(root.join(n)).unwrap();
            let t = m.file_type();
            let kind = if t.is_fifo() {
                "fifo"
            } else if t.is_char_device() {
                "chr"
            } else {
                "?"
            };
            let same: Vec<&str> = names
                .iter()
                .filter(|o| fs::symlink_metadata(root.join(o)).unwrap().ino() == m.ino())
                .copied()
                .collect();
            format!(
                "{n}: {kind} {:x} {:o} {}",
                m.rdev(),
                m.mode() & 0o7777,
                same.join(",")
            )
        })
        .collect()
}

#[test]
fn hardlinked_devices_and_fifos_arrive_as_one_inode() {
    if !have_rsync() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    fs::create_dir_all(src.join("sub")).unwrap();
    let mk = |name: &str, kind: FileType, dev: u64| {
        rustix::fs::mknodat(
            rustix::fs::CWD,
            src.join(name),
            kind,
            Mode::from_raw_mode(0o640),
            dev,
        )
        .unwrap();
    };
    let mut names = vec!["fifo1", "sub/fifo2"];
    mk("fifo1", FileType::Fifo, 0);
    fs::hard_link(src.join("fifo1"), src.join("sub/fifo2")).unwrap();
    if is_root() {
        mk(
            "null1",
            FileType::CharacterDevice,
            rustix::fs::makedev(1, 3),
        );
        fs::hard_link(src.join("null1"), src.join("sub/null2")).unwrap();
        fs::hard_link(src.join("null1"), src.join("null3")).unwrap();
        names.extend(["null1", "sub/null2", "null3"]);
    }
    // In the past: rsync leaves alone a time it made in the second of the source's.
    for d in ["fifo1", "sub", ""] {
        set_mtime(&src.join(d), 1_600_000_000, 0);
    }
    if is_root() {
        set_mtime(&src.join("null1"), 1_600_000_000, 0);
    }
    let (r, h) = (tmp.path().join("r"), tmp.path().join("h"));
    let s = with_slash(&src);
    let theirs = rsync(&s, &with_slash(&r));
    let (ours, out) = haul(&s, &with_slash(&h));
    assert_eq!(ours.0, theirs.0, "exit codes differ\n{out}");
    let want = shape(&r, &names);
    assert_eq!(
        shape(&h, &names),
        want,
        "haul (left) and rsync (right) differ\n{out}"
    );
    assert_eq!(shape(&src, &names), want);
    // Unchanged: neither lists anything.
    let theirs = rsync(&s, &with_slash(&r));
    let (ours, out) = haul(&s, &with_slash(&h));
    assert_eq!(
        ours, theirs,
        "unchanged: haul (left) and rsync (right) differ\n{out}"
    );
    assert_eq!(shape(&h, &names), want);
    // A receiver that refuses devices skips every name of one (rsync's --no-devices).
    let nd = tmp.path().join("nd");
    let out = copy(&[&s], &nd, &["--no-devices"]);
    out.assert_code(0);
    assert!(!nd.join("null3").exists() && !nd.join("sub/null2").exists());
    assert_eq!(shape(&nd, &names[..2]), shape(&src, &names[..2]));
}
