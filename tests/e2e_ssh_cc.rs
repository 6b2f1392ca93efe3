//! `--cc` reaches the far sender of a pull (a tree and a stream, over a real OpenSSH
//! server on loopback): the data connections the far `haul serve` sends on use the
//! congestion control asked for, as `ss -tip` shows it, not as haul says. The host's and
//! haul's own default here is bbr, so reno can only come from `--cc`.
//!
//! Prints `SKIPPED` when this machine cannot run sshd; under CI that is a failure instead.

mod support;

use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use support::sshd::Sshd;
use support::*;

/// The congestion control of every established TCP connection that a `haul serve`
/// process has sent more than 64 KiB on (a far sender's data connections), once each
/// sample.
fn far_sender_congestion() -> Vec<String> {
    let out = Command::new("ss")
        .args(["-Htinp", "state", "established"])
        .output()
        .expect("run ss");
    let text = String::from_utf8_lossy(&out.stdout);
    let serve = |line: &str| {
        line.split("pid=").skip(1).any(|rest| {
            let pid: String = rest.chars().take_while(char::is_ascii_digit).collect();
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains("serve"))
        })
    };
    let sent = |l: &str| -> u64 {
        l.split_whitespace()
            .find_map(|w| w.strip_prefix("bytes_sent:"))
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    // Each connection is two lines: addresses and process, then its info.
    let lines: Vec<&str> = text.lines().collect();
    lines
        .windows(2)
        .filter(|w| serve(w[0]) && sent(w[1]) > 64 << 10)
        .filter_map(|w| {
            w[1].split_whitespace()
                .find(|t| ["bbr", "cubic", "reno", "bbr2", "bbr3"].contains(t))
                .map(str::to_owned)
        })
        .collect()
}

/// Runs `haul copy -e RSH --remote-haul HAUL ARGS` and samples the far sender's
/// connections until it exits; its outcome and every congestion control seen.
fn pull_watching(sshd: &Sshd, args: &[&str]) -> (std::process::Output, Vec<String>) {
    let rsh = sshd.rsh();
    let mut cmd = Command::new(haul_bin());
    cmd.args(["copy", "-e", &rsh, "--remote-haul", haul_bin()])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("start haul copy");
    // Read while it runs: a stream to stdout would block on a full pipe.
    let read = |r: Option<Box<dyn std::io::Read + Send>>| {
        thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut r) = r {
                let _ = r.read_to_end(&mut buf);
            }
            buf
        })
    };
    let stdout = read(child.stdout.take().map(|r| Box::new(r) as _));
    let stderr = read(child.stderr.take().map(|r| Box::new(r) as _));
    let mut seen = Vec::new();
    let until = Instant::now() + Duration::from_secs(120);
    while child.try_wait().expect("wait for haul").is_none() && Instant::now() < until {
        seen.extend(far_sender_congestion());
        thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let status = child.wait().expect("wait for haul");
    let out = std::process::Output {
        status,
        stdout: stdout.join().expect("stdout reader"),
        stderr: stderr.join().expect("stderr reader"),
    };
    (out, seen)
}

#[test]
fn a_pulls_far_sender_uses_the_congestion_control_asked_for() {
    let Some(sshd) = Sshd::start("a_pulls_far_sender_uses_the_congestion_control_asked_for") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    std::fs::create_dir(&src).unwrap();
    let mut data = vec![0u8; (24 * MIB) as usize];
    Rng::new(11).fill(&mut data);
    std::fs::write(src.join("big"), &data).unwrap();
    // Paced, so that the sampling sees the connections carry data for a few seconds.
    let paced = ["--cc", "reno", "--limit", "8M", "--compress", "none"];

    // A tree (file mode).
    let from = format!("127.0.0.1:{}/", src.display());
    let dest = tmp.path().join("dest");
    let mut args = paced.to_vec();
    args.extend([from.as_str(), dest.to_str().unwrap()]);
    let (out, seen) = pull_watching(&sshd, &args);
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        sshd.log()
    );
    assert_trees_equal(&src, &dest);
    assert!(!seen.is_empty(), "ss saw no far sender's data connection");
    // Before the far end was told: bbr, haul's own choice there.
    assert!(
        seen.iter().all(|c| c == "reno"),
        "--cc reno, yet the far sender's connections showed {seen:?}"
    );

    // A stream (pipe mode): `haul copy host:FILE -`.
    let from = format!("127.0.0.1:{}", src.join("big").display());
    let mut args = paced.to_vec();
    args.extend([from.as_str(), "-"]);
    let (out, seen) = pull_watching(&sshd, &args);
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        sshd.log()
    );
    assert!(out.stdout == data, "the stream arrived damaged");
    assert!(!seen.is_empty(), "ss saw no far sender's data connection");
    assert!(
        seen.iter().all(|c| c == "reno"),
        "--cc reno, yet the far stream sender's connections showed {seen:?}"
    );
}
