//! `haul probe PATH... --to TICKET` against a waiting `haul recv DIR`: the receiver
//! measures DIR and counts the probe's streams, DIR is left exactly as it was, and the
//! receiver keeps waiting for the sender, which then completes a real transfer. At most
//! three probes per receiver (the fourth is refused, and the sender is still served); a
//! wrong key is refused as a sender's would be; a stream receiver turns a probe away in
//! one line. Over a capped netns link the network rate stays within the cap. Every bound
//! here only turns a hang into a failure.

mod support;

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use haul::transport::{Secret, Ticket};
use support::pipe_harness::{json_field, Netlab};
use support::process::Running;
use support::*;

fn field(out: &Outcome, key: &str) -> f64 {
    let text = String::from_utf8_lossy(&out.stdout);
    json_field(&text, key)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no numeric {key}\n{}", out.describe()))
}

/// `haul probe --json --streams 2 PATHS... --to TICKET`, to completion.
fn probe(paths: &[&Path], ticket: &str) -> Outcome {
    let mut cmd = Haul::new().command("probe");
    cmd.args(["--json", "--streams", "2"])
        .args(paths)
        .args(["--to", ticket]);
    Running::spawn("probe", cmd).wait()
}

/// What a directory holds and when it last changed: a probe must change neither.
fn state(dir: &Path) -> (Vec<Vec<u8>>, i64, i64) {
    let mut names = dir_names(dir);
    names.sort();
    let m = std::fs::metadata(dir).unwrap();
    (names, m.mtime(), m.mtime_nsec())
}

fn source(tmp: &Path) -> std::path::PathBuf {
    let src = tmp.join("src");
    std::fs::create_dir(&src).unwrap();
    write_random_file(&src.join("random"), 12 * MIB, 11);
    for i in 0..20 {
        std::fs::write(src.join(format!("small-{i}")), format!("file {i}")).unwrap();
    }
    src
}

fn assert_measured(out: &Outcome) {
    out.assert_code(0);
    for key in [
        "write_rate",
        "file_seconds",
        "network_rate",
        "predicted_rate",
    ] {
        assert!(field(out, key) > 0.0, "{key}\n{}", out.describe());
    }
    // A small job on loopback may be predicted at under a millisecond.
    assert!(field(out, "predicted_seconds") >= 0.0, "{}", out.describe());
    assert_eq!(field(out, "files"), 21.0, "{}", out.describe());
    assert_eq!(field(out, "streams"), 2.0);
}

#[test]
fn a_waiting_recv_answers_a_probe_then_receives() {
    let tmp = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let src = source(tmp.path());
    let dest = tmp.path().join("dest");
    let recv = recv(&dest, &[]);
    let before = state(&dest);

    let out = probe(&[&src], &recv.ticket);
    assert_measured(&out);
    let codec = json_field(&String::from_utf8_lossy(&out.stdout), "compress").unwrap();
    assert!(
        ["none", "lz4", "zstd:1", "zstd:3"].contains(&codec.as_str()),
        "{}",
        out.describe()
    );
    assert_eq!(state(&dest), before, "the probe changed the destination");
    assert!(
        !recv.proc.has_exited(),
        "recv must keep waiting after a probe"
    );

    let sent = send(&[src.as_path()], &recv.ticket, &[]);
    let received = recv.wait();
    assert_transfer_ok(&sent, &received);
    assert!(
        received.stderr.contains("answered a probe"),
        "{}",
        received.describe()
    );
    assert_trees_equal(&src, &dest.join("src"));
    assert_no_part_files(&dest);
}

#[test]
fn a_fourth_probe_is_refused_and_the_sender_is_still_served() {
    let tmp = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let src = source(tmp.path());
    let dest = tmp.path().join("dest");
    let recv = recv(&dest, &[]);
    for _ in 0..3 {
        assert_measured(&probe(&[&src], &recv.ticket));
    }
    let fourth = probe(&[&src], &recv.ticket);
    fourth.assert_code(2);
    assert!(
        fourth.stderr.contains("3 probes") && fourth.stderr.lines().count() == 1,
        "{}",
        fourth.describe()
    );
    assert!(dir_names(&dest).is_empty());
    let sent = send(&[src.as_path()], &recv.ticket, &[]);
    assert_transfer_ok(&sent, &recv.wait());
    assert_trees_equal(&src, &dest.join("src"));
}

#[test]
fn a_probe_with_a_wrong_key_is_refused_as_a_send_is() {
    let tmp = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let src = tmp.path().join("payload.bin");
    write_random_file(&src, 3 * MIB + 5, 42);
    let dest = tmp.path().join("dest");
    let recv = recv(&dest, &[]);
    let mut t = Ticket::parse(&recv.ticket).unwrap();
    let mut secret = *t.secret.as_bytes();
    secret[3] ^= 0x40;
    t.secret = Secret::from_bytes(secret);
    let bad = probe(&[&src], &t.encode());
    bad.assert_code(6);
    assert!(bad.stderr.contains("secret"), "{}", bad.describe());
    let mut t = Ticket::parse(&recv.ticket).unwrap();
    t.fingerprint[5] ^= 1;
    probe(&[&src], &t.encode()).assert_code(6);
    assert!(!recv.proc.has_exited(), "recv must keep waiting");
    assert_nothing_delivered(&dest);
    let sent = send(&[src.as_path()], &recv.ticket, &[]);
    assert_transfer_ok(&sent, &recv.wait());
    assert_trees_equal(&src, &dest.join("payload.bin"));
}

/// Over a link capped at 100 Mbit/s (tc, not `--limit`) the measured network rate is
/// that link's: at most the cap (with room for tbf's burst) and not far below it.
#[test]
fn over_a_capped_link_the_network_rate_is_the_links() {
    if !is_root() {
        assert!(
            std::env::var_os("CI").is_none(),
            "needs root (network namespaces, tc)"
        );
        eprintln!("SKIPPED: not root (network namespaces, tc)");
        return;
    }
    let lab = Netlab::up("100mbit");
    let tmp = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let src = source(tmp.path());
    let dest = tmp.path().join("dest");
    let ticket = tmp.path().join("ticket");
    let mut recv = Command::new("ip")
        .args(["netns", "exec", &lab.b, haul_bin(), "recv", "--listen"])
        .arg(format!("{}:0", lab.ip_b))
        .arg(&dest)
        .arg("--ticket-file")
        .arg(&ticket)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut waited = Duration::ZERO;
    while !std::fs::metadata(&ticket).is_ok_and(|m| m.len() > 0) {
        assert!(waited < Duration::from_secs(60), "no ticket");
        std::thread::sleep(Duration::from_millis(50));
        waited += Duration::from_millis(50);
    }
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", &lab.a, haul_bin(), "probe", "--json"])
        .args(["--streams", "2"])
        .arg(&src)
        .arg("--ticket-file")
        .arg(&ticket);
    let out = Running::spawn("probe", cmd).wait();
    let _ = recv.kill();
    let _ = recv.wait();
    assert_measured(&out);
    let cap = 100e6 / 8.0;
    let rate = field(&out, "network_rate");
    assert!(
        rate > cap / 20.0 && rate < cap * 1.5,
        "{rate} B/s over a {cap} B/s link\n{}",
        out.describe()
    );
    let text = String::from_utf8_lossy(&out.stdout);
    eprintln!("probe over 100mbit: {text}");
}

/// A stream receiver (`haul recv -`) takes no probes: the prober says so in one line
/// (exit 5), and the receiver is still there for its sender.
#[test]
fn a_stream_receiver_turns_a_probe_away_clearly() {
    let tmp = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let src = tmp.path().join("payload.bin");
    write_random_file(&src, MIB, 8);
    let ticket = tmp.path().join("ticket");
    let mut recv =
        support::pipe_harness::start_recv(None, "127.0.0.1:0", &ticket, &["-"], Stdio::null());
    let mut cmd = Haul::new().command("probe");
    cmd.arg(&src).arg("--ticket-file").arg(&ticket);
    let out = Running::spawn("probe", cmd).wait();
    out.assert_code(5);
    assert!(
        out.stderr.contains("only a waiting `haul recv DIR`") && out.stderr.lines().count() == 1,
        "{}",
        out.describe()
    );
    assert!(!recv.exited(), "recv - must keep waiting");
}
