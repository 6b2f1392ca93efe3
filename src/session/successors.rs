//! The receivers after one side of a chain fan-out, and what became of those it left
//! behind: the bookkeeping of "my successor is lost, take the next one" that the sender
//! (whose successor is the first receiver) and every relay (whose successor is the next
//! receiver) share, for trees and streams alike.
//!
//! The front of the list is the current successor (or the one being dialed). When it
//! fails it is reported (`replica … failed (…); the chain goes on without it`) and
//! recorded as a failed [`Replica`]; every hop it had itself reported on (its
//! [`Successors::heard`] report) is left behind as it reported it: one it had left
//! behind is out of step with the chain, and dialing it again could take it for complete
//! when it missed part of the transfer.
//!
//! Every `Done` this side only heard of (from its successor, of the hops after it) comes
//! with that hop's own proof (`protocol::vouch`); the sender, which alone can check it,
//! counts one without a valid proof as failed ([`Successors::settle`]).
//!
//! Not here: what a new successor must be told, or what it gets again (trees: the
//! manifest batch in progress; streams: blocks from its acknowledgement); that is the
//! caller's, through the `open` function of [`Successors::connect`].

use std::collections::VecDeque;

use crate::error::{Error, Result};
use crate::progress::escape;
use crate::protocol::{Chain, Hop, Outcome, Replica, Summary};
use crate::transport::Ticket;

/// The receivers after this side, nearest first, and what became of those that left.
#[derive(Debug, Default)]
pub struct Successors {
    /// The current successor first, then the rest of the chain.
    hops: VecDeque<Hop>,
    encrypt: bool,
    /// The sender's nonce for this run, passed down the chain.
    nonce: Option<[u8; 32]>,
    /// What became of the successors this side left behind (failed, or done).
    own: Vec<Replica>,
    /// Which of `own` this side saw done itself (the rest it heard of).
    seen_done: Option<usize>,
    /// The current successor's proof of its outcome (`Control::Proof`), for its `Done`.
    proof: Option<[u8; 32]>,
    /// The current successor's latest account of the receivers after it.
    below: Vec<Replica>,
    /// Whether `replicas` changed since `take_news` was last called.
    news: bool,
}

impl Successors {
    /// A relay's successors: the hops of `chain` (checked by the caller), none dialed yet.
    pub fn new(chain: Chain) -> Successors {
        Successors {
            hops: chain.hops.into(),
            encrypt: chain.encrypt,
            nonce: chain.nonce,
            ..Successors::default()
        }
    }

    /// The sender's successors: `first` (dialed by the sender's own means; its ticket is
    /// never used here), then the hops of `chain`.
    pub fn behind(first: Hop, chain: Chain) -> Successors {
        let mut s = Successors::new(chain);
        s.hops.push_front(first);
        s
    }

    /// Whether the hops use TLS between them.
    pub fn encrypt(&self) -> bool {
        self.encrypt
    }

    /// The current successor (or the next one to dial).
    pub fn front(&self) -> Option<&Hop> {
        self.hops.front()
    }

    /// Whether any receiver comes after the current successor (one to go on with if it
    /// fails).
    pub fn has_more(&self) -> bool {
        self.hops.len() > 1
    }

    /// The chain the current successor gets: the hops after it.
    pub fn rest(&self) -> Chain {
        Chain {
            hops: self.hops.iter().skip(1).cloned().collect(),
            encrypt: self.encrypt,
            nonce: self.nonce,
        }
    }

    /// Dials the current successor with `open` (its ticket and the chain after it), and
    /// while that fails, leaves it behind (reported) and dials the next; None when no
    /// receiver is left.
    pub fn connect<T>(
        &mut self,
        mut open: impl FnMut(&Ticket, Chain) -> Result<T>,
    ) -> Option<(T, Ticket)> {
        loop {
            let hop = self.hops.front()?;
            let r = Ticket::parse(&hop.ticket)
                .map_err(Error::from)
                .and_then(|t| open(&t, self.rest()).map(|c| (c, t)));
            match r {
                Ok(c) => return Some(c),
                Err(e) => self.fail(&e),
            }
        }
    }

    /// The current successor's account of the receivers after it (each account holds
    /// all it knows so far, so it replaces the one before).
    pub fn heard(&mut self, below: Vec<Replica>) {
        if below != self.below {
            self.below = below;
            self.news = true;
        }
    }

    /// The current successor's proof of its outcome (it comes right before its `Done`).
    pub fn proved(&mut self, proof: [u8; 32]) {
        self.proof = Some(proof);
    }

    /// The current successor failed with `e`: reports it and leaves it behind, with every
    /// receiver it had reported on (failed, or done).
    pub fn fail(&mut self, e: &Error) {
        self.proof = None;
        let Some(hop) = self.hops.pop_front() else {
            return;
        };
        crate::progress::warn(&format!(
            "replica {} failed ({e}); the chain goes on without it",
            escape(&hop.label)
        ));
        self.own.push(Replica {
            host: hop.label,
            outcome: Outcome::Failed {
                code: e.exit_code(),
                message: e.to_string(),
            },
            proof: None,
        });
        // What it said of those after it stands: a hop it left behind is out of step
        // (it may have missed part of the transfer), one it saw done is complete.
        for r in std::mem::take(&mut self.below) {
            if let Some(i) = self.hops.iter().position(|h| h.label == r.host) {
                self.hops.remove(i);
            }
            self.own.push(r);
        }
        self.news = true;
    }

    /// The current successor is complete (and said what became of those after it): no
    /// receiver is left to pass anything on to.
    pub fn done(&mut self, summary: Summary) {
        if let Some(hop) = self.hops.pop_front() {
            self.seen_done = Some(self.own.len());
            self.own.push(Replica {
                host: hop.label,
                outcome: Outcome::Done(summary),
                proof: self.proof.take(),
            });
        }
        self.own.append(&mut self.below);
        self.hops.clear();
        self.news = true;
    }

    /// Leaves every receiver behind without a word (this side failed: the chain re-forms
    /// around it, upstream).
    pub fn clear(&mut self) {
        self.hops.clear();
    }

    /// What became of every receiver after this side, as far as known: those left
    /// behind, then the current successor's account.
    pub fn replicas(&self) -> Vec<Replica> {
        self.own.iter().chain(&self.below).cloned().collect()
    }

    /// [`Successors::replicas`] as the sender reports them: every `Done` it heard of rather
    /// than saw (from a relay, of a hop after it) stands only when `proven` (its hop's
    /// proof holds); otherwise that replica failed (exit 8: the relay before it may have
    /// made it up).
    pub fn settle(&self, proven: impl Fn(&Replica) -> bool) -> Vec<Replica> {
        let mut out = self.replicas();
        for (i, r) in out.iter_mut().enumerate() {
            if Some(i) == self.seen_done || !matches!(r.outcome, Outcome::Done(_)) || proven(r) {
                continue;
            }
            r.outcome = Outcome::Failed {
                code: crate::error::exit::INTEGRITY,
                message: "the receiver before it said it was complete, without its proof \
                          (a relay that lies, or a receiver of another run)"
                    .into(),
            };
            r.proof = None;
        }
        out
    }

    /// Whether a receiver this side left behind is complete (it saw its `Done`, or heard
    /// of it from a successor that failed after it: see [`Successors::fail`]).
    pub fn any_done(&self) -> bool {
        self.own
            .iter()
            .any(|r| matches!(r.outcome, Outcome::Done(_)))
    }

    /// [`Successors::replicas`], if it changed since the last call.
    pub fn take_news(&mut self) -> Option<Vec<Replica>> {
        std::mem::take(&mut self.news).then(|| self.replicas())
    }
}

/// Refuses a chain that names the receiver whose block key is `own` among the hops after
/// it: it would dial itself as its own next hop, and wait on an answer it is to give.
pub fn check_not_self(chain: &Chain, own: &[u8; 32]) -> Result<()> {
    let me = chain
        .hops
        .iter()
        .find(|h| Ticket::parse(&h.ticket).is_ok_and(|t| t.secret.block_key() == *own));
    match me {
        Some(h) => Err(Error::Usage(format!(
            "the fan-out names this receiver ({}) again after itself; give each receiver once",
            escape(&h.label)
        ))),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hop(i: u8) -> Hop {
        Hop {
            label: format!("hop{i}"),
            ticket: format!("not a ticket {i}"),
        }
    }

    fn chain(ids: &[u8]) -> Chain {
        Chain {
            hops: ids.iter().map(|&i| hop(i)).collect(),
            encrypt: true,
            nonce: Some([5; 32]),
        }
    }

    fn gone() -> Error {
        crate::session::lost(std::io::Error::other("gone"))
    }

    fn failed(r: &Replica) -> bool {
        matches!(r.outcome, Outcome::Failed { .. })
    }

    #[test]
    fn the_sender_goes_on_with_the_hop_after_its_first() {
        let mut s = Successors::behind(hop(1), chain(&[2, 3]));
        assert_eq!(s.front(), Some(&hop(1)));
        assert_eq!(s.rest().hops, vec![hop(2), hop(3)]);
        assert!(s.has_more());
        s.fail(&gone());
        assert_eq!(s.front(), Some(&hop(2)));
        assert_eq!(s.rest().hops, vec![hop(3)]);
        let news = s.take_news().unwrap();
        assert_eq!(news.len(), 1);
        assert_eq!(news[0].host, "hop1");
        assert!(
            matches!(news[0].outcome, Outcome::Failed { code, .. } if code == gone().exit_code())
        );
        assert!(s.take_news().is_none(), "told once");
        s.fail(&gone());
        assert!(!s.has_more());
        s.done(Summary::default());
        let r = s.replicas();
        assert_eq!(
            r.iter().map(|r| r.host.as_str()).collect::<Vec<_>>(),
            ["hop1", "hop2", "hop3"]
        );
        assert!(failed(&r[0]) && failed(&r[1]) && !failed(&r[2]));
    }

    #[test]
    fn hops_the_failed_one_had_left_behind_are_not_dialed_again() {
        // hop2 had dropped hop3 (and said so); when hop2 fails, hop3 (out of step with
        // the chain, perhaps still listening) is skipped, and its failure kept.
        let mut s = Successors::new(chain(&[2, 3, 4]));
        s.heard(vec![Replica {
            host: "hop3".into(),
            outcome: Outcome::Failed {
                code: 5,
                message: "gone".into(),
            },
            proof: None,
        }]);
        assert_eq!(s.take_news().map(|r| r.len()), Some(1));
        s.heard(s.replicas());
        assert!(s.take_news().is_none(), "the same account is no news");
        s.fail(&gone());
        assert_eq!(s.front(), Some(&hop(4)));
        let r = s.replicas();
        assert_eq!(
            r.iter().map(|r| r.host.as_str()).collect::<Vec<_>>(),
            ["hop2", "hop3"]
        );
    }

    #[test]
    fn connect_leaves_behind_every_hop_that_cannot_be_dialed() {
        let mut s = Successors::new(chain(&[2, 3]));
        // The tickets do not parse: each is reported and left behind.
        let mut tried = 0;
        let got = s.connect(|_, _| {
            tried += 1;
            Ok(())
        });
        assert!(got.is_none());
        assert_eq!(tried, 0);
        assert!(s.front().is_none());
        assert_eq!(s.replicas().iter().filter(|r| failed(r)).count(), 2);
    }

    #[test]
    fn done_takes_the_account_of_the_chain_after_it() {
        let mut s = Successors::new(chain(&[2, 3]));
        s.heard(vec![Replica {
            host: "hop3".into(),
            outcome: Outcome::Done(Summary::default()),
            proof: Some([7; 32]),
        }]);
        s.done(Summary::default());
        assert!(s.front().is_none());
        let r = s.replicas();
        assert_eq!(r.len(), 2);
        assert!(!failed(&r[0]) && !failed(&r[1]));
    }

    /// Regression (issue 36, 3): a relay given a chain that names itself dialed itself as
    /// its next hop and waited on its own answer; it refuses such a chain.
    #[test]
    fn a_chain_naming_this_receiver_after_itself_is_refused() {
        let ticket = |k: u8| Ticket {
            addrs: vec!["127.0.0.1:7".parse().unwrap()],
            fingerprint: [k; 32],
            secret: crate::transport::Secret::from_bytes([k; 32]),
        };
        let me = ticket(1);
        let hops = |ks: &[u8]| Chain {
            hops: ks
                .iter()
                .map(|&k| Hop {
                    label: format!("h{k}"),
                    ticket: ticket(k).encode(),
                })
                .collect(),
            encrypt: true,
            nonce: None,
        };
        let own = me.secret.block_key();
        assert!(check_not_self(&hops(&[2, 3]), &own).is_ok());
        let e = check_not_self(&hops(&[2, 1]), &own).unwrap_err();
        assert_eq!(e.exit_code(), crate::error::exit::USAGE);
        assert!(e.to_string().contains("h1"), "{e}");
        assert!(check_not_self(&chain(&[1, 2]), &own).is_ok(), "not tickets");
        // What a relay is given since issue 37.5: hop tickets, which hold only the
        // connection key; the block key derives from it, so it still tells itself apart.
        let mut as_hops = hops(&[2, 1]);
        for h in &mut as_hops.hops {
            h.ticket = Ticket::parse(&h.ticket).unwrap().for_hop().encode();
        }
        assert!(check_not_self(&as_hops, &own).is_err(), "hop tickets");
    }

    #[test]
    fn the_sender_takes_a_done_it_only_heard_of_only_with_its_proof() {
        let mut s = Successors::behind(hop(1), chain(&[2, 3]));
        assert_eq!(
            s.rest().nonce,
            Some([5; 32]),
            "the nonce goes down the chain"
        );
        let claim = |host: &str, proof| Replica {
            host: host.into(),
            outcome: Outcome::Done(Summary::default()),
            proof,
        };
        s.heard(vec![claim("hop2", Some([7; 32])), claim("hop3", None)]);
        s.proved([1; 32]);
        s.done(Summary::default());
        assert_eq!(s.replicas()[0].proof, Some([1; 32]));
        let settled = s.settle(|r| r.proof == Some([7; 32]));
        let hosts: Vec<&str> = settled.iter().map(|r| r.host.as_str()).collect();
        assert_eq!(hosts, ["hop1", "hop2", "hop3"]);
        // The first receiver's own Done stands whatever its proof: the sender saw it.
        let s2 = s.settle(|_| false);
        assert!(!failed(&s2[0]) && failed(&s2[1]) && failed(&s2[2]));
        assert!(!failed(&settled[0]) && !failed(&settled[1]));
        assert!(matches!(
            settled[2].outcome,
            Outcome::Failed { code: 8, .. }
        ));
    }
}
