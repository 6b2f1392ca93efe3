//! The sender's side of `protocol::vouch`: a fresh nonce for the run, the chain as it
//! goes down (each hop as its hop ticket, which connects but cannot vouch), and the check
//! of every replica's proof against the tickets only the sender holds.

use crate::error::{Error, Result};
use crate::protocol::vouch::holds;
use crate::protocol::{Chain, Hop, Outcome, Replica};
use crate::transport::Ticket;

/// What the sender needs to check the receivers' proofs.
pub(super) struct Vouching {
    nonce: [u8; 32],
    /// Each hop's label and outcome key (None: a ticket that does not parse, or one that
    /// cannot vouch: its replica can never be proven).
    keys: Vec<(String, Option<[u8; 32]>)>,
}

/// For a chain fan-out (`chain` as the user gave it): the chain the first receiver gets
/// (hop tickets, this run's nonce) and what checks the proofs; `chain` unchanged and None
/// otherwise.
pub(super) fn prepare(chain: &Option<Chain>) -> Result<(Option<Chain>, Option<Vouching>)> {
    let Some(c) = chain.as_ref().filter(|c| !c.hops.is_empty()) else {
        return Ok((chain.clone(), None));
    };
    let mut nonce = [0u8; 32];
    getrandom::fill(&mut nonce).map_err(|e| {
        Error::io(
            "reading the OS random source",
            std::io::Error::other(e.to_string()),
        )
    })?;
    let mut hops = Vec::with_capacity(c.hops.len());
    let mut keys = Vec::with_capacity(c.hops.len());
    for h in &c.hops {
        let parsed = Ticket::parse(&h.ticket).ok();
        keys.push((
            h.label.clone(),
            parsed.as_ref().and_then(|t| t.secret.outcome_key()),
        ));
        hops.push(Hop {
            label: h.label.clone(),
            // One that does not parse is reported failed where it would be dialed.
            ticket: parsed.map_or_else(|| h.ticket.clone(), |t| t.for_hop().encode()),
        });
    }
    let down = Chain {
        hops,
        encrypt: c.encrypt,
        nonce: Some(nonce),
    };
    Ok((Some(down), Some(Vouching { nonce, keys })))
}

impl Vouching {
    /// Whether `r`, a `Done` heard of, carries the proof of the hop it names over what
    /// the sender sent (`digest`: the manifest's, or the stream's BLAKE3).
    pub(super) fn proven(&self, r: &Replica, digest: &[u8; 32]) -> bool {
        let (Outcome::Done(summary), Some(proof)) = (&r.outcome, &r.proof) else {
            return false;
        };
        self.keys
            .iter()
            .filter(|(label, _)| *label == r.host)
            .filter_map(|(_, key)| key.as_ref())
            .any(|key| holds(key, &self.nonce, digest, summary, proof))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::vouch::proof;
    use crate::protocol::Summary;
    use crate::transport::Secret;

    fn ticket(i: u8) -> Ticket {
        Ticket {
            addrs: vec![([127, 0, 0, i], 4000).into()],
            fingerprint: [i; 32],
            secret: Secret::from_bytes([i; 32]),
        }
    }

    #[test]
    fn hops_get_hop_tickets_and_only_their_own_proof_holds() {
        let chain = Chain {
            hops: (2..4)
                .map(|i| Hop {
                    label: format!("h{i}"),
                    ticket: ticket(i).encode(),
                })
                .collect(),
            encrypt: true,
            nonce: None,
        };
        let (down, v) = prepare(&Some(chain)).unwrap();
        let (down, v) = (down.unwrap(), v.unwrap());
        let nonce = down.nonce.unwrap();
        for (h, i) in down.hops.iter().zip(2..) {
            let t = Ticket::parse(&h.ticket).unwrap();
            assert_eq!(t.secret.outcome_key(), None, "a relay cannot vouch for it");
            assert_eq!(t.secret.conn_key(), ticket(i).secret.conn_key());
        }
        let digest = [6; 32];
        let summary = Summary::default();
        let by = |i: u8| ticket(i).secret.outcome_key().unwrap();
        let done = |host: &str, p| Replica {
            host: host.into(),
            outcome: Outcome::Done(summary.clone()),
            proof: Some(p),
        };
        let own = proof(&by(3), &nonce, &digest, &summary);
        assert!(v.proven(&done("h3", own), &digest));
        assert!(
            !v.proven(&done("h2", own), &digest),
            "h3's proof is not h2's"
        );
        assert!(!v.proven(&done("h3", own), &[7; 32]), "another manifest");
        let old = proof(&by(3), &[0; 32], &digest, &summary);
        assert!(!v.proven(&done("h3", old), &digest), "another run");
        let no_proof = Replica {
            proof: None,
            ..done("h3", own)
        };
        assert!(!v.proven(&no_proof, &digest));
        // One receiver: nothing to prove, the chain as it was.
        let (same, none) = prepare(&None).unwrap();
        assert!(same.is_none() && none.is_none());
    }
}
