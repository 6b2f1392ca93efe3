//! Reconnect within one run: a TCP proxy between sender and receiver cuts every
//! connection after a few megabytes (the control connection after a few kilobytes); the
//! transfer must still complete in one run, identical, and say that it reconnected.

mod support;

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;

use haul::transport::Ticket;
use support::{assert_trees_equal, recv, write_random_file, Haul};

const MIB: u64 = 1 << 20;

/// Forwards connections to `target`, cutting connection number `n` after `limit(n)`
/// bytes from the client.
struct Proxy {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    cuts: Arc<AtomicUsize>,
}

impl Proxy {
    fn start(target: SocketAddr, limit: fn(usize) -> u64) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let cuts = Arc::new(AtomicUsize::new(0));
        let (stop2, cuts2) = (stop.clone(), cuts.clone());
        thread::spawn(move || {
            for (n, client) in listener.incoming().enumerate() {
                if stop2.load(Ordering::Relaxed) {
                    break;
                }
                let Ok(client) = client else { continue };
                let Ok(server) = TcpStream::connect(target) else {
                    continue;
                };
                let cuts = cuts2.clone();
                let max = limit(n);
                thread::spawn(move || pipe(client, server, max, &cuts));
            }
        });
        Proxy { addr, stop, cuts }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = TcpStream::connect(self.addr);
    }
}

/// Copies both ways; after `max` bytes from the client, cuts both sides.
fn pipe(client: TcpStream, server: TcpStream, max: u64, cuts: &AtomicUsize) {
    let (c2, s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
    let back = thread::spawn(move || {
        let (mut from, mut to) = (s2, c2);
        let mut buf = vec![0u8; 64 << 10];
        while let Ok(n) = from.read(&mut buf) {
            if n == 0 || to.write_all(&buf[..n]).is_err() {
                break;
            }
        }
        let _ = to.shutdown(Shutdown::Both);
    });
    let (mut from, mut to) = (client, server);
    let mut buf = vec![0u8; 64 << 10];
    let mut sent = 0u64;
    while let Ok(n) = from.read(&mut buf) {
        if n == 0 {
            let _ = to.shutdown(Shutdown::Write);
            break;
        }
        let n = n.min((max - sent) as usize);
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
        sent += n as u64;
        if sent >= max {
            cuts.fetch_add(1, Ordering::Relaxed);
            let _ = from.shutdown(Shutdown::Both);
            let _ = to.shutdown(Shutdown::Both);
            break;
        }
    }
    let _ = back.join();
}

#[test]
fn transfer_survives_connections_cut_every_few_megabytes() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    std::fs::create_dir_all(src.join("small")).unwrap();
    write_random_file(&src.join("big"), 40 * MIB, 1);
    write_random_file(&src.join("mid"), 9 * MIB + 7, 2);
    for i in 0..3000u64 {
        write_random_file(
            &src.join(format!("small/f{i}")),
            100 + (i * 37) % 9000,
            100 + i,
        );
    }
    let dest = tmp.path().join("dest");
    let r = recv(&dest, &["--json", "--listen", "127.0.0.1:0"]);
    let mut ticket = Ticket::parse(&r.ticket).expect("ticket");
    // The first connection is the control stream: cut it after 60 KB (mid-manifest);
    // data streams after 2 to 3 MB.
    let proxy = Proxy::start(ticket.addrs[0], |n| {
        if n == 0 {
            60 << 10
        } else {
            2 * MIB + (n as u64 * 131_071) % MIB
        }
    });
    ticket.addrs = vec![proxy.addr];
    let sent = Haul::new().send(
        &[&src],
        &ticket.encode(),
        &[
            "--streams",
            "3",
            "--block-size",
            "1M",
            "--json",
            "--retries",
            "8",
        ],
    );
    let received = r.wait();
    sent.assert_code(0);
    received.assert_code(0);
    assert_trees_equal(&src, &dest.join("src"));
    support::assert_no_part_files(&dest);
    let cuts = proxy.cuts.load(Ordering::Relaxed);
    assert!(cuts >= 10, "the proxy cut only {cuts} connections");
    assert!(sent.stderr.contains("reconnected"), "{}", sent.describe());
    let json = String::from_utf8_lossy(&sent.stdout);
    assert!(
        json.contains("\"reconnects\":") && !json.contains("\"reconnects\":0,"),
        "{json}"
    );
}
