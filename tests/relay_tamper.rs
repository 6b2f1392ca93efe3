//! An on-path relay edits the control stream of a `--no-encrypt` transfer after the
//! handshake: it sets `delete` in the sender's Start. The receiver must not act on it: the
//! edited frame fails its MAC, the connection is dropped and re-dialed, and the transfer
//! runs with the options the sender really sent. Before frames were authenticated, the
//! receiver applied `--delete` and removed a file in DIR while both ends exited 0.

mod support;

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;

use haul::protocol::{Control, SyncOptions};
use haul::transport::Ticket;
use support::{recv, write_random_file, Haul};

/// Forwards every connection to `target`; in the first one it replaces the first
/// occurrence of `find` (within the first 4 KiB from the client) with `put`.
fn relay(target: SocketAddr, find: Vec<u8>, put: Vec<u8>) -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let edits = Arc::new(AtomicUsize::new(0));
    let edits2 = Arc::clone(&edits);
    thread::spawn(move || {
        for (n, client) in listener.incoming().enumerate() {
            let Ok(client) = client else { continue };
            let Ok(server) = TcpStream::connect(target) else {
                continue;
            };
            let (find, put, edits) = (find.clone(), put.clone(), Arc::clone(&edits2));
            thread::spawn(move || {
                let (c2, s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
                thread::spawn(move || copy(s2, c2));
                let mut from = client;
                let mut to = server;
                if n == 0 && edit_once(&mut from, &mut to, &find, &put) {
                    edits.fetch_add(1, Ordering::Relaxed);
                }
                copy(from, to);
            });
        }
    });
    (addr, edits)
}

/// Passes bytes on until `find` is seen within one read (a Start frame is written at
/// once) and replaced, or 4 KiB went by. True when it edited.
fn edit_once(from: &mut TcpStream, to: &mut TcpStream, find: &[u8], put: &[u8]) -> bool {
    let mut passed = 0usize;
    let mut buf = [0u8; 4096];
    while passed < 4096 {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => return false,
            Ok(n) => n,
        };
        let chunk = &mut buf[..n];
        let at = chunk.windows(find.len()).position(|w| w == find);
        if let Some(at) = at {
            chunk[at..at + put.len()].copy_from_slice(put);
        }
        if to.write_all(chunk).is_err() {
            return false;
        }
        if at.is_some() {
            return true;
        }
        passed += n;
    }
    false
}

fn copy(mut from: TcpStream, mut to: TcpStream) {
    let mut buf = vec![0u8; 64 << 10];
    while let Ok(n) = from.read(&mut buf) {
        if n == 0 || to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}

fn start(delete: bool) -> Vec<u8> {
    postcard::to_stdvec(&Control::Start {
        streams: 2,
        block_size: 64 << 10,
        options: SyncOptions {
            delete,
            ..SyncOptions::default()
        },
    })
    .unwrap()
}

#[test]
fn relay_setting_delete_in_start_is_refused_under_no_encrypt() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    write_random_file(&src.join("a"), 300_000, 1);
    write_random_file(&src.join("b"), 5_000, 2);
    let dest = tmp.path().join("dest");
    std::fs::create_dir_all(dest.join("src")).unwrap();
    std::fs::write(dest.join("src/precious"), b"not in the source").unwrap();
    std::fs::write(dest.join("precious"), b"not in the source").unwrap();

    let r = recv(&dest, &["--listen", "127.0.0.1:0"]);
    let mut ticket = Ticket::parse(&r.ticket).expect("ticket");
    let (addr, edits) = relay(ticket.addrs[0], start(false), start(true));
    ticket.addrs = vec![addr];
    let sent = Haul::new().send(
        &[&src],
        &ticket.encode(),
        &["--no-encrypt", "--streams", "2", "--block-size", "64K"],
    );
    let received = r.wait();
    assert_eq!(edits.load(Ordering::Relaxed), 1, "the relay found no Start");
    for p in ["src/precious", "precious"] {
        assert_eq!(
            std::fs::read(dest.join(p)).ok().as_deref(),
            Some(&b"not in the source"[..]),
            "{p} was deleted by a forged --delete\n{}\n{}",
            sent.describe(),
            received.describe()
        );
    }
    // The edit cost one control connection; the transfer itself completes.
    sent.assert_code(0);
    received.assert_code(0);
    assert!(
        received.stderr.contains("failed verification"),
        "{}",
        received.describe()
    );
    for f in ["a", "b"] {
        assert_eq!(
            std::fs::read(src.join(f)).unwrap(),
            std::fs::read(dest.join("src").join(f)).unwrap()
        );
    }
}
