//! The sender's very first connection is retried like any later one: a listener busy with a
//! flood may drop it mid-handshake, and that must not end the transfer.
//!
//! A relay on 127.0.0.1 stands for such a listener: it drops the first connection after its
//! first bytes and passes every later one through to a real `haul recv`. The ticket is the
//! receiver's own with the relay's address, so certificate and secret still match. Before
//! the fix `haul send` gave up at once ("connection to peer lost: Connection reset", exit 5).

mod support;

use std::io::{self, Read};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::thread;

use haul::transport::Ticket;
use support::*;

/// Most connections the relay handles (a bounded loop; a transfer needs a dozen).
const RELAY_MAX: usize = 200;

/// Copies `from` to `to` until end of input, then closes `to` for writing.
fn pipe(mut from: TcpStream, mut to: TcpStream) {
    let _ = io::copy(&mut from, &mut to);
    let _ = to.shutdown(Shutdown::Write);
}

/// Starts the relay in front of `target`; returns its address.
fn relay(target: SocketAddr) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    thread::spawn(move || {
        for (n, conn) in l.incoming().take(RELAY_MAX).enumerate() {
            let Ok(mut client) = conn else { continue };
            if n == 0 {
                let mut first = [0u8; 1];
                let _ = client.read(&mut first);
                continue; // dropped: the dialer sees its connection closed mid-handshake
            }
            let Ok(server) = TcpStream::connect(target) else {
                continue;
            };
            let (c2, s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
            thread::spawn(move || pipe(client, server));
            thread::spawn(move || pipe(s2, c2));
        }
    });
    addr
}

#[test]
fn first_control_connection_dropped_mid_handshake_is_redialed() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("payload.bin");
    write_random_file(&src, 2 * MIB + 3, 7);
    let dest = tmp.path().join("dest");
    let recv = recv(&dest, &[]);
    let mut ticket = Ticket::parse(&recv.ticket).expect("recv printed a bad ticket");
    ticket.addrs = vec![relay(ticket.addrs[0])];

    let sent = send(&[src.as_path()], &ticket.encode(), &[]);
    // A sender that gave up leaves the receiver waiting: stop it.
    let received = if sent.code() == Some(0) {
        recv.wait()
    } else {
        recv.kill()
    };
    assert_transfer_ok(&sent, &received);
    assert_trees_equal(&src, &dest.join("payload.bin"));
}
