//! Our record layer (`record`, run by [`TlsStream`] once established) against rustls's own
//! record layer on the other end: the same bytes, key updates and close_notify both ways,
//! for each TLS 1.3 suite the provider offers — so the records are TLS 1.3's, not a dialect.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use rustls::server::UnbufferedServerConnection;
use rustls::{ClientConnection, StreamOwned};

use super::*;
use crate::transport::tls;

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31) ^ seed)
        .collect()
}

/// Our server, established, and a rustls client (its own record layer) offering `suite`.
fn pair(
    suite: rustls::CipherSuite,
) -> (
    TlsStream<UnbufferedServerConnection>,
    StreamOwned<ClientConnection, TcpStream>,
) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let client_sock = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (server_sock, _) = l.accept().unwrap();
    let id = tls::server_identity().unwrap();
    let deadline = Some(Instant::now() + Duration::from_secs(10));
    let server = thread::spawn(move || {
        let conn = UnbufferedServerConnection::new(id.config).unwrap();
        let mut s = TlsStream::new(conn, server_sock, deadline);
        s.handshake().unwrap();
        s.established().unwrap();
        s
    });
    let config = tls::client_config_only(id.fingerprint, suite).unwrap();
    let conn = ClientConnection::new(config, tls::server_name().unwrap()).unwrap();
    let mut client = StreamOwned::new(conn, client_sock);
    // The client's first write runs its handshake.
    client.write_all(b"hi").unwrap();
    client.flush().unwrap();
    let mut server = server.join().unwrap();
    assert_eq!(server.suite().map(|s| s.suite()), Some(suite));
    let mut hi = [0u8; 2];
    server.read_exact(&mut hi).unwrap();
    assert_eq!(&hi, b"hi");
    (server, client)
}

#[test]
fn rustls_reads_our_records_and_we_read_its_with_key_updates_both_ways() {
    for suite in [
        rustls::CipherSuite::TLS13_AES_128_GCM_SHA256,
        rustls::CipherSuite::TLS13_AES_256_GCM_SHA384,
        rustls::CipherSuite::TLS13_CHACHA20_POLY1305_SHA256,
    ] {
        let (mut server, mut client) = pair(suite);
        let up = pattern(300_000, 1);
        let down = pattern(200_000, 2);

        // rustls → ours, with a key update of rustls's (asking for ours) in the middle.
        let (up2, down2) = (up.clone(), down.clone());
        let t = thread::spawn(move || {
            let mut got = vec![0u8; 2 * up2.len()];
            server.read_exact(&mut got).unwrap();
            assert!(got[..up2.len()] == up2[..] && got[up2.len()..] == up2[..]);
            // Ours → rustls: updates every 4 records, then one that asks rustls for its.
            server.records().unwrap().rekey_after(4);
            server.write_all(&down2).unwrap();
            server.refresh_keys().unwrap();
            // The second copy sealed in place (a head copied, the rest sealed where it
            // lies): rustls reads the same records.
            let (head, rest) = down2.split_at(7);
            server
                .write_in_place(head, &mut rest.to_vec(), None)
                .unwrap();
            server.flush().unwrap();
            server
        });
        client.write_all(&up).unwrap();
        client.conn.refresh_traffic_keys().unwrap();
        client.write_all(&up).unwrap();
        client.flush().unwrap();
        let mut got = vec![0u8; 2 * down.len()];
        client.read_exact(&mut got).unwrap();
        assert!(got[..down.len()] == down[..] && got[down.len()..] == down[..]);
        let mut server = t.join().unwrap();

        // rustls answered our request with a key update of its own: still readable.
        client.write_all(&up).unwrap();
        client.flush().unwrap();
        let mut got = vec![0u8; up.len()];
        server.read_exact(&mut got).unwrap();
        assert!(got == up, "{suite:?}");

        // close_notify both ways: a clean end on each side.
        server.shutdown_write().unwrap();
        let mut rest = Vec::new();
        client.read_to_end(&mut rest).unwrap();
        assert!(rest.is_empty());
        client.conn.send_close_notify();
        client.flush().unwrap();
        assert_eq!(server.read(&mut [0u8; 16]).unwrap(), 0, "{suite:?}");
    }
}
