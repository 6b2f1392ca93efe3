//! Pre-authentication denial of service: a flood of connections that never authenticate,
//! from the sender's own address, must neither keep a real `haul send` out nor fill the
//! receiver's stderr.
//!
//! Before the fix the listener ran at most 64 handshakes and closed every further
//! connection at once, so 70 silent sockets made `haul send` fail (exit 8) and each refusal
//! printed a line.

mod support;

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use haul::transport::Ticket;
use support::*;

/// Silent connections opened before the sender starts.
const SILENT: usize = 200;
/// Connections that dribble bytes that look like a start of a handshake.
const SLOW: usize = 16;
/// Most further silent connections the background flood opens while the sender runs.
const MORE_MAX: usize = 2000;

fn ticket_addr(ticket: &str) -> SocketAddr {
    let t = Ticket::parse(ticket).expect("recv printed a ticket that does not parse");
    t.addrs[0]
}

/// Opens a connection, or `None` when the listener's queue is full (it does not matter).
fn open(addr: SocketAddr) -> Option<TcpStream> {
    TcpStream::connect_timeout(&addr, Duration::from_secs(5)).ok()
}

/// A connection that sends `prefix` one byte at a time, a byte every 100 ms, then zeros,
/// until `stop` (or the listener closes it).
fn dribble(addr: SocketAddr, prefix: &'static [u8], stop: Arc<AtomicBool>) {
    let Some(mut s) = open(addr) else { return };
    let bytes = prefix.iter().copied().chain(std::iter::repeat(0u8));
    // Bounded: at most 3000 bytes (5 minutes), far beyond any handshake deadline.
    for b in bytes.take(3000) {
        if stop.load(Ordering::Relaxed) || s.write_all(&[b]).is_err() {
            return;
        }
        thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn flood_of_silent_and_slow_sockets_neither_stops_a_sender_nor_floods_the_log() {
    let tmp = tempfile::tempdir().unwrap();
    let src = build_tree(tmp.path(), "src", &TreeOptions::small());
    let dest = tmp.path().join("dest");
    let recv = recv(&dest, &[]);
    let addr = ticket_addr(&recv.ticket);
    let stop = Arc::new(AtomicBool::new(false));

    let mut slow = Vec::new();
    for i in 0..SLOW {
        let prefix: &'static [u8] = if i % 2 == 0 { b"\x16\x03\x01" } else { b"HAU" };
        let stop = stop.clone();
        slow.push(thread::spawn(move || dribble(addr, prefix, stop)));
    }
    let silent: Vec<TcpStream> = (0..SILENT).filter_map(|_| open(addr)).collect();
    assert!(silent.len() > 100, "could not open the silent connections");

    // Keep flooding while the sender works, so its re-dials meet the flood too.
    let more = {
        let stop = stop.clone();
        thread::spawn(move || {
            let mut kept = Vec::new();
            for _ in 0..MORE_MAX {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                kept.extend(open(addr));
                thread::sleep(Duration::from_millis(5));
            }
            kept.len()
        })
    };

    let sent = send(
        &[src.as_path()],
        &recv.ticket,
        &["--block-size", BLOCK_SIZE_ARG],
    );
    // A sender kept out leaves the receiver waiting for the real one: stop it.
    let received = if sent.code() == Some(0) {
        recv.wait()
    } else {
        recv.kill()
    };
    stop.store(true, Ordering::Relaxed);
    more.join().unwrap();
    for t in slow {
        t.join().unwrap();
    }
    drop(silent);

    assert_transfer_ok(&sent, &received);
    assert_trees_equal(&src, &dest.join("src"));
    assert_no_part_files(&dest);
    let lines = received
        .stderr
        .lines()
        .filter(|l| l.contains("rejected connection"))
        .count();
    // A few lines per 10 s and a count, not one line per connection.
    assert!(
        lines < SILENT / 4,
        "the receiver logged {lines} refused connections one by one\n{}",
        received.describe()
    );
}
