//! An authenticated sender that opens far more data connections than the `streams` it
//! declared in Start: each one the receiver keeps may grow a frame buffer to the largest
//! frame (before the fix 16 of them took a receiver from 5 MB to 1 GB), so the receiver
//! must close the surplus at once and keep the declared ones.
//!
//! The fake sender is built from the library (`transport::connect`, `protocol::Control`),
//! like `hostile_sender`. Before the fix no surplus connection was ever closed.

mod support;

use std::thread;
use std::time::Duration;

use haul::protocol::{Control, SyncOptions};
use haul::session::Channel;
use haul::transport::{connect, Conn, Role, Ticket};
use support::hostile::is_closed;
use support::*;

/// Data streams the fake sender declares.
const DECLARED: u16 = 2;
/// Data connections it opens beyond those.
const SURPLUS: usize = 30;
/// How many surplus connections the receiver may keep (its documented slack is smaller).
const TOLERATED: usize = 8;

fn send_msg(c: &mut Channel, m: &Control) {
    c.write(m).expect("send");
}

#[test]
fn data_connections_beyond_the_declared_streams_are_closed_at_once() {
    let tmp = tempfile::tempdir().unwrap();
    let dest = tmp.path().join("dest");
    let recv = recv(&dest, &["-q"]);
    let ticket = Ticket::parse(&recv.ticket).expect("recv printed a bad ticket");

    let mut control =
        Channel::new(connect(&ticket, Role::Control, true).expect("control connection"));
    send_msg(
        &mut control,
        &Control::Start {
            streams: DECLARED,
            block_size: 1 << 20,
            options: SyncOptions::default(),
        },
    );
    // An answer to an empty batch means Start was taken: the transfer runs.
    send_msg(&mut control, &Control::Entries(Vec::new()));
    let reply = control.read(Some(Duration::from_secs(20)));
    assert!(
        matches!(reply, Ok(Control::Need(_))),
        "no answer to Entries"
    );

    let open = |what: &str| connect(&ticket, Role::Data, true).expect(what);
    let mut declared: Vec<Conn> = (0..DECLARED).map(|_| open("declared stream")).collect();
    let mut surplus: Vec<Conn> = (0..SURPLUS).map(|_| open("surplus stream")).collect();
    for c in declared.iter().chain(&surplus) {
        c.set_read_timeout(Some(Duration::from_millis(10))).unwrap();
    }

    // Bounded: 50 rounds of a 10 ms look at each connection and a 100 ms pause.
    let mut closed = [false; SURPLUS];
    for _ in 0..50 {
        for (c, done) in surplus.iter_mut().zip(closed.iter_mut()) {
            *done = *done || is_closed(c);
        }
        if closed.iter().filter(|&&d| d).count() >= SURPLUS - TOLERATED {
            break;
        }
        thread::sleep(Duration::from_millis(100));
    }
    let n_closed = closed.iter().filter(|&&d| d).count();
    for c in &mut declared {
        assert!(!is_closed(c), "the receiver closed a declared data stream");
    }
    let out = recv.kill();
    assert!(
        n_closed >= SURPLUS - TOLERATED,
        "the receiver closed only {n_closed} of {SURPLUS} surplus data connections\n{}",
        out.describe()
    );
    let warnings = out.stderr.matches("closed a data connection").count();
    assert_eq!(warnings, 1, "expected one warning\n{}", out.describe());
}
