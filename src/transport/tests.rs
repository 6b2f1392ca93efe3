//! End-to-end tests of the transport over real loopback sockets: a listener with its accept
//! loop against `connect`, plus hostile peers written by hand.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;

use super::*;

const WAIT: Duration = Duration::from_secs(10);

fn start() -> (Ticket, AcceptorHandle, Receiver<Accepted>) {
    start_with(Duration::from_secs(10))
}

fn start_with(timeout: Duration) -> (Ticket, AcceptorHandle, Receiver<Accepted>) {
    let mut l = Listener::bind(Some("127.0.0.1:0".parse().unwrap())).unwrap();
    l.handshake_timeout = timeout;
    let ticket = l.ticket();
    let (h, rx) = l.spawn_acceptor();
    (ticket, h, rx)
}

fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let end = Instant::now() + WAIT;
    while !f() {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        thread::sleep(Duration::from_millis(10));
    }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    let mut v = vec![0u8; len];
    blake3::Hasher::new()
        .update(&[seed])
        .finalize_xof()
        .fill(&mut v);
    v
}

/// Connects, checks what the listener got, and moves bytes both ways with clean ends.
fn round_trip(encrypt: bool) {
    let (ticket, _h, rx) = start();
    let mut dialer = connect(&ticket, Role::Data, encrypt).unwrap();
    let acc = rx.recv_timeout(WAIT).unwrap();
    assert_eq!(acc.role, Role::Data);
    assert_eq!(acc.encrypted, encrypt);
    assert_eq!(dialer.is_encrypted(), encrypt);
    if let super::conn::Io::Tls(s) = dialer.io() {
        let suite = s.suite().map(|s| s.suite());
        assert_eq!(suite, Some(rustls::CipherSuite::TLS13_AES_128_GCM_SHA256));
    }
    assert_eq!(dialer.link_key(), acc.conn.link_key());
    assert!(dialer.is_dialer() && !acc.conn.is_dialer());
    let mut listener_side = acc.conn;
    assert_eq!(listener_side.peer_addr(), Some(acc.peer));
    assert_eq!(listener_side.is_encrypted(), encrypt);

    // A MiB-sized write each way, concurrently, then shutdown and read to the end.
    let up = pattern(3 << 20, 1);
    let down = pattern(1 << 20, 2);
    let (up2, down2) = (up.clone(), down.clone());
    let t = thread::spawn(move || {
        let mut got = Vec::new();
        listener_side.write_all(&down2).unwrap();
        listener_side.shutdown_write().unwrap();
        listener_side.read_to_end(&mut got).unwrap();
        assert!(got == up2, "listener received corrupted bytes");
    });
    dialer.write_all(&up).unwrap();
    dialer.flush().unwrap();
    dialer.shutdown_write().unwrap();
    let mut got = Vec::new();
    dialer.read_to_end(&mut got).unwrap();
    assert!(got == down, "dialer received corrupted bytes");
    t.join().unwrap();
}

#[test]
fn tls_connect_accept_and_bytes_both_ways() {
    round_trip(true);
}

#[test]
fn plain_connect_accept_and_bytes_both_ways() {
    round_trip(false);
}

#[test]
fn control_role_and_second_connection_via_connect_addr() {
    let (ticket, _h, rx) = start();
    let c = connect(&ticket, Role::Control, true).unwrap();
    assert_eq!(rx.recv_timeout(WAIT).unwrap().role, Role::Control);
    let addr = c.peer_addr().unwrap();
    let _d = connect_addr(addr, &ticket, Role::Data, true).unwrap();
    assert_eq!(rx.recv_timeout(WAIT).unwrap().role, Role::Data);
}

#[test]
fn wrong_secret_is_rejected_and_listener_keeps_accepting() {
    let (ticket, h, rx) = start();
    for encrypt in [true, false] {
        let mut bad = ticket.clone();
        bad.secret = Secret::random();
        let before = h.rejected();
        let err = connect(&bad, Role::Data, encrypt).unwrap_err();
        assert!(
            matches!(
                err,
                TransportError::PeerUnauthenticated
                    | TransportError::AuthRejected
                    | TransportError::Tls(_)
            ),
            "{err:?}"
        );
        assert_eq!(err.exit_code(), 6);
        wait_until("the rejection", || h.rejected() > before);
        let _ok = connect(&ticket, Role::Data, encrypt).unwrap();
        assert!(rx.recv_timeout(WAIT).is_ok());
    }
}

#[test]
fn forged_client_proof_gets_rejected_verdict() {
    let (ticket, h, _rx) = start();
    let mut s = TcpStream::connect(ticket.addrs[0]).unwrap();
    s.set_read_timeout(Some(WAIT)).unwrap();
    let mut hello = hello_bytes(1);
    hello.extend_from_slice(&[3; 32]);
    s.write_all(&hello).unwrap();
    let mut reply = [0u8; 71];
    s.read_exact(&mut reply).unwrap();
    assert_eq!(&reply[..7], hello_bytes(0));
    s.write_all(&[0u8; 32]).unwrap();
    let mut verdict = Vec::new();
    s.read_to_end(&mut verdict).unwrap();
    assert_eq!(verdict, [1]);
    wait_until("the rejection", || h.rejected() == 1);
}

#[test]
fn wrong_fingerprint_is_a_tls_error() {
    let (mut ticket, _h, _rx) = start();
    ticket.fingerprint[0] ^= 1;
    let err = connect(&ticket, Role::Control, true).unwrap_err();
    match &err {
        TransportError::Tls(m) => assert!(m.contains("does not match the ticket"), "{m}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(err.exit_code(), 6);
}

#[test]
fn garbage_does_not_stop_a_later_valid_connection() {
    let (ticket, h, rx) = start();
    let mut junk = vec![pattern(64 * 1024, 3), pattern(64 * 1024, 4)];
    junk[1][0] = 0x16; // looks like TLS, isn't
    junk.push(b"GET / HTTP/1.1\r\n\r\n".to_vec());
    junk.push(b"HAUL".to_vec()); // then closes mid-hello
    let n = junk.len() as u64;
    for bytes in junk {
        let mut s = TcpStream::connect(ticket.addrs[0]).unwrap();
        // The listener may close while we write: that is the point.
        let _ = s.write_all(&bytes);
        let _ = s.shutdown(std::net::Shutdown::Write);
    }
    wait_until("every rejection", || h.rejected() >= n);
    for encrypt in [true, false] {
        let _ok = connect(&ticket, Role::Data, encrypt).unwrap();
        assert!(rx.recv_timeout(WAIT).is_ok());
    }
}

#[test]
fn silent_connection_is_dropped_after_the_deadline_without_blocking_others() {
    let (ticket, h, rx) = start_with(Duration::from_millis(300));
    let mut idle = TcpStream::connect(ticket.addrs[0]).unwrap();
    idle.set_read_timeout(Some(WAIT)).unwrap();
    // Meanwhile a real connection goes through at once.
    let _ok = connect(&ticket, Role::Data, true).unwrap();
    assert!(rx.recv_timeout(WAIT).is_ok());
    assert_eq!(h.rejected(), 0);
    // The idle one is closed by the listener (EOF or reset), not by our own timeout.
    let started = Instant::now();
    let r = idle.read(&mut [0u8; 1]);
    assert!(
        matches!(r, Ok(0)) || r.is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionReset)
    );
    assert!(started.elapsed() < WAIT);
    wait_until("the rejection", || h.rejected() == 1);
}

#[test]
fn version_mismatch_is_peer_incompatible() {
    // Our dialer against a listener of the next version (whatever ours is).
    let other = PROTOCOL_VERSION + 1;
    let hello_of = move |role: u8| [&b"HAUL"[..], &other.to_le_bytes(), &[role]].concat();
    let fake = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = fake.local_addr().unwrap();
    let server = thread::spawn(move || {
        let (mut s, _) = fake.accept().unwrap();
        let mut hello = [0u8; 39];
        s.read_exact(&mut hello).unwrap();
        s.write_all(&hello_of(1)).unwrap();
        let _ = s.read(&mut [0u8; 1]);
    });
    let ticket = Ticket {
        addrs: vec![addr],
        fingerprint: [0; 32],
        secret: Secret::random(),
    };
    let err = connect(&ticket, Role::Data, false).unwrap_err();
    assert!(matches!(
        err,
        TransportError::PeerIncompatible {
            ours: PROTOCOL_VERSION,
            theirs
        } if theirs == other
    ));
    assert_eq!(err.exit_code(), 7);
    server.join().unwrap();

    // A dialer of another version against our listener gets our version back.
    let (ticket, h, _rx) = start();
    let mut s = TcpStream::connect(ticket.addrs[0]).unwrap();
    s.set_read_timeout(Some(WAIT)).unwrap();
    s.write_all(&hello_of(0)).unwrap();
    let mut reply = [0u8; 7];
    s.read_exact(&mut reply).unwrap();
    assert_eq!(&reply[..], hello_bytes(1));
    drop(s);
    wait_until("the rejection", || h.rejected() == 1);
}

#[test]
fn dialer_tries_the_next_address_and_reports_unreachable_ones() {
    let closed = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let (mut ticket, _h, rx) = start();
    ticket.addrs.insert(0, closed);
    let _ok = connect(&ticket, Role::Data, true).unwrap();
    assert!(rx.recv_timeout(WAIT).is_ok());

    ticket.addrs = vec![closed];
    let err = connect(&ticket, Role::Data, true).unwrap_err();
    assert!(matches!(err, TransportError::Connect { .. }), "{err:?}");
    assert!(err.to_string().contains(&closed.to_string()));
    assert_eq!(err.exit_code(), 5);
    ticket.addrs.clear();
    assert_eq!(
        connect(&ticket, Role::Data, true).unwrap_err().exit_code(),
        2
    );
}

fn refused(addr: SocketAddr) -> bool {
    TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_err()
}

#[test]
fn dropping_the_handle_stops_the_loop() {
    let (ticket, h, _rx) = start();
    let started = Instant::now();
    drop(h);
    assert!(started.elapsed() < Duration::from_secs(2));
    assert!(refused(ticket.addrs[0]));
}

#[test]
fn dropping_the_receiver_stops_the_loop() {
    let (ticket, h, rx) = start();
    drop(rx);
    // The loop learns of it when it next hands over a connection.
    let _c = connect(&ticket, Role::Data, true).unwrap();
    wait_until("the listening socket to close", || refused(ticket.addrs[0]));
    h.stop();
}

#[test]
fn wildcard_listener_is_reachable_through_its_ticket() {
    let l = Listener::bind(None).unwrap();
    let ticket = Ticket::parse(&l.ticket().encode()).unwrap();
    let (_h, rx) = l.spawn_acceptor();
    let loopback: Vec<SocketAddr> = ticket
        .addrs
        .iter()
        .copied()
        .filter(|a| a.ip().is_loopback())
        .collect();
    let t = Ticket {
        addrs: loopback,
        ..ticket
    };
    let _c = connect(&t, Role::Control, true).unwrap();
    assert_eq!(rx.recv_timeout(WAIT).unwrap().role, Role::Control);
}

#[test]
fn exit_codes_follow_the_documented_classes() {
    let io = || std::io::Error::other("x");
    let cases = [
        (TransportError::BadTicket("x".into()), 2),
        (
            TransportError::Connect {
                addrs: "a".into(),
                source: io(),
            },
            5,
        ),
        (TransportError::Io(io()), 5),
        (TransportError::Tls("x".into()), 6),
        (TransportError::AuthRejected, 6),
        (TransportError::PeerUnauthenticated, 6),
        (TransportError::PeerIncompatible { ours: 1, theirs: 2 }, 7),
        (TransportError::Handshake("x".into()), 8),
    ];
    for (e, code) in cases {
        assert_eq!(e.exit_code(), code, "{e}");
    }
    assert!(TransportError::BadTicket("x".into())
        .to_string()
        .contains("copy the whole line"));
}

/// The first bytes of a hello in this version: magic, version (LE), then `last`.
fn hello_bytes(last: u8) -> Vec<u8> {
    let mut v = b"HAUL".to_vec();
    v.extend_from_slice(&PROTOCOL_VERSION.to_le_bytes());
    v.push(last);
    v
}

#[test]
fn a_lost_connection_is_said_once() {
    // Before: a relay passing a lost connection on as text printed "connection to peer
    // lost: connection to peer lost: Broken pipe".
    let inner = TransportError::Io(io::Error::from(io::ErrorKind::BrokenPipe));
    let outer = TransportError::Io(io::Error::other(inner.to_string()));
    assert_eq!(
        outer.to_string(),
        format!(
            "connection to peer lost: {}",
            io::Error::from(io::ErrorKind::BrokenPipe)
        )
    );
}
