//! What a user with rsync habits runs into in the first hour, through the real binary:
//! refusals that come before anything is sent, at the start rather than when a sender
//! connects, and a `--json` object on failure too.

mod support;

use std::process::Command;

use support::process::TICKET_PREFIX;
use support::*;

fn run(args: &[&str]) -> std::process::Output {
    Command::new(haul_bin()).args(args).output().unwrap()
}

#[test]
fn two_sources_with_one_name_are_refused_before_anything_is_sent() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    std::fs::create_dir_all(&a).unwrap();
    std::fs::create_dir_all(&b).unwrap();
    std::fs::write(a.join("x"), b"1").unwrap();
    std::fs::write(b.join("x"), b"2").unwrap();
    let dst = tmp.path().join("dst");
    let out = run(&[
        "copy",
        a.join("x").to_str().unwrap(),
        b.join("x").to_str().unwrap(),
        dst.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("would both arrive as x"), "{err}");
    assert!(!dst.exists(), "nothing may be created");
}

#[test]
fn recv_fails_at_start_on_a_file_or_an_unwritable_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("file");
    std::fs::write(&file, b"x").unwrap();
    let out = run(&["recv", file.to_str().unwrap(), "--json"]);
    assert_eq!(out.status.code(), Some(4), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("not a directory") && err.contains("--stream"),
        "{err}"
    );
    // No ticket: the only stdout line is the JSON object saying why, with the code.
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!stdout.contains(TICKET_PREFIX), "{stdout}");
    assert!(
        stdout.starts_with("{\"error\":\"cannot write destination ")
            && stdout.trim_end().ends_with(",\"exit_code\":4}"),
        "{stdout}"
    );
    if is_root() {
        // A directory its user cannot write: refused before a ticket is printed.
        let ro = tmp.path().join("ro");
        std::fs::create_dir(&ro).unwrap();
        let out = Command::new("setpriv")
            .args([
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                haul_bin(),
                "recv",
            ])
            .arg(&ro)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(4), "{out:?}");
        assert!(out.stdout.is_empty(), "{out:?}");
    }
}

#[test]
fn json_reports_a_bad_command_line_too() {
    let out = run(&["send", "/nonexistent-x", "--to", "haul1-garbage", "--json"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.starts_with("{\"error\":") && stdout.contains("\"exit_code\":2}"),
        "{stdout}"
    );
}
