//! A sender holding the ticket that floods the receiver's per-file state (issue 37,
//! finding 4): batches far beyond the 2,000 entries an honest sender sends, or batches of
//! one-line file entries and never their data (20 × 100,000 took a receiver to 2,000,101
//! pending files, 829 MiB). The receiver now refuses a batch beyond the batch bounds and a
//! sender with more than 262,144 files waiting for data: exit 8, one line naming the limit.
//!
//! The fake sender is built from the library (`transport::connect`, `protocol::Control`),
//! like `hostile_data_flood`. Before the fix every batch was answered.

mod support;

use std::time::Duration;

use haul::protocol::{
    Control, Entry, EntryKind, SyncOptions, MAX_BATCH_ENTRIES, MAX_PENDING_FILES,
};
use haul::session::Channel;
use haul::transport::{connect, Role, Ticket};
use support::hostile;
use support::*;

/// A one-byte file entry (small, dense: the receiver prepares nothing on disk for it).
fn entry(id: u64) -> Entry {
    let kind = EntryKind::File {
        size: 1,
        data_bytes: 1,
    };
    hostile::entry(id, format!("f{id}").as_bytes(), kind)
}

/// A control connection that has sent Start.
fn started(ticket: &Ticket) -> Channel {
    let mut c = Channel::new(connect(ticket, Role::Control, true).expect("control connection"));
    c.write(&Control::Start {
        streams: 1,
        block_size: 1 << 20,
        options: SyncOptions::default(),
    })
    .expect("send Start");
    c
}

/// Sends `batch` and reads up to its `Need`; the Error instead, if the receiver refused.
fn request(c: &mut Channel, batch: Vec<Entry>) -> Result<(), String> {
    c.write(&Control::Entries(batch))
        .map_err(|e| format!("send: {e}"))?;
    // Bounded: an answer carries a few messages (Arrived, Need).
    for _ in 0..8 {
        match c.read(Some(Duration::from_secs(30))) {
            Ok(Control::Need(_)) => return Ok(()),
            Ok(Control::Error { message, .. }) => return Err(message),
            Ok(_) => {}
            Err(e) => return Err(format!("read: {e}")),
        }
    }
    Err("no Need".into())
}

#[test]
fn a_batch_beyond_the_batch_bound_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let recv = recv(&tmp.path().join("dest"), &["-q"]);
    let ticket = Ticket::parse(&recv.ticket).expect("recv printed a bad ticket");
    let mut c = started(&ticket);
    let big: Vec<Entry> = (0..=MAX_BATCH_ENTRIES as u64).map(entry).collect();
    let answer = request(&mut c, big);
    let out = recv.wait();
    assert!(answer.is_err(), "a batch of 2,001 was answered");
    out.assert_code(8);
    assert!(
        out.stderr
            .contains("2001 entries in one manifest batch, more than the 2000 allowed"),
        "{}",
        out.describe()
    );
}

#[test]
fn a_sender_that_never_sends_data_is_refused_at_the_pending_bound() {
    let tmp = tempfile::tempdir().unwrap();
    let recv = recv(&tmp.path().join("dest"), &["-q"]);
    let ticket = Ticket::parse(&recv.ticket).expect("recv printed a bad ticket");
    let mut c = started(&ticket);
    let per = MAX_BATCH_ENTRIES as u64;
    // Bounded: twice the batches the bound takes.
    let most = 2 * MAX_PENDING_FILES as u64 / per;
    let mut refused = None;
    for b in 0..most {
        if let Err(e) = request(&mut c, (b * per..(b + 1) * per).map(entry).collect()) {
            refused = Some((b, e));
            break;
        }
    }
    let out = recv.wait();
    let Some((b, why)) = refused else {
        panic!(
            "{} entries without data were all answered\n{}",
            most * per,
            out.describe()
        );
    };
    // Refused with the batch that took it past the bound, not before.
    assert_eq!(b, MAX_PENDING_FILES as u64 / per, "{why}");
    out.assert_code(8);
    assert!(
        out.stderr
            .contains("files that still wait for their data, more than the 262144 allowed"),
        "{}",
        out.describe()
    );
}
