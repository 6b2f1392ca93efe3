//! [`TlsStream`] over real loopback sockets: record sizes, records split across socket reads,
//! clean ends against cuts, garbage after the handshake, and random chunkings.
//!
//! Some tests put a relay between the two ends (`Relayed`): it forwards bytes both ways
//! during the handshake, then stops, so the test can hand the ciphertext over piece by piece
//! or replace it.

use std::io::{ErrorKind, IoSlice, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use proptest::prelude::*;
use rustls::client::UnbufferedClientConnection;
use rustls::server::UnbufferedServerConnection;

use super::*;
use crate::transport::tls;

type Client = TlsStream<UnbufferedClientConnection>;
type Server = TlsStream<UnbufferedServerConnection>;

const WAIT: Duration = Duration::from_secs(10);
/// TLS 1.3 record overhead with AES-GCM: header, content type, tag.
const OVERHEAD: usize = 5 + 1 + 16;
const RECORD: usize = 16 * 1024;

fn tcp_pair() -> (TcpStream, TcpStream) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (b, _) = l.accept().unwrap();
    a.set_nodelay(true).unwrap();
    b.set_nodelay(true).unwrap();
    (a, b)
}

/// Runs both handshakes, the client over `client_sock`, the server over `server_sock`.
fn handshake(client_sock: TcpStream, server_sock: TcpStream) -> (Client, Server) {
    let id = tls::server_identity().unwrap();
    let deadline = Some(Instant::now() + WAIT);
    let server = thread::spawn(move || {
        let conn = UnbufferedServerConnection::new(id.config).unwrap();
        let mut s = TlsStream::new(conn, server_sock, deadline);
        s.handshake().unwrap();
        s.established().unwrap();
        s
    });
    let config = tls::client_config(id.fingerprint).unwrap();
    let conn = UnbufferedClientConnection::new(config, tls::server_name().unwrap()).unwrap();
    let mut c = TlsStream::new(conn, client_sock, deadline);
    c.handshake().unwrap();
    c.established().unwrap();
    (c, server.join().unwrap())
}

fn direct() -> (Client, Server) {
    let (a, b) = tcp_pair();
    handshake(a, b)
}

/// Two ends whose bytes pass through the test: `client_far` is the socket the client's
/// ciphertext arrives at, `server_far` the one that delivers to the server.
struct Relayed {
    client: Client,
    server: Server,
    client_far: TcpStream,
    server_far: TcpStream,
}

fn relayed() -> Relayed {
    let (client_sock, client_far) = tcp_pair();
    let (server_sock, server_far) = tcp_pair();
    let stop = Arc::new(AtomicBool::new(false));
    let pump = |from: &TcpStream, to: &TcpStream| {
        let (mut from, mut to) = (from.try_clone().unwrap(), to.try_clone().unwrap());
        from.set_read_timeout(Some(Duration::from_millis(5)))
            .unwrap();
        let stop = stop.clone();
        thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while !stop.load(Ordering::Relaxed) {
                match from.read(&mut buf) {
                    Ok(0) => return,
                    Ok(n) => to.write_all(&buf[..n]).unwrap(),
                    Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                    Err(e) => panic!("relay: {e}"),
                }
            }
        })
    };
    let up = pump(&client_far, &server_far);
    let down = pump(&server_far, &client_far);
    let (client, server) = handshake(client_sock, server_sock);
    stop.store(true, Ordering::Relaxed);
    up.join().unwrap();
    down.join().unwrap();
    client_far.set_read_timeout(Some(WAIT)).unwrap();
    server_far.set_read_timeout(Some(WAIT)).unwrap();
    Relayed {
        client,
        server,
        client_far,
        server_far,
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

/// Reads exactly `len` ciphertext bytes from a relay socket.
fn ciphertext(from: &mut TcpStream, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    from.read_exact(&mut v).unwrap();
    v
}

fn would_block(r: std::io::Result<usize>) -> bool {
    matches!(r, Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut))
}

fn read_to_end(s: &mut impl Read) -> std::io::Result<Vec<u8>> {
    let mut got = Vec::new();
    s.read_to_end(&mut got).map(|_| got)
}

#[test]
fn small_and_large_writes_arrive_whole_with_small_and_large_reads() {
    let (mut c, mut s) = direct();
    let sizes = [
        1,
        2,
        RECORD - 1,
        RECORD,
        RECORD + 1,
        3 * RECORD + 7,
        5 << 20,
    ];
    let sent: Vec<Vec<u8>> = sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| pattern(n, i as u8))
        .collect();
    let all = sent.concat();
    let writer = thread::spawn(move || {
        for part in &sent {
            c.write_all(part).unwrap();
        }
        // One vectored write of several slices, one of them empty.
        let (x, y) = (pattern(100, 50), pattern(70_000, 51));
        let bufs = [IoSlice::new(&x), IoSlice::new(&[]), IoSlice::new(&y)];
        let n = c.write_vectored(&bufs).unwrap();
        assert_eq!(n, WRITE_CHUNK, "a vectored write takes one chunk");
        c.write_all(&y[n - 100..]).unwrap();
        c.shutdown_write().unwrap();
        c
    });
    // Reads of 1 byte (most of a record waits for the next read), then of odd sizes, then
    // large ones.
    let mut got = Vec::new();
    let mut one = [0u8; 1];
    for _ in 0..3 {
        assert_eq!(s.read(&mut one).unwrap(), 1);
        got.push(one[0]);
    }
    let mut odd = vec![0u8; 4099];
    for _ in 0..10 {
        let n = s.read(&mut odd).unwrap();
        got.extend_from_slice(&odd[..n]);
    }
    got.extend(read_to_end(&mut s).unwrap());
    let mut expected = all;
    expected.extend(pattern(100, 50));
    expected.extend(pattern(70_000, 51));
    assert!(got == expected, "bytes differ");
    // A clean end reads as 0 every time.
    assert_eq!(s.read(&mut one).unwrap(), 0);
    writer.join().unwrap();
}

#[test]
fn a_record_split_across_socket_reads_waits_for_its_rest() {
    let mut r = relayed();
    let data = pattern(RECORD + 1000, 7);
    r.client.write_all(&data).unwrap();
    let wire = ciphertext(&mut r.client_far, data.len() + 2 * OVERHEAD);
    r.server
        .tcp()
        .set_read_timeout(Some(Duration::from_millis(50)))
        .unwrap();
    let mut buf = vec![0u8; 64 * 1024];
    // A header cut in two, then most of the first record: nothing to read yet, and the
    // timed-out reads lose nothing.
    let first_end = RECORD + OVERHEAD;
    for (from, to) in [(0, 3), (3, 5), (5, first_end - 1)] {
        r.server_far.write_all(&wire[from..to]).unwrap();
        assert!(
            would_block(r.server.read(&mut buf)),
            "read before byte {to}"
        );
    }
    // The first record's last byte and a piece of the second: exactly the first record.
    r.server_far
        .write_all(&wire[first_end - 1..first_end + 2])
        .unwrap();
    let n = loop {
        match r.server.read(&mut buf) {
            Ok(n) => break n,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) => panic!("{e}"),
        }
    };
    assert_eq!(&buf[..n], &data[..RECORD]);
    r.server_far.write_all(&wire[first_end + 2..]).unwrap();
    r.server.tcp().set_read_timeout(Some(WAIT)).unwrap();
    let n = r.server.read(&mut buf).unwrap();
    assert_eq!(&buf[..n], &data[RECORD..]);
}

#[test]
fn close_notify_is_an_end_and_a_cut_is_an_error() {
    // Clean: the data, then close_notify, then 0.
    let mut r = relayed();
    r.client.write_all(b"last words").unwrap();
    r.client.shutdown_write().unwrap();
    let mut wire = Vec::new();
    r.client_far.read_to_end(&mut wire).unwrap();
    r.server_far.write_all(&wire).unwrap();
    r.server_far.shutdown(std::net::Shutdown::Write).unwrap();
    assert_eq!(read_to_end(&mut r.server).unwrap(), b"last words");

    // Cut: the same bytes without close_notify (the TCP connection just ends).
    let mut r = relayed();
    r.client.write_all(b"last words").unwrap();
    let wire = ciphertext(&mut r.client_far, 10 + OVERHEAD);
    r.server_far.write_all(&wire).unwrap();
    r.server_far.shutdown(std::net::Shutdown::Write).unwrap();
    let mut buf = [0u8; 64];
    assert_eq!(r.server.read(&mut buf).unwrap(), 10);
    let err = r.server.read(&mut buf).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::UnexpectedEof);
    assert!(err.to_string().contains("close_notify"), "{err}");

    // Cut inside a record: an error too, not a short read.
    let mut r = relayed();
    r.client.write_all(&pattern(5000, 1)).unwrap();
    let wire = ciphertext(&mut r.client_far, 5000 + OVERHEAD);
    r.server_far.write_all(&wire[..2000]).unwrap();
    r.server_far.shutdown(std::net::Shutdown::Write).unwrap();
    let err = r.server.read(&mut buf).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::UnexpectedEof);
}

#[test]
fn garbage_after_the_handshake_fails_the_read_and_alerts_the_peer() {
    // Small reads open records in the incoming buffer, large ones in the caller's.
    for size in [64, 64 * 1024] {
        garbage_after_the_handshake(size);
    }
}

fn garbage_after_the_handshake(size: usize) {
    let mut r = relayed();
    r.client.write_all(b"genuine").unwrap();
    let mut wire = ciphertext(&mut r.client_far, 7 + OVERHEAD);
    // A genuine record, then one with a flipped byte, then noise.
    r.client.write_all(b"forged").unwrap();
    let mut forged = ciphertext(&mut r.client_far, 6 + OVERHEAD);
    forged[8] ^= 1;
    wire.extend(forged);
    wire.extend(pattern(1000, 9));
    r.server_far.write_all(&wire).unwrap();
    let mut buf = vec![0u8; size];
    let n = r.server.read(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"genuine");
    let err = r.server.read(&mut buf).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidData);
    let tls = err
        .get_ref()
        .and_then(|e| e.downcast_ref::<rustls::Error>());
    assert_eq!(tls, Some(&rustls::Error::DecryptError), "{err}");
    // It stays failed, and writes fail too.
    assert_eq!(
        r.server.read(&mut buf).unwrap_err().kind(),
        ErrorKind::InvalidData
    );
    assert!(r.server.write(b"x").is_err());
    // A buffer given up to a failed stream is not sealed: it can go out elsewhere.
    let unit = pattern(100_000, 4);
    let mut buf2 = unit.clone();
    assert!(r.server.write_in_place(b"head", &mut buf2, None).is_err());
    assert!(buf2 == unit, "the buffer was changed");
    // The server told the client why (a fatal alert, encrypted): relay it.
    r.server.tcp().shutdown(std::net::Shutdown::Write).unwrap();
    let mut alert = Vec::new();
    r.server_far.read_to_end(&mut alert).unwrap();
    assert!(!alert.is_empty(), "no alert sent");
    r.client_far.write_all(&alert).unwrap();
    let err = r.client.read(&mut buf).unwrap_err();
    let tls = err
        .get_ref()
        .and_then(|e| e.downcast_ref::<rustls::Error>());
    assert_eq!(
        tls,
        Some(&rustls::Error::AlertReceived(
            rustls::AlertDescription::BadRecordMac
        ))
    );
}

#[test]
fn garbage_instead_of_a_handshake_fails_it() {
    let (mut dialer, listener_sock) = tcp_pair();
    let id = tls::server_identity().unwrap();
    let conn = UnbufferedServerConnection::new(id.config).unwrap();
    let mut s = TlsStream::new(conn, listener_sock, Some(Instant::now() + WAIT));
    // A record header announcing a handshake record, then noise.
    let mut junk = vec![0x16, 0x03, 0x01, 0x00, 0x40];
    junk.extend(pattern(64, 3));
    dialer.write_all(&junk).unwrap();
    let err = s.handshake().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidData, "{err}");
    // A huge record length is refused, not waited for.
    let (mut dialer, listener_sock) = tcp_pair();
    let conn = UnbufferedServerConnection::new(tls::server_identity().unwrap().config).unwrap();
    let mut s = TlsStream::new(conn, listener_sock, Some(Instant::now() + WAIT));
    dialer.write_all(&[0x16, 0x03, 0x01, 0xff, 0xff]).unwrap();
    dialer.write_all(&pattern(100, 4)).unwrap();
    assert_eq!(s.handshake().unwrap_err().kind(), ErrorKind::InvalidData);
}

#[test]
fn the_handshake_deadline_bounds_a_silent_peer() {
    let (_silent, listener_sock) = tcp_pair();
    let conn = UnbufferedServerConnection::new(tls::server_identity().unwrap().config).unwrap();
    let deadline = Instant::now() + Duration::from_millis(200);
    let mut s = TlsStream::new(conn, listener_sock, Some(deadline));
    let err = s.handshake().unwrap_err();
    assert!(
        matches!(err.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
        "{err}"
    );
}

#[test]
fn both_directions_carry_data_on_one_connection() {
    let (mut c, mut s) = direct();
    let up = pattern(300_000, 1);
    let down = pattern(200_000, 2);
    let (up2, down2) = (up.clone(), down.clone());
    let t = thread::spawn(move || {
        let mut got = vec![0u8; up2.len()];
        s.read_exact(&mut got).unwrap();
        assert!(got == up2);
        s.write_all(&down2).unwrap();
        s.shutdown_write().unwrap();
        assert_eq!(read_to_end(&mut s).unwrap(), b"bye");
    });
    c.write_all(&up).unwrap();
    let mut got = vec![0u8; down.len()];
    c.read_exact(&mut got).unwrap();
    assert!(got == down);
    assert_eq!(c.read(&mut [0u8; 8]).unwrap(), 0);
    // Writing after the peer's close_notify still works.
    c.write_all(b"bye").unwrap();
    c.shutdown_write().unwrap();
    t.join().unwrap();
}

#[test]
fn key_updates_mid_stream_are_carried_both_ways() {
    let (mut c, mut s) = direct();
    let before = pattern(100_000, 1);
    let after = pattern(100_000, 2);
    c.write_all(&before).unwrap();
    c.refresh_keys().unwrap();
    c.write_all(&after).unwrap();
    let mut got = vec![0u8; 200_000];
    s.read_exact(&mut got).unwrap();
    assert!(got[..100_000] == before[..] && got[100_000..] == after[..]);
    // The client asked for the server's keys to change too: its next write answers.
    s.refresh_keys().unwrap();
    s.write_all(&before).unwrap();
    s.shutdown_write().unwrap();
    assert!(read_to_end(&mut c).unwrap() == before);
    c.write_all(&after).unwrap();
    c.shutdown_write().unwrap();
    assert!(read_to_end(&mut s).unwrap() == after);
}

#[test]
fn a_gated_write_in_place_goes_in_paid_pieces() {
    let (mut c, mut s) = direct();
    let data = pattern(1 << 20, 3);
    let sent = data.clone();
    let writer = thread::spawn(move || {
        let pieces = std::sync::Mutex::new(Vec::new());
        let pay = |n| pieces.lock().unwrap().push(n);
        let gate = crate::transport::Gate::new(64 << 10, &pay);
        let mut body = sent[5..].to_vec();
        c.write_in_place(&sent[..5], &mut body, Some(&gate))
            .unwrap();
        c.shutdown_write().unwrap();
        pieces.into_inner().unwrap()
    });
    assert!(read_to_end(&mut s).unwrap() == data);
    let pieces = writer.join().unwrap();
    // Every piece at most the slice, and together the wire bytes: the data and the
    // records' headers and tags (22 bytes per record of up to 16 KiB).
    assert!(pieces.iter().all(|&n| n > 0 && n <= 64 << 10), "{pieces:?}");
    let paid: usize = pieces.iter().sum();
    assert!((1 << 20..(1 << 20) + 4096).contains(&paid), "{paid}");
    assert!(pieces.len() >= 16, "{}", pieces.len());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Whatever the sizes of writes and reads, the bytes arrive in order, whole, and the
    /// stream then ends cleanly.
    #[test]
    fn random_chunkings_round_trip(
        writes in prop::collection::vec(0usize..70_000, 1..12),
        reads in prop::collection::vec(1usize..300_000, 1..12),
        seed in any::<u8>(),
    ) {
        let (mut c, mut s) = direct();
        let data = pattern(writes.iter().sum(), seed);
        let sent = data.clone();
        let writer = thread::spawn(move || {
            let mut at = 0;
            for w in writes {
                // Odd sizes go sealed in place (large ones; small ones are copied).
                if w % 2 == 1 {
                    let h = w.min(5);
                    let mut rest = sent[at + h..at + w].to_vec();
                    c.write_in_place(&sent[at..at + h], &mut rest, None).unwrap();
                } else {
                    c.write_all(&sent[at..at + w]).unwrap();
                }
                at += w;
            }
            c.shutdown_write().unwrap();
        });
        let mut got = Vec::new();
        let mut buf = vec![0u8; 300_000];
        for i in 0.. {
            let want = reads[i % reads.len()];
            let n = s.read(&mut buf[..want]).unwrap();
            if n == 0 {
                break;
            }
            prop_assert!(n <= want);
            got.extend_from_slice(&buf[..n]);
        }
        writer.join().unwrap();
        prop_assert!(got == data, "bytes differ");
    }
}
