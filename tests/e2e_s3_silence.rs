//! An object store that goes silent ends the copy with one clear line within `--timeout`,
//! never a wait without end (docs/design.md *Liveness*): a listener that takes the
//! connection and the request and never answers, and a real S3 server (s3s-fs) stopped
//! with SIGSTOP while a multipart upload runs into it.

mod support;

use std::ffi::OsString;
use std::io::Read;
use std::net::TcpListener;
use std::process::Command;

use support::process::PROCESS_TIMEOUT;
use support::s3::{S3Server, ACCESS_KEY, SECRET_KEY};
use support::*;

fn os(s: impl Into<OsString>) -> OsString {
    s.into()
}

/// Asserts `out` is the silence failure: exit 5, one line naming the bucket and --timeout.
fn assert_silence_failure(out: &Outcome, bucket: &str) {
    out.assert_code(5);
    let line = out.stderr.trim();
    assert_eq!(line.lines().count(), 1, "{}", out.describe());
    assert!(
        line.contains(bucket) && line.contains("said nothing") && line.contains("--timeout"),
        "{}",
        out.describe()
    );
}

#[test]
fn a_server_that_takes_the_request_and_never_answers_fails_the_copy_after_the_timeout() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    // Takes every connection and reads every byte sent, and says nothing.
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut c) = conn else { return };
            std::thread::spawn(move || {
                let mut buf = [0u8; 65536];
                while matches!(c.read(&mut buf), Ok(n) if n > 0) {}
            });
        }
    });
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("f"), b"data").unwrap();
    for args in [
        vec![os(tmp.path().join("f")), os("s3://quiet/p/")],
        vec![os("s3://quiet/p/"), os(tmp.path().join("d"))],
    ] {
        let mut cmd = Command::new(haul_bin());
        cmd.arg("copy")
            .args(&args)
            .args(["--timeout", "2", "--s3-endpoint"])
            .arg(format!("http://127.0.0.1:{port}"))
            .env("HOME", tmp.path())
            .env("AWS_ACCESS_KEY_ID", ACCESS_KEY)
            .env("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
            .env("AWS_REGION", "us-east-1");
        let out = Running::spawn("copy", cmd).wait();
        assert_silence_failure(&out, "s3://quiet");
    }
}

#[test]
fn a_server_stopped_mid_upload_fails_the_copy_after_the_timeout() {
    let Some(s3) = S3Server::start() else { return };
    s3.bucket("stopped");
    let tmp = tempfile::tempdir().unwrap();
    let big = tmp.path().join("big.bin");
    write_random_file(&big, 512 << 20, 7);
    let cmd = s3.copy_command(
        &[
            os(&big),
            os("s3://stopped/big.bin"),
            os("--timeout"),
            os("3"),
        ],
        &[
            ("AWS_ACCESS_KEY_ID", ACCESS_KEY),
            ("AWS_SECRET_ACCESS_KEY", SECRET_KEY),
        ],
    );
    let run = Running::spawn("copy", cmd);
    // Parts are on their way once the server has some of them on disk.
    let started = std::time::Instant::now();
    while dir_bytes(s3.root.path()) < 16 << 20 {
        assert!(
            started.elapsed() < PROCESS_TIMEOUT && !run.has_exited(),
            "the upload never reached the server"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let pid = nix::unistd::Pid::from_raw(s3.pid() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGSTOP).unwrap();
    let out = run.wait();
    let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGCONT);
    assert_silence_failure(&out, "s3://stopped");
}

/// Bytes in the files under `dir`.
fn dir_bytes(dir: &std::path::Path) -> u64 {
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            match e.metadata() {
                Ok(m) if m.is_dir() => stack.push(e.path()),
                Ok(m) => total += m.len(),
                Err(_) => {}
            }
        }
    }
    total
}
