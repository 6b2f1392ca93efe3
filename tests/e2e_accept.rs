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
