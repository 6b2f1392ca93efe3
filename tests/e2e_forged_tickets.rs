//! Well-formed tickets that lie: the right address with the wrong secret (exit 6), the
//! wrong certificate fingerprint (exit 6), or an address where nobody listens (exit 5).
//!
//! A ticket carries a checksum, so changing characters of its text only ever tests the
//! syntax check (exit 2, see `e2e_failures`). To reach the authentication itself these tests
//! decode a real ticket with the library's public `Ticket` type, change one field and encode
//! it again. They live in their own file so that a change of that API cannot stop the other
//! end-to-end tests from compiling.

mod support;

use std::path::Path;

use haul::transport::{Secret, Ticket};
use support::*;

fn forged(ticket: &str, change: impl FnOnce(&mut Ticket)) -> String {
    let mut t = Ticket::parse(ticket).expect("recv printed a ticket that does not parse");
    change(&mut t);
    let text = t.encode();
    assert_ne!(text, ticket, "the forged ticket equals the real one");
    text
}

/// Sends with the forged ticket (expecting `code`), checks the receiver is still waiting
/// and received nothing, then completes a correct transfer to it.
fn refused_then_served(change: impl FnOnce(&mut Ticket), code: i32) {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("payload.bin");
    write_random_file(&src, 3 * MIB + 5, 42);
    let dest = tmp.path().join("dest");
    let recv = recv(&dest, &[]);

    let bad = send(&[src.as_path()], &forged(&recv.ticket, change), &[]);
    bad.assert_code(code);
    assert!(
        !bad.stderr.trim().is_empty(),
        "refused send gave no reason\n{}",
        bad.describe()
    );
    assert!(
        !recv.proc.has_exited(),
        "recv exited after an unauthenticated connection; it must keep waiting"
    );
    assert_nothing_delivered(&dest);

    let good = send(&[src.as_path()], &recv.ticket, &[]);
    let received = recv.wait();
    assert_transfer_ok(&good, &received);
    assert_trees_equal(&src, &dest.join("payload.bin"));
    assert_no_part_files(&dest);
}

#[test]
fn wrong_secret_exits_6_and_the_receiver_still_serves() {
    refused_then_served(
        |t| {
            let mut bytes = *t.secret.as_bytes();
            bytes[7] ^= 0x5a;
            t.secret = Secret::from_bytes(bytes);
        },
        6,
    );
}

#[test]
fn wrong_certificate_fingerprint_exits_6_and_the_receiver_still_serves() {
    refused_then_served(|t| t.fingerprint[0] ^= 0x01, 6);
}

#[test]
fn wrong_secret_without_encryption_exits_6() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("f");
    std::fs::write(&src, b"x").unwrap();
    let dest = tmp.path().join("dest");
    let recv = recv(&dest, &[]);
    let ticket = forged(&recv.ticket, |t| {
        let mut bytes = *t.secret.as_bytes();
        bytes[0] ^= 1;
        t.secret = Secret::from_bytes(bytes);
    });
    send(&[src.as_path()], &ticket, &["--no-encrypt"]).assert_code(6);
    assert!(
        !recv.proc.has_exited(),
        "recv exited after a refused sender"
    );
    assert_nothing_delivered(&dest);
    let good = send(&[src.as_path()], &recv.ticket, &["--no-encrypt"]);
    let received = recv.wait();
    assert_transfer_ok(&good, &received);
    assert_trees_equal(&src, &dest.join("f"));
}

#[test]
fn nobody_listening_exits_5() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("f");
    std::fs::write(&src, b"x").unwrap();
    let dest = tmp.path().join("dest");
    let recv = recv(&dest, &[]);
    let port = free_port();
    let ticket = forged(&recv.ticket, |t| {
        t.addrs = vec![std::net::SocketAddr::from(([127, 0, 0, 1], port))];
    });
    let out = send(&[Path::new(&src)], &ticket, &[]);
    out.assert_code(5);
    assert!(
        !out.stderr.trim().is_empty(),
        "no reason given\n{}",
        out.describe()
    );
    recv.kill();
    assert_nothing_delivered(&dest);
}
