//! Tests of the accept loop and the ticket's addresses (`listen.rs`).

use super::*;
use std::time::Duration;
use sys::IfAddr;

fn ifa(ip: &str, loopback: bool) -> IfAddr {
    IfAddr {
        ip: ip.parse().unwrap(),
        loopback,
    }
}

#[test]
fn advertised_orders_and_filters() {
    let found = [
        ifa("127.0.0.1", true),
        ifa("::1", true),
        ifa("2001:db8::5", false),
        ifa("fe80::1", false),
        ifa("10.0.0.5", false),
        ifa("10.0.0.5", false),
        ifa("192.168.1.9", false),
    ];
    let got = advertised(&found, true, true, 7000);
    let want: Vec<SocketAddr> = [
        "10.0.0.5:7000",
        "192.168.1.9:7000",
        "[2001:db8::5]:7000",
        "127.0.0.1:7000",
        "[::1]:7000",
    ]
    .iter()
    .map(|s| s.parse().unwrap())
    .collect();
    assert_eq!(got, want);
    let v4_only = advertised(&found, true, false, 7000);
    assert!(v4_only.iter().all(SocketAddr::is_ipv4));
    assert_eq!(v4_only.last().unwrap().to_string(), "127.0.0.1:7000");
    assert_eq!(advertised(&[], true, true, 1).len(), 2);
}

#[test]
fn advertised_is_capped_with_loopback_kept() {
    let found: Vec<IfAddr> = (0..100u8)
        .map(|i| IfAddr {
            ip: IpAddr::V4(Ipv4Addr::new(10, 1, 0, i)),
            loopback: false,
        })
        .collect();
    let got = advertised(&found, true, true, 9);
    assert_eq!(got.len(), MAX_TICKET_ADDRS);
    assert!(got[got.len() - 2].ip().is_loopback());
    assert!(got[got.len() - 1].ip().is_loopback());
}

#[test]
fn wildcard_ticket_lists_loopback_last() {
    let l = Listener::bind(None).unwrap();
    let t = l.ticket();
    assert!(l.local_addr().ip().is_unspecified());
    assert!(t.addrs.iter().all(|a| a.port() == l.local_addr().port()));
    assert!(t.addrs.last().unwrap().ip().is_loopback());
    let specific = Listener::bind(Some("127.0.0.1:0".parse().unwrap())).unwrap();
    assert_eq!(specific.ticket().addrs, vec![specific.local_addr()]);
}

/// Stopping the accept loop wakes it: it does not wait out its poll (made an hour here;
/// 100 ms in use, which every `haul recv` paid at its exit).
#[test]
fn stopping_the_accept_loop_does_not_wait_for_its_tick() {
    let mut l = Listener::bind(Some("127.0.0.1:0".parse().unwrap())).unwrap();
    l.tick = Duration::from_secs(3600);
    let (h, _rx) = l.spawn_acceptor();
    // Let the loop reach its poll (were it not there yet, the stop would be seen anyway).
    std::thread::sleep(Duration::from_millis(50));
    let (tx, rx) = crossbeam_channel::bounded(1);
    std::thread::spawn(move || {
        h.stop();
        let _ = tx.send(());
    });
    // A bound for a stuck loop, not a timing assertion.
    assert!(
        rx.recv_timeout(Duration::from_secs(60)).is_ok(),
        "stop() still waiting for the loop's poll after 60 s"
    );
}
