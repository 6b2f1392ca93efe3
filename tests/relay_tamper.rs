//! An on-path relay edits a `--no-encrypt` transfer after the handshake: it sets `delete`
//! in the sender's Start, or swaps the offsets of a file's two data units. The receiver
//! must not act on either: the edited frame fails verification, its connection is dropped
//! and re-dialed, and the transfer completes with what the sender really sent. Before
//! frames were authenticated, both edits went through while both ends exited 0: a file in
//! DIR was deleted, or a file arrived with its halves swapped.

mod support;

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::thread;

use haul::protocol::{Control, SyncOptions};
use haul::transport::Ticket;
use support::{recv, write_random_file, Haul};

/// Byte edits a relay makes: each replaces the first occurrence of `find` (within one read
/// from the client, on any connection) with `put`, once.
type Edits = Arc<Mutex<Vec<(Vec<u8>, Vec<u8>, bool)>>>;

/// Forwards every connection to `target`, applying `edits` to what the client sends.
fn relay(target: SocketAddr, edits: Edits) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    thread::spawn(move || {
        for client in listener.incoming() {
            let Ok(client) = client else { continue };
            let Ok(server) = TcpStream::connect(target) else {
                continue;
            };
            let edits = Arc::clone(&edits);
            let (c2, s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
            thread::spawn(move || copy(s2, c2, None));
            thread::spawn(move || copy(client, server, Some(&edits)));
        }
    });
    addr
}

/// Applies every pending edit whose pattern is in `chunk` (as it came: one edit's result
/// is not another's input).
fn edit(chunk: &mut [u8], edits: &Edits) {
    let mut edits = edits.lock().unwrap();
    let found: Vec<(usize, Option<usize>)> = edits
        .iter()
        .enumerate()
        .map(|(i, (find, _, done))| {
            let at = (!done)
                .then(|| chunk.windows(find.len()).position(|w| w == &find[..]))
                .flatten();
            (i, at)
        })
        .collect();
    for (i, at) in found {
        if let Some(at) = at {
            let (_, put, done) = &mut edits[i];
            chunk[at..at + put.len()].copy_from_slice(put);
            *done = true;
        }
    }
}

fn done(edits: &Edits) -> usize {
    edits.lock().unwrap().iter().filter(|e| e.2).count()
}

fn copy(mut from: TcpStream, mut to: TcpStream, edits: Option<&Edits>) {
    let mut buf = vec![0u8; 64 << 10];
    while let Ok(n) = from.read(&mut buf) {
        if n == 0 {
            break;
        }
        if let Some(e) = edits {
            edit(&mut buf[..n], e);
        }
        if to.write_all(&buf[..n]).is_err() {
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
    let edits: Edits = Arc::new(Mutex::new(vec![(start(false), start(true), false)]));
    ticket.addrs = vec![relay(ticket.addrs[0], Arc::clone(&edits))];
    let sent = Haul::new().send(
        &[&src],
        &ticket.encode(),
        &["--no-encrypt", "--streams", "2", "--block-size", "64K"],
    );
    let received = r.wait();
    assert_eq!(done(&edits), 1, "the relay found no Start");
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

/// A data segment's `offset u64 | len u32`, as the unit header carries it.
fn segment(offset: u64, len: u32) -> Vec<u8> {
    [&offset.to_le_bytes()[..], &len.to_le_bytes()[..]].concat()
}

#[test]
fn relay_swapping_segment_offsets_is_refused_under_no_encrypt() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    write_random_file(&src.join("f"), 128 << 10, 3);
    let dest = tmp.path().join("dest");

    let r = recv(&dest, &["--listen", "127.0.0.1:0"]);
    let mut ticket = Ticket::parse(&r.ticket).expect("ticket");
    let half = 64 << 10;
    let edits: Edits = Arc::new(Mutex::new(vec![
        (segment(0, half as u32), segment(half, half as u32), false),
        (segment(half, half as u32), segment(0, half as u32), false),
    ]));
    ticket.addrs = vec![relay(ticket.addrs[0], Arc::clone(&edits))];
    let sent = Haul::new().send(
        &[&src],
        &ticket.encode(),
        &[
            "--no-encrypt",
            "--streams",
            "2",
            "--block-size",
            "64K",
            "--compress",
            "none",
        ],
    );
    let received = r.wait();
    assert_eq!(done(&edits), 2, "the relay did not find both segments");
    if let Ok(got) = std::fs::read(dest.join("src/f")) {
        assert!(
            got == std::fs::read(src.join("f")).unwrap(),
            "f arrived altered\n{}\n{}",
            sent.describe(),
            received.describe()
        );
    }
    // Each edit cost one data connection; the data is sent again after Finish.
    sent.assert_code(0);
    received.assert_code(0);
    assert!(dest.join("src/f").is_file());
    assert!(
        received.stderr.contains("failed verification"),
        "{}",
        received.describe()
    );
}
