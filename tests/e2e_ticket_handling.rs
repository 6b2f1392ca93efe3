//! The ticket is the only credential of a transfer: `recv --ticket-file` must write it for
//! its owner's eyes only, whatever was planted beside it, and `send` must be able to take it
//! without putting it on its command line (`--ticket-file`, `--to -`).

mod support;

use std::fs;
use std::io::Write;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::process::{Command, Stdio};

use support::*;

fn one_file(tmp: &std::path::Path) -> std::path::PathBuf {
    let src = tmp.join("one.txt");
    fs::write(&src, b"ticket handling\n").unwrap();
    src
}

#[test]
fn ticket_file_is_0600_even_when_a_loose_temp_file_was_planted() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("shared");
    fs::create_dir(&dir).unwrap();
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o1777)).unwrap();
    let ticket_file = dir.join("ticket");
    // What another user could plant in a sticky world-writable directory: the temporary
    // name an earlier haul used, world-readable.
    let planted = dir.join("ticket.tmp-haul");
    fs::write(&planted, b"").unwrap();
    fs::set_permissions(&planted, fs::Permissions::from_mode(0o666)).unwrap();
    let src = one_file(tmp.path());
    let dest = tmp.path().join("dest");
    let recv = recv(&dest, &["--ticket-file", ticket_file.to_str().unwrap()]);
    let sent = send(&[&src], &recv.ticket, &[]);
    let received = recv.wait();
    assert_transfer_ok(&sent, &received);
    let mode = fs::symlink_metadata(&ticket_file)
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o7777, 0o600, "ticket file mode {mode:o}");
}

#[test]
fn ticket_file_never_writes_through_a_planted_symlink() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("shared");
    fs::create_dir(&dir).unwrap();
    let victim = tmp.path().join("victim");
    fs::write(&victim, b"precious\n").unwrap();
    symlink(&victim, dir.join("ticket.tmp-haul")).unwrap();
    let ticket_file = dir.join("ticket");
    let src = one_file(tmp.path());
    let dest = tmp.path().join("dest");
    let recv = recv(&dest, &["--ticket-file", ticket_file.to_str().unwrap()]);
    let sent = send(&[&src], &recv.ticket, &[]);
    let received = recv.wait();
    assert_transfer_ok(&sent, &received);
    assert_eq!(fs::read(&victim).unwrap(), b"precious\n");
    assert!(!fs::symlink_metadata(&ticket_file)
        .unwrap()
        .file_type()
        .is_symlink());
}

#[test]
fn send_takes_the_ticket_from_a_file() {
    let tmp = tempfile::tempdir().unwrap();
    let ticket_file = tmp.path().join("ticket");
    let src = one_file(tmp.path());
    let dest = tmp.path().join("dest");
    let recv = recv(&dest, &["--ticket-file", ticket_file.to_str().unwrap()]);
    let mut cmd = Command::new(haul_bin());
    cmd.arg("send")
        .arg(&src)
        .arg("--ticket-file")
        .arg(&ticket_file)
        .env_remove("HAUL_TICKET");
    let sent = Running::spawn("send", cmd).wait();
    let received = recv.wait();
    assert_transfer_ok(&sent, &received);
    assert_trees_equal(&src, &dest.join("one.txt"));
}

#[test]
fn send_takes_the_ticket_from_stdin() {
    let tmp = tempfile::tempdir().unwrap();
    let src = one_file(tmp.path());
    let dest = tmp.path().join("dest");
    let recv = recv(&dest, &[]);
    let mut child = Command::new(haul_bin())
        .arg("send")
        .arg(&src)
        .args(["--to", "-", "-q"])
        .env_remove("HAUL_TICKET")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    writeln!(stdin, "{}", recv.ticket).unwrap();
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    let received = recv.wait();
    assert!(
        out.status.success(),
        "send --to - failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    received.assert_code(0);
    assert_trees_equal(&src, &dest.join("one.txt"));
}

#[test]
fn a_ticket_file_that_cannot_be_written_is_a_usage_error_before_any_ticket() {
    let tmp = tempfile::tempdir().unwrap();
    let dest = tmp.path().join("dest");
    let bad = tmp.path().join("no-such-dir").join("ticket");
    let out = Haul::new().run(&[
        "recv".as_ref(),
        dest.as_os_str(),
        "--listen".as_ref(),
        "127.0.0.1:0".as_ref(),
        "--ticket-file".as_ref(),
        bad.as_os_str(),
    ]);
    out.assert_code(2);
    assert!(out.stdout.is_empty(), "{}", out.describe());
}
