//! The relay's bookkeeping without sockets: what it acknowledges upstream, what it hands
//! its data streams (within the next hop's credit), what it sends again after a loss,
//! and how it takes up the hop after a failed one.

use std::sync::{Arc, Mutex};

use super::*;
use crate::codec::tree::block_cv;
use crate::protocol::Outcome;
use crate::transport::Secret;

const B: u64 = 64 << 10;

fn shared() -> Arc<Shared> {
    Shared::for_tests(B, 4)
}

fn hop(i: u8) -> Hop {
    Hop {
        label: format!("hop{i}"),
        ticket: String::new(),
    }
}

/// A relay with two hops after it, the first one dialed (no threads, no sockets).
fn relay() -> StreamRelay {
    let (work_tx, work_rx) = crossbeam_channel::unbounded();
    let r = StreamRelay {
        state: Mutex::new(State {
            succ: Successors::new(Chain {
                hops: vec![hop(2), hop(3)],
                encrypt: false,
                nonce: None,
            }),
            ..State::default()
        }),
        moved: Condvar::new(),
        work_tx,
        work_rx,
        stop: AtomicBool::new(false),
        encrypt: false,
        start: (2, B as u32, 16 * B),
    };
    r.dialed();
    r
}

impl StreamRelay {
    fn dialed(&self) {
        let mut st = self.lock();
        st.generation += 1;
        st.target = Some(Target {
            generation: st.generation,
            ticket: Ticket {
                addrs: vec![],
                fingerprint: [0; 32],
                secret: Secret::from_bytes([2; 32]),
            },
            key: [2; 32],
        });
        st.window = None;
    }

    /// Offsets handed to the data streams so far (taken).
    fn handed(&self) -> Vec<u64> {
        self.work_rx.try_iter().map(|b| b.offset / B).collect()
    }
}

fn push(r: &StreamRelay, s: &Arc<Shared>, blocks: std::ops::Range<u64>) {
    for i in blocks {
        let buf = vec![i as u8; B as usize];
        let cv = block_cv(i * B, &buf);
        let held = Held {
            range: 0..buf.len(),
            buf,
            cv,
            packed: None,
        };
        r.push(i * B, held, s);
    }
}

#[test]
fn upstream_hears_no_more_than_the_chain_after_it_has() {
    let (r, s) = (relay(), shared());
    // Before the next hop said anything: nothing is confirmed, our own window applies.
    assert_eq!(r.clamp(8 * B, 9 * B), (0, 0));
    assert_eq!(r.window(16 * B), 16 * B);
    push(&r, &s, 0..8);
    assert!(
        r.handed().is_empty(),
        "no credit before the next hop's first ack"
    );
    r.acked(true, 0, 0, 4 * B).unwrap();
    assert_eq!(r.handed(), vec![0, 1, 2, 3], "within written + window only");
    r.acked(false, 2 * B, 3 * B, 4 * B).unwrap();
    assert_eq!(r.handed(), vec![4, 5]);
    assert_eq!(r.clamp(8 * B, 8 * B), (2 * B, 3 * B));
    assert_eq!(r.clamp(B, B), (B, B), "nor more than this receiver has");
    assert_eq!(r.window(16 * B), 4 * B, "no wider than the next hop's");
    assert_eq!(r.lock().kept.len(), 5, "blocks 3..8 wait for the next hop");
}

#[test]
fn a_loss_sends_again_what_the_next_hop_lacks() {
    let (r, s) = (relay(), shared());
    push(&r, &s, 0..8);
    r.acked(true, 0, 0, 6 * B).unwrap();
    assert_eq!(r.handed().len(), 6);
    // It holds 0..2 and 3; 2, 4 and 5 went with a broken connection.
    r.resend(2 * B, &[3 * B]);
    assert_eq!(
        r.handed(),
        vec![2, 4, 5],
        "not what it has, nor what was never sent"
    );
}

#[test]
fn the_hop_after_a_failed_one_resumes_from_its_own_have() {
    let (r, s) = (relay(), shared());
    push(&r, &s, 0..8);
    r.acked(true, 0, 0, 4 * B).unwrap();
    r.acked(false, 2 * B, 2 * B, 4 * B).unwrap();
    let _ = r.handed();
    r.drop_hop(&Error::io("test", std::io::Error::other("gone")));
    assert_eq!(
        r.clamp(8 * B, 8 * B),
        (2 * B, 2 * B),
        "held while re-forming"
    );
    push(&r, &s, 8..9);
    assert!(r.handed().is_empty(), "nothing goes out without a hop");
    // The next one had more than the failed one reported: it gets the rest from there.
    r.dialed();
    r.acked(true, 3 * B, 3 * B, 4 * B).unwrap();
    assert_eq!(r.handed(), vec![3, 4, 5, 6]);
    assert_eq!(r.lock().succ.replicas().len(), 1);
    assert_eq!(
        r.lock().succ.front().map(|h| h.label.as_str()),
        Some("hop3")
    );
}

#[test]
fn a_hop_needing_what_is_no_longer_kept_fails_instead_of_getting_a_gap() {
    let (r, s) = (relay(), shared());
    push(&r, &s, 0..8);
    r.acked(true, 0, 0, 4 * B).unwrap();
    r.acked(false, 4 * B, 4 * B, 4 * B).unwrap();
    r.drop_hop(&Error::io("test", std::io::Error::other("gone")));
    r.dialed();
    assert!(r.acked(true, B, B, 4 * B).is_err());
}

#[test]
fn once_the_chain_is_done_only_this_receiver_counts() {
    let (r, s) = (relay(), shared());
    push(&r, &s, 0..2);
    r.close(Some(Summary::default()));
    assert!(r.finished());
    assert_eq!(r.clamp(5 * B, 6 * B), (5 * B, 6 * B));
    push(&r, &s, 2..3);
    assert!(r.lock().kept.is_empty());
    let reps = r.replicas();
    assert_eq!(reps.len(), 1);
    assert_eq!(reps[0].host, "hop2");
    assert!(matches!(reps[0].outcome, Outcome::Done(_)));
}
