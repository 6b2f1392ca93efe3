//! An authenticated sender that opens data connections before its Start (issue 37,
//! finding 3): the receiver kept every one until a Start said how many streams there are
//! (3,000 TLS connections: 970 MiB), and a control connection that never sent its Start
//! left every later connection waiting in an unbounded queue. Now at most 68 are kept
//! before Start (the most a Start may declare, 64, and the slack of 4), at most 68 more
//! wait to be taken, and the rest are closed at once; after Start(streams=2) the kept
//! ones beyond 2 + 4 are closed too.
//!
//! The fake sender is built from the library (`transport::connect`, `protocol::Control`),
//! like `hostile_data_flood`. Before the fix no early connection was closed.

mod support;

use std::thread;
use std::time::Duration;

use haul::protocol::{Control, SyncOptions};
use haul::session::Channel;
use haul::transport::{connect, Conn, Role, Ticket};
use support::hostile::is_closed;
use support::*;

/// Data connections the fake sender opens before any Start.
const EARLY: usize = 150;
/// What the receiver may keep before Start (64 streams and 4 of slack), as the doc says.
const KEPT_BEFORE_START: usize = 68;
/// Data streams the fake sender declares at last.
const DECLARED: u16 = 2;
/// Connections a receiver may keep after Start: the declared streams and the slack.
const KEPT_AFTER_START: usize = DECLARED as usize + 4;

/// Opens `n` data connections (TLS, authenticated with the ticket).
fn open_data(ticket: &Ticket, n: usize) -> Vec<Conn> {
    (0..n)
        .map(|_| {
            let c = connect(ticket, Role::Data, true).expect("data connection");
            c.set_read_timeout(Some(Duration::from_millis(10))).unwrap();
            c
        })
        .collect()
}

/// Looks (bounded: 30 rounds of a 10 ms look at each and a 100 ms pause) until at least
/// `want` of `conns` are closed; how many are.
fn closed_at_least(conns: &mut [Conn], closed: &mut [bool], want: usize) -> usize {
    for _ in 0..30 {
        for (c, done) in conns.iter_mut().zip(closed.iter_mut()) {
            *done = *done || is_closed(c);
        }
        if closed.iter().filter(|&&d| d).count() >= want {
            break;
        }
        thread::sleep(Duration::from_millis(100));
    }
    closed.iter().filter(|&&d| d).count()
}

#[test]
fn data_connections_before_start_are_kept_only_up_to_the_most_a_start_may_declare() {
    let tmp = tempfile::tempdir().unwrap();
    let recv = recv(&tmp.path().join("dest"), &["-q"]);
    let ticket = Ticket::parse(&recv.ticket).expect("recv printed a bad ticket");

    let mut early = open_data(&ticket, EARLY);
    let mut closed = vec![false; EARLY];
    let n = closed_at_least(&mut early, &mut closed, EARLY - KEPT_BEFORE_START);
    if n < EARLY - KEPT_BEFORE_START {
        let out = recv.kill();
        panic!(
            "before Start the receiver closed only {n} of {EARLY} data connections (it may \
             keep {KEPT_BEFORE_START})\n{}",
            out.describe()
        );
    }

    // Start is still taken, and then only the declared streams and the slack stay.
    let mut control =
        Channel::new(connect(&ticket, Role::Control, true).expect("control connection"));
    let start = Control::Start {
        streams: DECLARED,
        block_size: 1 << 20,
        options: SyncOptions::default(),
    };
    control.write(&start).expect("send Start");
    control.write(&Control::Entries(Vec::new())).expect("send");
    let reply = control.read(Some(Duration::from_secs(20)));
    let n = closed_at_least(&mut early, &mut closed, EARLY - KEPT_AFTER_START);
    let out = recv.kill();
    assert!(
        matches!(reply, Ok(Control::Need(_))),
        "no answer to Entries: {reply:?}\n{}",
        out.describe()
    );
    assert!(
        n >= EARLY - KEPT_AFTER_START,
        "after Start(streams={DECLARED}) the receiver still kept {} data connections\n{}",
        EARLY - n,
        out.describe()
    );
    let warned = out.stderr.matches("came before the sender's Start").count();
    assert_eq!(warned, 1, "expected one warning\n{}", out.describe());
}

#[test]
fn a_control_connection_that_never_starts_queues_connections_only_up_to_a_bound() {
    let tmp = tempfile::tempdir().unwrap();
    let recv = recv(&tmp.path().join("dest"), &["-q"]);
    let ticket = Ticket::parse(&recv.ticket).expect("recv printed a bad ticket");

    // The receiver reads this one's Start, which never comes: nothing else is taken.
    let _silent = connect(&ticket, Role::Control, true).expect("control connection");
    let mut waiting = open_data(&ticket, EARLY);
    let mut closed = vec![false; EARLY];
    // At most 68 wait in the queue, and the receiver's own thread may hold one more.
    let want = EARLY - KEPT_BEFORE_START - 1;
    let n = closed_at_least(&mut waiting, &mut closed, want);
    let out = recv.kill();
    assert!(
        n >= want,
        "with its Start pending the receiver closed only {n} of {EARLY} later connections\n{}",
        out.describe()
    );
    assert!(
        out.stderr.contains("are already waiting"),
        "no warning\n{}",
        out.describe()
    );
}
