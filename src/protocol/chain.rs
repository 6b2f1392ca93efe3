//! Chain fan-out on the control stream: the receivers after the first ([`Chain`], sender →
//! receiver after `Start`) and what became of each of them ([`Replica`], receiver → sender
//! before `Done`, and from a tree's relay as soon as a hop fails).
//!
//! The types are `msg`'s (they are part of `Control`; a stream's chain rides in
//! `StreamStart`); here: their bounds.
//!
//! A receiver that gets a non-empty chain is also a sender to its first hop: it forwards
//! the manifest and every verified block it needs to pass on, and gives the rest of the
//! chain to that hop. The hops' tickets cross only authenticated control streams.

use super::msg::Chain;

/// Most receivers after the first in one chain.
pub const MAX_CHAIN: usize = 32;
/// Longest label or ticket text of a hop, and longest message of a failed replica.
pub const MAX_HOP_TEXT: usize = 4096;

impl Chain {
    /// Checks the bounds a receiver relies on (a peer's chain is not trusted blindly:
    /// the hops are dialed, so their number and text are bounded).
    pub fn check(&self) -> Result<(), super::ProtocolError> {
        if self.hops.len() > MAX_CHAIN {
            return Err(super::ProtocolError::TooLong {
                what: "chain",
                len: self.hops.len() as u64,
                max: MAX_CHAIN as u64,
            });
        }
        for h in &self.hops {
            if h.label.len() > MAX_HOP_TEXT || h.ticket.len() > MAX_HOP_TEXT {
                return Err(super::ProtocolError::Malformed("chain hop"));
            }
        }
        Ok(())
    }

    /// The chain the first hop gets: the hops after it.
    pub fn rest(&self) -> Chain {
        Chain {
            hops: self.hops.iter().skip(1).cloned().collect(),
            encrypt: self.encrypt,
            nonce: self.nonce,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{Control, Hop, Outcome, Replica, Summary};
    use proptest::prelude::*;

    fn hop(i: usize) -> Hop {
        Hop {
            label: format!("10.0.0.{i}:1234"),
            ticket: format!("haul1-{i}"),
        }
    }

    #[test]
    fn bounds_and_rest() {
        let c = Chain {
            hops: (0..3).map(hop).collect(),
            encrypt: true,
            nonce: None,
        };
        assert!(c.check().is_ok());
        assert_eq!(c.rest().hops, vec![hop(1), hop(2)]);
        assert!(c.rest().encrypt);
        let long = Chain {
            hops: (0..=MAX_CHAIN).map(hop).collect(),
            encrypt: false,
            nonce: None,
        };
        assert!(long.check().is_err());
        let wide = Chain {
            hops: vec![Hop {
                label: "x".repeat(MAX_HOP_TEXT + 1),
                ticket: String::new(),
            }],
            encrypt: false,
            nonce: None,
        };
        assert!(wide.check().is_err());
    }

    proptest! {
            #[test]
            fn chain_and_replicas_round_trip(
                labels in proptest::collection::vec(".{0,40}", 0..5),
                code in any::<i32>(),
                files in any::<u64>(),
            ) {
                let chain = Control::Chain(Chain {
                    hops: labels.iter().map(|l| Hop { label: l.clone(), ticket: l.repeat(2) }).collect(),
                    encrypt: code % 2 == 0,
    nonce: None,

                });
                let bytes = postcard::to_stdvec(&chain).unwrap();
                prop_assert_eq!(Control::decode(&bytes).unwrap(), chain);
                let reps = Control::Replicas(labels.iter().map(|l| Replica {
                    host: l.clone(),
                    outcome: if code % 2 == 0 {
                        Outcome::Done(Summary { files, ..Summary::default() })
                    } else {
                        Outcome::Failed { code, message: l.clone() }
                    },
    proof: None,

                }).collect());
                let bytes = postcard::to_stdvec(&reps).unwrap();
                prop_assert_eq!(Control::decode(&bytes).unwrap(), reps);
            }

            #[test]
            fn a_stream_start_carries_its_chain(
                labels in proptest::collection::vec(".{0,40}", 0..5),
                streams in any::<u16>(),
                window in any::<u64>(),
                encrypt in any::<bool>(),
            ) {
                let start = Control::StreamStart {
                    streams,
                    block_size: 1 << 20,
                    window,
                    chain: Chain {
                        hops: labels.iter().map(|l| Hop { label: l.clone(), ticket: l.repeat(2) }).collect(),
                        encrypt,
    nonce: None,

                    },
                };
                let bytes = postcard::to_stdvec(&start).unwrap();
                prop_assert_eq!(Control::decode(&bytes).unwrap(), start);
            }

            #[test]
            fn any_bytes_after_a_stream_start_decode_or_error(
                bytes in proptest::collection::vec(any::<u8>(), 0..256),
            ) {
                let mut b = vec![7u8];
                b.extend_from_slice(&bytes);
                if let Ok(Control::StreamStart { chain, .. }) = Control::decode(&b) {
                    let _ = chain.check();
                }
            }

            #[test]
            fn any_bytes_after_the_chain_tag_decode_or_error(
                tag in 14u8..16,
                bytes in proptest::collection::vec(any::<u8>(), 0..256),
            ) {
                let mut b = vec![tag];
                b.extend_from_slice(&bytes);
                if let Ok(Control::Chain(c)) = Control::decode(&b) {
                    let _ = c.check();
                }
            }
        }
}
