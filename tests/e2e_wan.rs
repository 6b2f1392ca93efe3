//! Across an emulated long fat network (`../shared/testbed/wanlab`: 150 ms of round trip,
//! 1% random loss, a rate cap, live outages): what arrives is identical, the data
//! connections use the congestion control haul chose or was told (as `ss -ti` shows it,
//! not as haul says), and an outage of 20 s is survived. Behaviour only: how fast is
//! `bench/`'s business.
//!
//! The labs' namespaces default to reno, which is neither haul's choice (bbr) nor a name
//! the tests ask for (cubic), so each assertion can tell who chose.

mod support;

use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use support::pipe_harness::{drain, feed_random, json_field, start_recv, start_send, Proc};
use support::wanbed::{Wanlab, IP_B};
use support::{assert_trees_equal, build_tree, TreeOptions, MIB};

/// The lab every test here runs on, but for its name: 150 ms, 1% loss each way.
const PATH: [&str; 8] = [
    "--rtt", "150ms", "--loss", "1%", "--rate", "200mbit", "--cc", "reno",
];

/// Samples the congestion control of the data connections from `a` to `b` until `done`
/// says the sender exited; every name seen, once per sample and connection.
fn watch_congestion(lab: &Wanlab, done: &mut dyn FnMut() -> bool) -> Vec<String> {
    let mut seen = Vec::new();
    let until = Instant::now() + Duration::from_secs(200);
    while !done() && Instant::now() < until {
        seen.extend(lab.congestion_a_to_b());
        thread::sleep(Duration::from_millis(50));
    }
    seen
}

/// A stream of `len` random bytes from `a` to a `recv - RECV_ARGS` in `b`, sent with
/// `send - SEND_ARGS`; `during` runs while it flows (given the bytes delivered so far and
/// whether the sender exited). Returns the sender's and receiver's outcomes and whether
/// the bytes arrived whole.
fn stream_across(
    lab: &Wanlab,
    work: &std::path::Path,
    len: u64,
    (send_args, recv_args): (&[&str], &[&str]),
    during: impl FnOnce(&AtomicU64, &mut dyn FnMut() -> bool),
) -> (support::Outcome, support::Outcome, bool) {
    let ticket = work.join("ticket");
    let listen = format!("{IP_B}:0");
    let (a, b) = (lab.ns("a"), lab.ns("b"));
    let mut r = vec!["-"];
    r.extend_from_slice(recv_args);
    let mut recv = start_recv(Some(&b), &listen, &ticket, &r, Stdio::piped());
    let got = Arc::new(AtomicU64::new(0));
    let sink = drain(recv.take_stdout(), None, Arc::clone(&got), None);
    let mut s = vec!["-"];
    s.extend_from_slice(send_args);
    let mut send = start_send(Some(&a), &ticket, &s);
    let sent = feed_random(send.take_stdin(), len, 40);
    {
        let mut exited = || send.exited();
        during(&got, &mut exited);
    }
    let (send_out, recv_out) = (send.wait(), recv.wait());
    let sent = sent.join().unwrap();
    let (n, hash) = sink.join().unwrap();
    (send_out, recv_out, n == len && hash == sent)
}

#[test]
fn a_stream_at_150_ms_with_1_percent_loss_arrives_whole_over_bbr() {
    let test = "a_stream_at_150_ms_with_1_percent_loss_arrives_whole_over_bbr";
    let Some(lab) = Wanlab::up(test, "hwan1", &PATH) else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let mut seen = Vec::new();
    let (send, recv, whole) = stream_across(&lab, work.path(), 24 * MIB, (&[], &[]), |_, done| {
        seen = watch_congestion(&lab, done);
    });
    assert_eq!(send.code(), Some(0), "{}", send.describe());
    assert_eq!(recv.code(), Some(0), "{}", recv.describe());
    assert!(whole, "the stream arrived damaged\n{}", recv.describe());
    assert!(
        !seen.is_empty(),
        "ss saw no connection while the stream flowed"
    );
    assert!(
        seen.iter().all(|c| c == "bbr"),
        "the lab's default is reno; haul's connections must use bbr: {seen:?}"
    );
    let json = String::from_utf8_lossy(&send.stdout).into_owned();
    assert_eq!(
        json_field(&json, "congestion").as_deref(),
        Some("bbr"),
        "{json}"
    );
    let why = json_field(&json, "congestion_why").unwrap_or_default();
    assert!(
        why.contains("haul's choice; the host's default is reno"),
        "{json}"
    );
}

#[test]
fn a_tree_at_150_ms_with_1_percent_loss_arrives_identical_over_the_cc_asked_for() {
    let test = "a_tree_at_150_ms_with_1_percent_loss_arrives_identical_over_the_cc_asked_for";
    let Some(lab) = Wanlab::up(test, "hwan2", &PATH) else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let src = build_tree(work.path(), "src", &TreeOptions::small());
    let (ticket, dst) = (work.path().join("ticket"), work.path().join("dst"));
    let listen = format!("{IP_B}:0");
    let dst_arg = dst.to_str().unwrap();
    let recv = start_recv(
        Some(&lab.ns("b")),
        &listen,
        &ticket,
        &[dst_arg],
        Stdio::null(),
    );
    let src_arg = src.to_str().unwrap();
    let mut send = support::pipe_harness::haul(
        Some(&lab.ns("a")),
        &[
            "send",
            "--json",
            "-v",
            "--cc",
            "cubic",
            src_arg,
            "--ticket-file",
        ],
    );
    send.arg(&ticket).stdout(Stdio::piped());
    let mut send = Proc::start("send", send);
    send.capture_stdout();
    let seen = watch_congestion(&lab, &mut || send.exited());
    let (send, recv) = (send.wait(), recv.wait());
    assert_eq!(send.code(), Some(0), "{}", send.describe());
    assert_eq!(recv.code(), Some(0), "{}", recv.describe());
    assert_trees_equal(&src, &dst.join("src"));
    assert!(
        seen.iter().all(|c| c == "cubic"),
        "--cc cubic, yet ss showed {seen:?}"
    );
    let json = String::from_utf8_lossy(&send.stdout).into_owned();
    assert_eq!(
        json_field(&json, "congestion").as_deref(),
        Some("cubic"),
        "{json}"
    );
    assert!(
        send.stderr.contains(
            "data connections use congestion control cubic (--cc; the host's default is reno)"
        ),
        "-v names the choice\n{}",
        send.describe()
    );
}

#[test]
fn a_congestion_control_the_kernel_lacks_fails_at_once_naming_what_it_offers() {
    let test = "a_congestion_control_the_kernel_lacks_fails_at_once_naming_what_it_offers";
    let Some(lab) = Wanlab::up(test, "hwan3", &["--rtt", "10ms"]) else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    // The receiver never hears from a sender that refused to start: it gives up.
    let args: (&[&str], &[&str]) = (&["--cc", "nosuchcc"], &["--timeout", "5"]);
    let (send, recv, _) = stream_across(&lab, work.path(), MIB, args, |_, _| {});
    assert_eq!(send.code(), Some(2), "{}", send.describe());
    assert!(
        send.stderr
            .contains("congestion control 'nosuchcc' refused by the kernel")
            && send.stderr.contains("available: "),
        "{}",
        send.describe()
    );
    assert_ne!(recv.code(), Some(0), "{}", recv.describe());
}

#[test]
fn an_outage_of_20_s_at_150_ms_is_survived() {
    let test = "an_outage_of_20_s_at_150_ms_is_survived";
    let Some(lab) = Wanlab::up(test, "hwan4", &PATH) else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let (send, recv, whole) =
        stream_across(&lab, work.path(), 32 * MIB, (&[], &[]), |got, done| {
            let until = Instant::now() + Duration::from_secs(120);
            while got.load(Ordering::Relaxed) < 4 * MIB && !done() {
                assert!(Instant::now() < until, "nothing arrived in 120 s");
                thread::sleep(Duration::from_millis(20));
            }
            lab.set(&["--loss", "100%"]);
            thread::sleep(Duration::from_secs(20));
            lab.set(&["--loss", "1%"]);
        });
    assert_eq!(send.code(), Some(0), "{}", send.describe());
    assert_eq!(recv.code(), Some(0), "{}", recv.describe());
    assert!(whole, "the stream arrived damaged\n{}", recv.describe());
}
