//! Never hang: every wait of either end is bounded and ends in recovery or a clean,
//! named failure (docs/design.md, *Liveness*), tried with the real binary over real
//! sockets. A receiver whose sender never comes gives up at its `--timeout`; a chain that
//! names one receiver twice is refused before anything is sent; a stopped hop in the
//! middle of a file chain is dropped and named while the others complete.
//!
//! No timing thresholds: each process is bounded by the harness's generous
//! `PROCESS_TIMEOUT` (a hang fails the test, it is never measured).

mod support;

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use support::process::PROCESS_TIMEOUT;
use support::*;

#[test]
fn recv_with_a_timeout_gives_up_on_a_sender_that_never_comes_and_removes_its_empty_dir() {
    let tmp = tempfile::tempdir().unwrap();
    let dest = tmp.path().join("made").join("dest");
    let waiting = recv(&dest, &["--timeout", "3"]);
    assert!(dest.is_dir(), "recv makes DIR before the sender comes");
    let out = waiting.wait();
    out.assert_code(5);
    assert!(
        out.stderr.contains("no sender connected within 3 s"),
        "{}",
        out.describe()
    );
    assert_eq!(out.stderr.trim().lines().count(), 1, "{}", out.describe());
    assert!(
        !tmp.path().join("made").exists(),
        "the directories this run made stay behind: {:?}",
        fs::read_dir(tmp.path()).unwrap().collect::<Vec<_>>()
    );
}

#[test]
fn recv_with_a_timeout_leaves_a_dir_it_did_not_make() {
    let tmp = tempfile::tempdir().unwrap();
    let dest = tmp.path().join("dest");
    fs::create_dir(&dest).unwrap();
    let out = recv(&dest, &["--timeout", "2"]).wait();
    out.assert_code(5);
    assert!(dest.is_dir(), "a DIR that was there before is kept");
}

/// `haul send SRC --to T... --json ARGS`.
fn spawn_chain(src: &Path, tickets: &[&str], args: &[&str]) -> Running {
    let mut cmd = Haul::new().command("send");
    cmd.arg(src);
    for t in tickets {
        cmd.args(["--to", t]);
    }
    cmd.args(["--json", "--block-size", BLOCK_SIZE_ARG])
        .args(args);
    Running::spawn("send", cmd)
}

/// The same receiver's ticket with another list of addresses (only its first, or its
/// own and one more): another string, the same receiver.
fn same_receiver_spelled_otherwise(ticket: &str) -> String {
    let mut t = haul::transport::Ticket::parse(ticket).expect("a ticket");
    match t.addrs.len() {
        1 => {
            let mut other = t.addrs[0];
            other.set_port(other.port().wrapping_add(1).max(1));
            t.addrs.push(other);
        }
        _ => t.addrs.truncate(1),
    }
    let spelled = t.encode();
    assert_ne!(spelled, ticket);
    spelled
}

/// Regression (issue 36, 3): a chain that named one receiver twice (its ticket spelled
/// with other addresses) went out, and the receiver dialed itself as its own next hop and
/// waited on itself, `--timeout` or not. The sender refuses it before dialing anyone.
#[test]
fn a_fan_out_naming_one_receiver_twice_is_refused_before_anything_is_sent() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("f");
    write_random_file(&src, MIB, 3);
    let dest = tmp.path().join("dest");
    // A relay: without --relay it would refuse any chain (and so never dial itself).
    let waiting = recv(&dest, &["--timeout", "30", "--relay"]);
    let again = same_receiver_spelled_otherwise(&waiting.ticket);
    for twice in [
        [waiting.ticket.as_str(), waiting.ticket.as_str()],
        [&waiting.ticket, &again],
    ] {
        let sent = spawn_chain(&src, &twice, &[]).wait();
        sent.assert_code(2);
        assert!(sent.stderr.contains("named twice"), "{}", sent.describe());
    }
    assert!(
        !waiting.proc.has_exited(),
        "the receiver still waits for its sender"
    );
    let got = waiting.kill();
    assert!(
        fs::read_dir(&dest).unwrap().next().is_none(),
        "something arrived\n{}",
        got.describe()
    );
}

/// Blocks allocated under `dir` (partial files included): how much reached a receiver.
fn arrived(dir: &Path) -> u64 {
    fn walk(p: &Path) -> u64 {
        let Ok(m) = fs::symlink_metadata(p) else {
            return 0;
        };
        if !m.is_dir() {
            return m.blocks() * 512;
        }
        fs::read_dir(p)
            .map(|d| d.flatten().map(|e| walk(&e.path())).sum())
            .unwrap_or(0)
    }
    walk(dir)
}

/// Regression (issue 36, 2): the second hop of a file chain, SIGSTOPped mid-transfer,
/// kept the first (waiting on its answer and on writes to it) and so the sender waiting
/// for good. Now the first hop drops it at its bounds (a write that moves nothing for
/// 10 s, an answer silent for 10 s; it says `Keepalive` upstream meanwhile), the sender
/// finishes with the first replica, exits 5 and names the stopped one.
#[test]
fn a_stopped_second_hop_is_dropped_and_named_and_the_first_completes() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    fs::create_dir(&src).unwrap();
    write_random_file(&src.join("big"), 24 * MIB, 11);
    let (d1, d2) = (tmp.path().join("d1"), tmp.path().join("d2"));
    let listen = ["--listen", "127.0.0.1:0"];
    let first = recv(&d1, &["--listen", "127.0.0.1:0", "--relay"]);
    let second = recv(&d2, &listen);
    let sender = spawn_chain(&src, &[&first.ticket, &second.ticket], &["--limit", "4M"]);
    let until = Instant::now() + PROCESS_TIMEOUT;
    while arrived(&d2) < 2 * MIB {
        assert!(Instant::now() < until, "the second hop never got data");
        assert!(!sender.has_exited(), "the sender ended before the stop");
        thread::sleep(Duration::from_millis(20));
    }
    // SAFETY: a plain signal to our own child, by its pid.
    assert_eq!(
        unsafe { libc::kill(second.proc.pid() as i32, libc::SIGSTOP) },
        0
    );
    let label = haul::transport::Ticket::parse(&second.ticket)
        .unwrap()
        .addrs[0]
        .to_string();
    let sent = sender.wait();
    let one = first.wait();
    let stopped = second.kill();
    let all = format!(
        "{}\n{}\n{}",
        sent.describe(),
        one.describe(),
        stopped.describe()
    );
    one.assert_code(0);
    assert_eq!(sent.code(), Some(5), "a failed replica: {all}");
    let json = String::from_utf8_lossy(&sent.stdout).into_owned();
    assert!(
        json.contains(&format!("{{\"host\":\"{label}\",\"ok\":false")),
        "the report names the stopped hop {label}: {json}\n{all}"
    );
    assert_eq!(json.matches("\"ok\":true").count(), 1, "{json}\n{all}");
    assert_trees_equal(&src, &d1.join("src"));
    assert_no_part_files(&d1);
}

/// A bound on a wait the test itself makes: the process ends within `bound` (far beyond
/// the one under test), else it is killed and the test fails, naming it hung.
fn ends_within(p: Running, bound: Duration) -> Outcome {
    let until = Instant::now() + bound;
    while !p.has_exited() {
        if Instant::now() > until {
            let out = p.kill();
            panic!("hung: still running after {bound:?}\n{}", out.describe());
        }
        thread::sleep(Duration::from_millis(20));
    }
    p.wait()
}

/// Far beyond every bound these tests exercise (3 s, 10 s, 30 s).
const HUNG: Duration = Duration::from_secs(120);

/// Regression (issue 36): a receiver whose sender stopped (SIGSTOP) with its data
/// connections open waited for good: open data connections counted as a sender present,
/// and a stopped process keeps them. Now the sender says `Keepalive` every second while it
/// works between requests, and a receiver that hears nothing and gets no data for its
/// `--timeout` ends with exit 5 saying so, keeping what arrived for a re-run.
#[test]
fn a_receiver_whose_sender_stopped_ends_at_its_timeout_and_keeps_what_arrived() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("big");
    write_random_file(&src, 24 * MIB, 12);
    let dest = tmp.path().join("dest");
    let waiting = recv(&dest, &["--timeout", "3"]);
    let sender = Haul::new().spawn_send(&[&src], &waiting.ticket, &["--limit", "4M"]);
    let until = Instant::now() + PROCESS_TIMEOUT;
    while arrived(&dest) < 2 * MIB {
        assert!(Instant::now() < until, "no data arrived");
        assert!(!sender.has_exited(), "the sender ended before the stop");
        thread::sleep(Duration::from_millis(20));
    }
    // SAFETY: a plain signal to our own child, by its pid.
    assert_eq!(unsafe { libc::kill(sender.pid() as i32, libc::SIGSTOP) }, 0);
    let got = ends_within(waiting.proc, HUNG);
    let stopped = sender.kill();
    let all = format!("{}\n{}", got.describe(), stopped.describe());
    got.assert_code(5);
    assert!(
        got.stderr
            .contains("the sender said nothing and sent no data for 3 s"),
        "{all}"
    );
    assert!(!part_files(&dest).is_empty(), "what arrived is kept: {all}");
}

/// Regression (issue 36): a connection that authenticated as a control stream and then
/// said nothing held `haul recv` (files and streams) for good: it read that connection's
/// first message without a bound, and the real sender's connections queued behind it
/// (the sender gave up after its re-dials, the receiver never did). Now a control
/// connection silent for 10 s after its handshake is closed, and the sender after it is
/// served.
#[test]
fn a_control_connection_silent_after_its_handshake_is_closed_and_the_next_sender_served() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("f");
    write_random_file(&src, MIB, 13);
    for stream in [false, true] {
        let dest = tmp.path().join(format!("dest-{stream}"));
        let waiting = match stream {
            true => recv(Path::new("--stream"), &[dest.to_str().unwrap()]),
            false => recv(&dest, &[]),
        };
        let ticket = haul::transport::Ticket::parse(&waiting.ticket).unwrap();
        let silent = haul::transport::connect(&ticket, haul::transport::Role::Control, true)
            .expect("a control connection");
        let sender = match stream {
            false => Haul::new().spawn_send(&[&src], &waiting.ticket, &[]),
            true => {
                let mut cmd = Haul::new().command("send");
                let from = format!("cat {}", src.display());
                cmd.args(["--from-command", &from, "--to", &waiting.ticket]);
                Running::spawn("send", cmd)
            }
        };
        let sent = ends_within(sender, HUNG);
        let got = ends_within(waiting.proc, HUNG);
        drop(silent);
        let all = format!("{}\n{}", sent.describe(), got.describe());
        sent.assert_code(0);
        got.assert_code(0);
        assert!(
            got.stderr
                .contains("said nothing for 10 s after its handshake"),
            "{all}"
        );
        let arrived = match stream {
            true => dest.clone(),
            false => dest.join("f"),
        };
        assert_eq!(
            fs::read(&arrived).unwrap(),
            fs::read(&src).unwrap(),
            "{all}"
        );
    }
}
