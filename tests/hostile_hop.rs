//! Hostile peers of a chain fan-out, built from the library's own protocol and transport
//! types, against real `haul` processes.
//!
//! A ticket holder who names hops of its own choosing must not make a plain `haul recv`
//! dial them (before `--relay`, a forged hop ticket made the receiver dial any address and
//! report back whether it was open). A hostile first hop must not be able to claim that
//! a later replica is complete (before each hop proved its own outcome, a fake first hop
//! answering `Need([])`, `Replicas[T2: Done]` and `Done` made the sender exit 0 with T2
//! never contacted).

mod support;

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use haul::protocol::vouch::{proof, ManifestDigest};
use haul::protocol::{Chain, Control, Hop, Outcome, Replica, Summary, SyncOptions, Want};
use haul::session::Channel;
use haul::transport::{connect, Listener, Role, Secret, Ticket};
use support::hostile::{start_recv, wait_exit, Listening};

/// Waits (bounded) for a process to exit; its exit code and stderr.
fn wait(child: &mut Child, what: &str) -> (i32, String) {
    wait_exit(child, what, Duration::from_secs(60))
}

/// A port to probe: counts the connections made to it.
fn probed_port() -> (std::net::SocketAddr, Arc<AtomicUsize>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let seen = Arc::new(AtomicUsize::new(0));
    let s = Arc::clone(&seen);
    std::thread::spawn(move || {
        for c in l.incoming() {
            if c.is_ok() {
                s.fetch_add(1, Ordering::SeqCst);
            }
        }
    });
    (addr, seen)
}

/// A hop ticket for `addr` that no receiver printed.
fn forged_hop(addr: std::net::SocketAddr) -> Chain {
    let t = Ticket {
        addrs: vec![addr],
        fingerprint: [7; 32],
        secret: Secret::from_bytes([9; 32]),
    };
    Chain {
        hops: vec![Hop {
            label: addr.to_string(),
            ticket: t.encode(),
        }],
        encrypt: true,
        nonce: None,
    }
}

/// The receiver's answers until it closes; the `Error` among them, if any.
fn error_answer(c: &mut Channel) -> Option<(i32, String)> {
    for _ in 0..100 {
        match c.read(Some(Duration::from_secs(30))) {
            Ok(Control::Error { code, message }) => return Some((code, message)),
            Ok(_) => {}
            Err(_) => return None,
        }
    }
    None
}

fn assert_refused(recv: &mut Listening, answer: Option<(i32, String)>, seen: &AtomicUsize) {
    let (code, err) = wait(&mut recv.child, "haul recv");
    let (acode, message) = answer.expect("the receiver said why it stopped");
    assert_eq!(acode, 2, "{message}");
    assert!(message.contains("--relay"), "{message}");
    assert_eq!(code, 2, "recv exits as for a usage error: {err}");
    assert!(err.contains("--relay"), "{err}");
    assert_eq!(
        seen.load(Ordering::SeqCst),
        0,
        "the receiver dialed the address the sender named"
    );
}

#[test]
fn a_receiver_without_relay_refuses_a_chain_and_dials_nobody() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("dst");
    let (addr, seen) = probed_port();
    let mut recv = start_recv(&[dir.to_str().unwrap()]);
    let mut c = Channel::new(connect(&recv.ticket, Role::Control, true).expect("connect"));
    let _ = c.write(&Control::Start {
        streams: 1,
        block_size: 1 << 20,
        options: SyncOptions::default(),
    });
    let _ = c.write(&Control::Chain(forged_hop(addr)));
    let _ = c.write(&Control::Entries(Vec::new()));
    let answer = error_answer(&mut c);
    assert_refused(&mut recv, answer, &seen);
    assert!(!Path::new(&dir).join("x").exists());
}

#[test]
fn a_stream_receiver_without_relay_refuses_a_chain_and_dials_nobody() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let (addr, seen) = probed_port();
    let mut recv = start_recv(&["--stream", out.to_str().unwrap()]);
    let mut c = Channel::new(connect(&recv.ticket, Role::Control, true).expect("connect"));
    let _ = c.write(&Control::StreamStart {
        streams: 1,
        block_size: 1 << 20,
        window: 64 << 20,
        chain: forged_hop(addr),
    });
    let answer = error_answer(&mut c);
    assert_refused(&mut recv, answer, &seen);
    assert!(!out.exists());
}

/// A first hop that lies: it wants nothing, never dials the hop after it, and at `Finish`
/// says that hop is done, with the best proof it can make (a MAC keyed from the hop
/// ticket it was given, over the nonce and the manifest it saw). Returns its ticket.
fn lying_first_hop() -> String {
    let listener = Listener::bind(Some("127.0.0.1:0".parse().unwrap())).unwrap();
    let ticket = listener.ticket().encode();
    let (handle, accepted) = listener.spawn_acceptor();
    std::thread::spawn(move || {
        let _handle = handle;
        let mut held = Vec::new();
        let mut chan: Option<Channel> = None;
        let (mut nonce, mut next) = (None, None);
        let mut manifest = ManifestDigest::default();
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if let Ok(a) = accepted.recv_timeout(Duration::from_millis(20)) {
                match a.role {
                    Role::Control => chan = Some(Channel::new(a.conn)),
                    _ => held.push(a.conn),
                }
            }
            let Some(c) = chan.as_mut() else { continue };
            let msg = match c.read(Some(Duration::from_millis(20))) {
                Ok(m) => m,
                Err(e) if haul::session::is_tick(&e) => continue,
                Err(_) => return,
            };
            let mut chain = |ch: &Chain| {
                nonce = ch.nonce;
                next = ch.hops.first().cloned();
            };
            let lie = |c: &mut Channel,
                       digest: [u8; 32],
                       nonce: Option<[u8; 32]>,
                       next: &Option<Hop>,
                       summary: Summary| {
                let hop = next.as_ref().expect("the sender named the next hop");
                let t = Ticket::parse(&hop.ticket).unwrap();
                let key = Secret::from_bytes(*t.secret.as_bytes())
                    .outcome_key()
                    .unwrap();
                let forged = proof(&key, &nonce.unwrap_or_default(), &digest, &summary);
                let _ = c.write(&Control::Replicas(vec![Replica {
                    host: hop.label.clone(),
                    outcome: Outcome::Done(summary.clone()),
                    proof: Some(forged),
                }]));
                let _ = c.write(&Control::Done(summary));
            };
            match msg {
                Control::Chain(ch) => chain(&ch),
                Control::StreamStart { chain: ch, .. } => {
                    chain(&ch);
                    let _ = c.write(&Control::StreamAck {
                        written: 0,
                        have: 0,
                        window: 64 << 20,
                    });
                }
                Control::Entries(e) => {
                    manifest.batch(&e);
                    let _ = c.write(&Control::Need(Vec::<Want>::new()));
                }
                Control::Finish { .. } => {
                    lie(c, manifest.digest(), nonce, &next, Summary::default());
                }
                Control::StreamEnd { len, digest } => {
                    let _ = c.write(&Control::StreamAck {
                        written: len,
                        have: len,
                        window: 64 << 20,
                    });
                    let summary = Summary {
                        bytes: len,
                        ..Summary::default()
                    };
                    lie(c, digest, nonce, &next, summary);
                }
                _ => {}
            }
        }
        drop(held);
    });
    ticket
}

/// `haul send ARGS --to FIRST --to SECOND --json`, bounded; its code, stdout and stderr.
fn send_chain(args: &[&str], first: &str, second: &Ticket) -> (i32, String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_haul"))
        .arg("send")
        .args(args)
        .args([
            "--to",
            first,
            "--to",
            &second.encode(),
            "--json",
            "--retries",
            "1",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn haul send");
    let mut out = String::new();
    if let Some(mut o) = child.stdout.take() {
        let _ = std::io::Read::read_to_string(&mut o, &mut out);
    }
    let (code, err) = wait(&mut child, "haul send");
    (code, out, err)
}

fn assert_lie_caught(code: i32, out: &str, err: &str, second: &Ticket) {
    let label = second.addrs[0].to_string();
    assert_eq!(
        code, 8,
        "the sender took the first hop's word: {out}\n{err}"
    );
    let at = out.find(&format!("\"host\":\"{label}\"")).expect(out);
    assert!(
        out[at..].starts_with(&format!("\"host\":\"{label}\",\"ok\":false")),
        "{out}"
    );
    assert!(err.contains("without its proof"), "{err}");
}

#[test]
fn a_first_hop_cannot_claim_a_later_replica_complete() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    std::fs::create_dir(&src).unwrap();
    std::fs::write(src.join("a"), b"payload").unwrap();
    let dst2 = tmp.path().join("dst2");
    let mut t2 = start_recv(&["--relay", dst2.to_str().unwrap()]);
    let first = lying_first_hop();
    let (code, out, err) = send_chain(&[src.to_str().unwrap()], &first, &t2.ticket);
    assert_lie_caught(code, &out, &err, &t2.ticket);
    assert!(!dst2.join("a").exists(), "T2 was never contacted");
    let _ = t2.child.kill();
    let _ = t2.child.wait();
}

#[test]
fn a_first_hop_cannot_claim_a_later_stream_replica_complete() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src.bin");
    std::fs::write(&src, vec![7u8; 100_000]).unwrap();
    let out2 = tmp.path().join("out2");
    let mut t2 = start_recv(&["--relay", "--stream", out2.to_str().unwrap()]);
    let first = lying_first_hop();
    let cmd = format!("cat {}", src.display());
    let (code, out, err) = send_chain(&["--from-command", &cmd], &first, &t2.ticket);
    assert_lie_caught(code, &out, &err, &t2.ticket);
    assert!(!out2.exists(), "T2 was never contacted");
    let _ = t2.child.kill();
    let _ = t2.child.wait();
}
