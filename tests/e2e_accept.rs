//! What a receiver keeps of the sender's metadata is its own choice: `--no-owner`,
//! `--no-group`, `--no-devices`, `--no-specials` (rsync's names), so a root receiver that
//! pulls from a host it does not trust gets no foreign set-id files or device nodes.

mod support;

use std::fs;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use support::*;

/// A source with a set-uid file owned by someone else, a FIFO and a device; `None`
/// (after printing SKIPPED) when not root.
fn hostile_source(tmp: &Path, test: &str) -> Option<PathBuf> {
    if !is_root() {
        println!("SKIPPED: {test}: needs root to make foreign owners and devices");
        return None;
    }
    let src = tmp.join("src");
    fs::create_dir(&src).unwrap();
    let f = src.join("suid");
    fs::write(&f, b"#!/bin/sh\n").unwrap();
    std::os::unix::fs::chown(&f, Some(1234), Some(2345)).unwrap();
    fs::set_permissions(&f, fs::Permissions::from_mode(0o6755)).unwrap();
    let mk = |name: &str, ft: rustix::fs::FileType, dev: u64| {
        rustix::fs::mknodat(
            rustix::fs::CWD,
            src.join(name),
            ft,
            rustix::fs::Mode::from_raw_mode(0o666),
            dev,
        )
        .unwrap()
    };
    mk("pipe", rustix::fs::FileType::Fifo, 0);
    mk(
        "null",
        rustix::fs::FileType::CharacterDevice,
        rustix::fs::makedev(1, 3),
    );
    Some(src)
}

fn check_refused(dst: &Path) {
    let m = fs::metadata(dst.join("suid")).unwrap();
    assert_eq!((m.uid(), m.gid()), (0, 0), "owner kept");
    assert_eq!(m.mode() & 0o7777, 0o755, "set-id bits kept: {:o}", m.mode());
    assert!(fs::symlink_metadata(dst.join("pipe")).is_err(), "FIFO made");
    assert!(
        fs::symlink_metadata(dst.join("null")).is_err(),
        "device made"
    );
}

#[test]
fn a_local_copy_keeps_everything_by_default_and_nothing_foreign_when_told() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(src) = hostile_source(tmp.path(), "accept_local") else {
        return;
    };
    let all = tmp.path().join("all");
    copy(&[&src], &all, &[]).assert_code(0);
    let m = fs::metadata(all.join("src/suid")).unwrap();
    assert_eq!((m.uid(), m.gid(), m.mode() & 0o7777), (1234, 2345, 0o6755));
    assert!(fs::symlink_metadata(all.join("src/pipe"))
        .unwrap()
        .file_type()
        .is_fifo());
    assert!(fs::symlink_metadata(all.join("src/null"))
        .unwrap()
        .file_type()
        .is_char_device());

    let safe = tmp.path().join("safe");
    let flags = ["--no-owner", "--no-group", "--no-devices", "--no-specials"];
    copy(&[&src], &safe, &flags).assert_code(0);
    check_refused(&safe.join("src"));
}

#[test]
fn recv_applies_its_own_policy_whatever_the_sender() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(src) = hostile_source(tmp.path(), "accept_recv") else {
        return;
    };
    let dest = tmp.path().join("dest");
    let flags = ["--no-owner", "--no-group", "--no-devices", "--no-specials"];
    let (sent, received) = transfer(&[&src], &dest, &[], &flags);
    assert_transfer_ok(&sent, &received);
    check_refused(&dest.join("src"));
}

/// `getent DB NAME`'s third field (the number), if NAME exists here.
fn id_of(db: &str, name: &str) -> Option<u32> {
    let out = std::process::Command::new("getent")
        .args([db, name])
        .output()
        .ok()?;
    let line = String::from_utf8(out.stdout).ok()?;
    line.split(':').nth(2)?.trim().parse().ok()
}

#[test]
fn chown_gives_everything_received_one_owner_by_name_or_number() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(src) = hostile_source(tmp.path(), "accept_chown") else {
        return;
    };
    let (Some(uid), Some(gid)) = (id_of("passwd", "daemon"), id_of("group", "daemon")) else {
        println!("SKIPPED: accept_chown: no user and group daemon here");
        return;
    };
    let owned = |dst: &Path, want: (u32, u32)| {
        for rel in ["src", "src/suid", "src/pipe"] {
            let m = fs::symlink_metadata(dst.join(rel)).unwrap();
            assert_eq!((m.uid(), m.gid()), want, "{rel}");
        }
        let suid = fs::metadata(dst.join("src/suid")).unwrap();
        assert_eq!(suid.mode() & 0o7777, 0o755, "set-id bits dropped");
    };
    let named = tmp.path().join("named");
    copy(&[&src], &named, &["--chown", "daemon:daemon"]).assert_code(0);
    owned(&named, (uid, gid));

    // Numbers, and one part alone: the other stays the sender's.
    let numbers = tmp.path().join("numbers");
    copy(&[&src], &numbers, &["--chown", "4321:"]).assert_code(0);
    let m = fs::metadata(numbers.join("src/suid")).unwrap();
    assert_eq!((m.uid(), m.gid()), (4321, 2345));

    // The receiver looks the names up: recv's --chown, whatever the sender.
    let dest = tmp.path().join("recv");
    let (sent, received) = transfer(&[&src], &dest, &[], &["--chown", ":daemon"]);
    assert_transfer_ok(&sent, &received);
    let m = fs::metadata(dest.join("src/suid")).unwrap();
    assert_eq!((m.uid(), m.gid(), m.mode() & 0o7777), (1234, gid, 0o4755));
}

#[test]
fn chown_refuses_unknown_names_and_foreign_owners_at_start() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    fs::create_dir(&src).unwrap();
    fs::write(src.join("f"), b"x").unwrap();
    let dst = tmp.path().join("dst");
    let out = copy(&[&src], &dst, &["--chown", "no-such-user-haul:"]);
    out.assert_code(2);
    assert!(
        out.stderr.contains("no user named no-such-user-haul"),
        "{}",
        out.stderr
    );
    assert!(!dst.join("src").exists(), "nothing may be sent");
    copy(&[&src], &dst, &["--chown", ":"]).assert_code(2);
    if !is_root() {
        println!("SKIPPED: accept_chown_foreign: needs root to run as another user");
        return;
    }
    fs::set_permissions(tmp.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let mine = tmp.path().join("mine");
    fs::create_dir(&mine).unwrap();
    std::os::unix::fs::chown(&mine, Some(65534), Some(65534)).unwrap();
    let as_nobody = |owner: &str| {
        std::process::Command::new("setpriv")
            .args([
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                haul_bin(),
            ])
            .args(["copy", "--chown", owner])
            .arg(&src)
            .arg(&mine)
            .output()
            .unwrap()
    };
    let out = as_nobody("root");
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("only root"));
    let out = as_nobody(":0");
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    // Its own user and group are fine.
    let out = as_nobody("65534:65534");
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let m = fs::metadata(mine.join("src/f")).unwrap();
    assert_eq!((m.uid(), m.gid()), (65534, 65534));
}

/// Runs `script` with `sh -c` as nobody (the local user who may write in DST).
fn as_nobody_sh(script: &str) {
    let out = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .args(["sh", "-c", script])
        .output()
        .unwrap();
    assert!(out.status.success(), "{script}: {out:?}");
}

/// Issue 37, finding 1: the source holds a set-uid root tool; a user who may write in DST
/// plants her own program under its name, padded to its size, with its mtime. The quick
/// check must not bless her file with root's owner and the set-uid bit: it is sent again.
/// An unchanged tree copied again still sends nothing and keeps its inodes.
#[test]
fn a_planted_file_with_the_sources_size_and_mtime_is_sent_again_not_made_set_uid_root() {
    if !is_root() {
        println!("SKIPPED: planted_quick_check: needs root to run as another user");
        return;
    }
    let Some((_, tmp)) = unprivileged_tempdir("planted_quick_check") else {
        return;
    };
    const MTIME: &str = "1600000000";
    let tool = b"#!/bin/sh\necho the real tool\n";
    let src = tmp.path().join("src");
    fs::create_dir_all(src.join("bin")).unwrap();
    fs::write(src.join("bin/tool"), tool).unwrap();
    fs::set_permissions(src.join("bin/tool"), fs::Permissions::from_mode(0o4755)).unwrap();
    fs::write(src.join("plain"), b"plain file").unwrap();
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_secs(MTIME.parse().unwrap());
    for f in ["bin/tool", "plain"] {
        let f = fs::File::options().write(true).open(src.join(f)).unwrap();
        f.set_modified(at).unwrap();
    }
    let dst = tmp.path().join("dst");
    fs::create_dir_all(dst.join("bin")).unwrap();
    for d in [&dst, &dst.join("bin")] {
        std::os::unix::fs::chown(d, Some(NOBODY), Some(NOGROUP)).unwrap();
    }
    let planted = dst.join("bin/tool");
    let hers = format!("#!/bin/sh\nid\n#{}", "x".repeat(tool.len() - 14));
    assert_eq!(hers.len(), tool.len());
    as_nobody_sh(&format!(
        "printf '%s' '{hers}' > '{p}' && chmod 755 '{p}' && touch -d @{MTIME} '{p}'",
        p = planted.display()
    ));

    let out = copy(&[&with_slash(&src)], &dst, &["--json"]);
    out.assert_code(0);
    let m = fs::metadata(&planted).unwrap();
    let content = fs::read(&planted).unwrap();
    assert!(
        !(content == hers.as_bytes() && m.uid() == 0 && m.mode() & 0o6000 != 0),
        "her program became root {:o}",
        m.mode() & 0o7777
    );
    assert_eq!(content, tool, "the tool was not sent again");
    assert_eq!((m.uid(), m.mode() & 0o7777), (0, 0o4755));

    // The legitimate case: the same tree again moves nothing, touches no inode.
    let inode = |rel: &str| fs::metadata(dst.join(rel)).unwrap().ino();
    let before = (inode("bin/tool"), inode("plain"));
    let out = copy(&[&with_slash(&src)], &dst, &["--json"]);
    out.assert_code(0);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(pipe_harness::json_u64(&out, &text, "files"), 0, "{text}");
    assert_eq!(pipe_harness::json_u64(&out, &text, "files_unchanged"), 2);
    assert_eq!((inode("bin/tool"), inode("plain")), before);
    assert_trees_equal(&src, &dst);
}
