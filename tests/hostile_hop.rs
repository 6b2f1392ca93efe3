//! Hostile peers of a chain fan-out, built from the library's own protocol and transport
//! types, against real `haul` processes.
//!
//! A ticket holder who names hops of its own choosing must not make a plain `haul recv`
//! dial them (before `--relay`, a forged hop ticket made the receiver dial any address and
//! report back whether it was open).

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use haul::protocol::{Chain, Control, Hop, SyncOptions};
use haul::session::Channel;
use haul::transport::{connect, Role, Secret, Ticket};

struct Recv {
    child: Child,
    ticket: Ticket,
}

/// `haul recv ARGS --listen 127.0.0.1:0 -q`, its ticket read.
fn start_recv(args: &[&str]) -> Recv {
    let mut child = Command::new(env!("CARGO_BIN_EXE_haul"))
        .arg("recv")
        .args(args)
        .args(["--listen", "127.0.0.1:0", "-q"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn haul recv");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("read ticket");
    let ticket = Ticket::parse(line.trim()).expect("valid ticket");
    Recv { child, ticket }
}

/// Waits (bounded) for a process to exit; its exit code and stderr.
fn wait(child: &mut Child, what: &str) -> (i32, String) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            let mut err = String::new();
            if let Some(mut e) = child.stderr.take() {
                let _ = std::io::Read::read_to_string(&mut e, &mut err);
            }
            return (status.code().unwrap_or(-1), err);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            let mut err = String::new();
            if let Some(mut e) = child.stderr.take() {
                let _ = std::io::Read::read_to_string(&mut e, &mut err);
            }
            panic!("{what} did not exit; its stderr:\n{err}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
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

fn assert_refused(recv: &mut Recv, answer: Option<(i32, String)>, seen: &AtomicUsize) {
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
