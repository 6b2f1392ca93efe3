//! Extended attributes through the real binary: `user.*`, POSIX ACLs (set with `setfacl`),
//! and as root `trusted.*` (on a symlink too) and file capabilities arrive with a local
//! copy, send/recv, a push and a pull over ssh; a re-run brings changes to an unchanged file (and
//! `-i` says `x`); `--no-xattrs` leaves them out; a destination file system without
//! extended attributes gets one warning for the run and exit 0; a receiver that is not
//! root keeps `user.*` and ACLs and skips root's namespaces without a warning.
//!
//! Needs the `acl` package (`setfacl`) and root for the `trusted.*`, capability and ramfs
//! parts: without them a test prints SKIPPED (and fails when `CI` is set).

mod support;

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use support::sshd::Sshd;
use support::*;

/// Prints SKIPPED for `test` when `ok` is false (a failure under CI, which installs what
/// the tests need and runs as root).
fn need(test: &str, what: &str, ok: bool) -> bool {
    if !ok {
        assert!(
            std::env::var_os("CI").is_none(),
            "{test}: {what} is missing under CI"
        );
        println!("SKIPPED: {test}: needs {what}");
    }
    ok
}

fn have_setfacl() -> bool {
    Command::new("setfacl")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// The attributes of `path` (not following a symlink), SELinux labels left out (the
/// receiving host's policy chooses those).
fn xattrs_of(path: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut names = vec![0u8; 64 << 10];
    let n = match rustix::fs::llistxattr(path, &mut names[..]) {
        Ok(n) => n,
        Err(rustix::io::Errno::NOTSUP) => 0,
        Err(e) => panic!("llistxattr {}: {e}", path.display()),
    };
    let mut out = BTreeMap::new();
    for name in names[..n].split(|&b| b == 0).filter(|n| !n.is_empty()) {
        if name == b"security.selinux" {
            continue;
        }
        let mut value = vec![0u8; 64 << 10];
        let len = rustix::fs::lgetxattr(path, name, &mut value[..]).unwrap();
        value.truncate(len);
        out.insert(String::from_utf8_lossy(name).into_owned(), value);
    }
    out
}

fn set(path: &Path, name: &str, value: &[u8]) {
    rustix::fs::lsetxattr(path, name, value, rustix::fs::XattrFlags::empty())
        .unwrap_or_else(|e| panic!("lsetxattr {name} on {}: {e}", path.display()));
}

fn setfacl(args: &[&str], path: &Path) {
    let st = Command::new("setfacl")
        .args(args)
        .arg(path)
        .status()
        .unwrap();
    assert!(st.success(), "setfacl {args:?} {}", path.display());
}

/// A file capability (cap_net_bind_service, effective): revision 2, 20 bytes.
const CAPABILITY: [u8; 20] = [1, 0, 0, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];

/// A source tree with `user.*` attributes and ACLs on a file and a directory (a default
/// ACL too), and as root a `trusted.*` attribute on a symlink and a file capability.
fn source(tmp: &Path) -> PathBuf {
    let src = tmp.join("src");
    let dir = src.join("dir");
    fs::create_dir_all(&dir).unwrap();
    let f = dir.join("f.txt");
    fs::write(&f, b"hello").unwrap();
    fs::write(src.join("plain"), b"no attributes").unwrap();
    set(&f, "user.mime_type", b"text/plain");
    set(&f, "user.empty", b"");
    set(&dir, "user.dir", &[0xff, 0, 1]);
    setfacl(&["-m", "u:1234:rw,g:2345:r"], &f);
    setfacl(&["-m", "u:1234:rwx", "-d", "-m", "u:1234:rx"], &dir);
    if is_root() {
        std::os::unix::fs::symlink("f.txt", dir.join("link")).unwrap();
        set(&dir.join("link"), "trusted.link", b"on the link");
        let tool = src.join("tool");
        fs::write(&tool, b"#!/bin/sh\n").unwrap();
        std::os::unix::fs::chown(&tool, Some(1234), Some(2345)).unwrap();
        set(&tool, "security.capability", &CAPABILITY);
        set(&tool, "trusted.t", b"root only");
    }
    src
}

/// Every entry below `src` has the same attributes at `dst`.
fn assert_same_xattrs(src: &Path, dst: &Path) {
    let mut checked = 0;
    for rel in ["", "dir", "dir/f.txt", "plain", "dir/link", "tool"] {
        let (a, b) = (src.join(rel), dst.join(rel));
        if fs::symlink_metadata(&a).is_err() {
            continue;
        }
        assert_eq!(xattrs_of(&a), xattrs_of(&b), "attributes of {rel:?}");
        checked += 1;
    }
    let f = xattrs_of(&dst.join("dir/f.txt"));
    assert!(f.contains_key("user.mime_type") && f.contains_key("system.posix_acl_access"));
    assert!(xattrs_of(&dst.join("dir")).contains_key("system.posix_acl_default"));
    if is_root() {
        assert_eq!(checked, 6);
        assert_eq!(
            xattrs_of(&dst.join("tool"))["security.capability"],
            CAPABILITY,
            "the capability survives the chown"
        );
    }
}

#[test]
fn a_local_copy_keeps_xattrs_and_acls_and_brings_their_changes() {
    let test = "xattrs_local";
    if !need(test, "setfacl (package acl)", have_setfacl()) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let src = source(tmp.path());
    let dst = tmp.path().join("dst");
    copy(&[&src], &dst, &[]).assert_code(0);
    assert_same_xattrs(&src, &dst.join("src"));

    // An unchanged file (same size and mtime) still gets its new attributes, as its mode
    // would; -i says which: `x`, and `a` for the ACL.
    let f = src.join("dir/f.txt");
    rustix::fs::lremovexattr(&f, "user.empty").unwrap();
    set(&f, "user.mime_type", b"text/markdown");
    setfacl(&["-x", "g:2345"], &f);
    let out = copy(&[&src], &dst, &["-i"]);
    out.assert_code(0);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with(".f.") && l.ends_with("ax src/dir/f.txt")),
        "{stdout}"
    );
    assert_same_xattrs(&src, &dst.join("src"));
    let again = copy(&[&src], &dst, &["-i"]);
    again.assert_code(0);
    let stdout = String::from_utf8_lossy(&again.stdout);
    assert!(!stdout.contains("f.txt"), "nothing changes now: {stdout}");

    // --no-xattrs sends none (and -A -X, rsync's spellings, are the default).
    let bare = tmp.path().join("bare");
    copy(&[&src], &bare, &["--no-xattrs"]).assert_code(0);
    for rel in ["src/dir", "src/dir/f.txt"] {
        assert_eq!(xattrs_of(&bare.join(rel)), BTreeMap::new(), "{rel}");
    }
    let habits = tmp.path().join("habits");
    copy(&[&src], &habits, &["-aAX", "--numeric-ids"]).assert_code(0);
    assert_same_xattrs(&src, &habits.join("src"));
}

#[test]
fn send_and_recv_carry_xattrs_and_acls() {
    let test = "xattrs_send_recv";
    if !need(test, "setfacl (package acl)", have_setfacl()) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let src = source(tmp.path());
    let dest = tmp.path().join("dest");
    let (sent, received) = transfer(&[&src], &dest, &[], &[]);
    assert_transfer_ok(&sent, &received);
    assert_same_xattrs(&src, &dest.join("src"));
}

/// `haul copy -e RSH --remote-haul HAUL ARGS...` through `sshd`, to completion.
fn over_ssh(sshd: &Sshd, args: &[&OsStr]) {
    let rsh = sshd.rsh();
    let mut all: Vec<&OsStr> = vec![
        "copy".as_ref(),
        "-e".as_ref(),
        rsh.as_ref(),
        "--remote-haul".as_ref(),
        haul_bin().as_ref(),
    ];
    all.extend_from_slice(args);
    let out = Haul::new().run(&all);
    if out.code() != Some(0) {
        eprintln!("--- sshd log ---\n{}", sshd.log());
    }
    out.assert_code(0);
}

#[test]
fn a_push_and_a_pull_over_ssh_carry_xattrs_and_acls() {
    let test = "xattrs_ssh";
    if !need(test, "setfacl (package acl)", have_setfacl()) {
        return;
    }
    let Some(sshd) = Sshd::start(test) else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let src = source(tmp.path());
    let far = |p: &Path| PathBuf::from(format!("127.0.0.1:{}", p.display()));
    let pushed = tmp.path().join("pushed");
    over_ssh(&sshd, &[src.as_os_str(), far(&pushed).as_os_str()]);
    assert_same_xattrs(&src, &pushed.join("src"));
    let pulled = tmp.path().join("pulled");
    over_ssh(&sshd, &[far(&src).as_os_str(), pulled.as_os_str()]);
    assert_same_xattrs(&src, &pulled.join("src"));
    // --no-xattrs reaches the far sender of a pull.
    let bare = tmp.path().join("bare");
    let no: &OsStr = "--no-xattrs".as_ref();
    over_ssh(&sshd, &[no, far(&src).as_os_str(), bare.as_os_str()]);
    assert_eq!(xattrs_of(&bare.join("src/dir/f.txt")), BTreeMap::new());
}

/// A ramfs (it takes no extended attributes), unmounted on drop.
struct Ramfs(tempfile::TempDir);

impl Drop for Ramfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.0.path()).status();
    }
}

#[test]
fn a_destination_without_xattrs_gets_one_warning_and_exit_0() {
    let test = "xattrs_unsupported";
    let dir = tempfile::tempdir().unwrap();
    let mounted = is_root()
        && Command::new("mount")
            .args(["-t", "ramfs", "ramfs"])
            .arg(dir.path())
            .status()
            .is_ok_and(|s| s.success());
    if !need(test, "root, to mount a ramfs", mounted) {
        return;
    }
    let fs_ = Ramfs(dir);
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    fs::create_dir(&src).unwrap();
    for name in ["a", "b", "c\nhaul: forged"] {
        fs::write(src.join(name), name).unwrap();
        set(&src.join(name), "user.tag", name.as_bytes());
    }
    let out = copy(&[&src], fs_.0.path(), &[]);
    out.assert_code(0);
    let warnings: Vec<&str> = out
        .stderr
        .lines()
        .filter(|l| l.contains("extended attributes"))
        .collect();
    assert_eq!(warnings.len(), 1, "{}", out.stderr);
    assert!(
        warnings[0].contains("on 3 files") && warnings[0].contains("--no-xattrs"),
        "{}",
        warnings[0]
    );
    assert!(!out.stderr.contains("\nhaul: forged"), "{}", out.stderr);
    assert_eq!(fs::read(fs_.0.path().join("src/b")).unwrap(), b"b");
    // The directory had none: nothing to warn about.
    copy(&[&src], fs_.0.path(), &["--no-xattrs"]).assert_code(0);
}

#[test]
fn a_users_receiver_keeps_user_xattrs_and_acls_and_skips_root_only_ones_quietly() {
    let test = "xattrs_as_user";
    if !need(test, "setfacl (package acl)", have_setfacl())
        || !need(test, "root, to run as another user", is_root())
    {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let src = source(tmp.path());
    // Readable by nobody (the ACLs above give user 1234 more, not others less).
    let chmod = Command::new("chmod")
        .args(["-R", "a+rX"])
        .arg(tmp.path())
        .status()
        .unwrap();
    assert!(chmod.success());
    let dst = tmp.path().join("dst");
    fs::create_dir(&dst).unwrap();
    std::os::unix::fs::chown(&dst, Some(65534), Some(65534)).unwrap();
    let out = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            haul_bin(),
        ])
        .arg("copy")
        .arg(&src)
        .arg(&dst)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("extended attributes"), "{stderr}");
    let f = dst.join("src/dir/f.txt");
    assert_eq!(xattrs_of(&f), xattrs_of(&src.join("dir/f.txt")));
    // The capability (security.*) is root's to give: not there, and no warning about it.
    assert_eq!(xattrs_of(&dst.join("src/tool")), BTreeMap::new());
}
