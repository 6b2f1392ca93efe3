//! Stream copies between hosts over a real OpenSSH server (`support::sshd`): a stream
//! pushed into a far file and into a far command (`tar -x`), a far file and a far
//! command's output pulled to stdout, and a far command that fails (its exit status is
//! the transfer's, its stderr shown prefixed with the host).
//!
//! Each test prints `SKIPPED` when this machine cannot run sshd (not root, or not
//! installed); under CI that is a failure instead.

mod support;

use std::fs::File;
use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::sshd::Sshd;
use support::*;

/// Longest any one copy may take before the test fails as a hang.
const LIMIT: Duration = Duration::from_secs(120);

struct Ran {
    code: Option<i32>,
    stdout: Vec<u8>,
    stderr: String,
}

/// `haul copy -e RSH --remote-haul HAUL --block-size 1M ARGS...` with `stdin` as its
/// standard input, run to completion (killed after `LIMIT`).
fn copy(sshd: &Sshd, stdin: Option<&Path>, args: &[&str]) -> Ran {
    let mut cmd = Command::new(haul_bin());
    cmd.arg("copy")
        .arg("-e")
        .arg(sshd.rsh())
        .arg("--remote-haul")
        .arg(haul_bin())
        .arg("--block-size")
        .arg(BLOCK_SIZE_ARG)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    match stdin {
        Some(p) => cmd.stdin(File::open(p).unwrap()),
        None => cmd.stdin(Stdio::null()),
    };
    let mut child = cmd.spawn().unwrap();
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let o = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = out.read_to_end(&mut v);
        v
    });
    let e = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = err.read_to_end(&mut v);
        v
    });
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("haul copy {args:?} hung; sshd log:\n{}", sshd.log());
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let ran = Ran {
        code: status.code(),
        stdout: o.join().unwrap(),
        stderr: String::from_utf8_lossy(&e.join().unwrap()).into_owned(),
    };
    if ran.code != Some(0) {
        eprintln!("--- haul stderr ---\n{}", ran.stderr);
    }
    ran
}

fn at(path: &Path) -> String {
    format!("127.0.0.1:{}", path.display())
}

#[test]
fn a_stream_goes_into_a_far_file_and_comes_back_to_stdout() {
    let Some(sshd) = Sshd::start("a_stream_goes_into_a_far_file_and_comes_back_to_stdout") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("stream.bin");
    write_random_file(&src, 9 * MIB + 12345, 7);
    let far = tmp.path().join("far").join("copy.bin");
    std::fs::create_dir(far.parent().unwrap()).unwrap();
    let r = copy(&sshd, Some(&src), &["-", &at(&far)]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert_eq!(std::fs::read(&far).unwrap(), std::fs::read(&src).unwrap());
    // Nothing but the file: no temporary left beside it.
    assert_eq!(std::fs::read_dir(far.parent().unwrap()).unwrap().count(), 1);

    let r = copy(&sshd, None, &["--json", &at(&far), "-"]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert_eq!(
        r.stdout,
        std::fs::read(&src).unwrap(),
        "stdout holds the stream only"
    );
    let digest = blake3::hash(&r.stdout).to_hex().to_string();
    assert!(
        r.stderr
            .contains(&format!("\"stream_blake3\":\"{digest}\"")),
        "the JSON report (on stderr, as stdout carries the stream) names the digest: {}",
        r.stderr
    );
}

#[test]
fn a_stream_goes_into_a_far_command() {
    let Some(sshd) = Sshd::start("a_stream_goes_into_a_far_command") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let src = build_tree(tmp.path(), "src", &TreeOptions::small());
    let tar = tmp.path().join("src.tar");
    // POSIX (pax) format keeps nanosecond mtimes and --sparse the holes, so the trees
    // compare exactly.
    let st = Command::new("tar")
        .arg("--format=posix")
        .arg("--sparse")
        .arg("-cf")
        .arg(&tar)
        .arg("-C")
        .arg(tmp.path())
        .arg("src")
        .status()
        .unwrap();
    assert!(st.success());
    let dest = tmp.path().join("dest");
    std::fs::create_dir(&dest).unwrap();
    let cmd = format!("tar -x -C '{}'", dest.display());
    let r = copy(
        &sshd,
        Some(&tar),
        &["-", "127.0.0.1:", "--to-command", &cmd],
    );
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert_contents_equal(&src, &dest.join("src"));
}

#[test]
fn a_far_command_that_fails_fails_the_copy_with_its_host_and_output() {
    let Some(sshd) =
        Sshd::start("a_far_command_that_fails_fails_the_copy_with_its_host_and_output")
    else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("stream.bin");
    write_random_file(&src, 3 * MIB, 3);
    // The consumer fails after reading everything: exit 4, its words prefixed by the host.
    let r = copy(
        &sshd,
        Some(&src),
        &[
            "-",
            "127.0.0.1:",
            "--to-command",
            "cat >/dev/null; echo 'mbstream: bad header' >&2; exit 6",
        ],
    );
    assert_eq!(r.code, Some(4), "{}", r.stderr);
    assert!(
        r.stderr.contains("127.0.0.1: mbstream: bad header"),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr.contains("haul: error: 127.0.0.1: ") && r.stderr.contains("exited with status 6"),
        "{}",
        r.stderr
    );
    // A far producer that dies mid-stream: exit 3, never a clean end.
    let r = copy(
        &sshd,
        None,
        &[
            "--from-command",
            "head -c 3000000 /dev/urandom; kill -9 $$",
            "127.0.0.1:",
            "-",
        ],
    );
    assert_eq!(r.code, Some(3), "{}", r.stderr);
    assert!(r.stderr.contains("killed by signal 9"), "{}", r.stderr);
    // A far producer that works: its output arrives whole.
    let r = copy(
        &sshd,
        None,
        &[
            "--from-command",
            &format!("cat '{}'", src.display()),
            "127.0.0.1:",
            "-",
        ],
    );
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert_eq!(r.stdout, std::fs::read(&src).unwrap());
}
