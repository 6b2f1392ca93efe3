//! A stream relay's data streams: each takes kept blocks the control loop released and
//! writes them to the next hop as a sender's stream does, one block per unit of file 0,
//! its unit hash made with the next hop's key over the block's chaining value (verified
//! here already, so nothing is hashed again). Blocks go raw: the relay holds them
//! decompressed, and compressing again would cost a relay what it saves the link.
//!
//! A connection that breaks is dialed again (a few times, then the hop counts as
//! unreachable and the control loop re-forms the chain); the block goes back to the queue,
//! and what the next hop lost with the old connection it lists in `StreamLost`.

use std::io::Write;
use std::sync::atomic::Ordering;
use std::time::Duration;

use crossbeam_channel::RecvTimeoutError;

use super::relay::{Fwd, StreamRelay, Target};
use crate::codec::tree::{stream_unit_hash, BlockCv};
use crate::protocol::{
    encode_data_header, hashed_parts, set_hash, Codec, FrameKind, Sealer, Segment,
};
use crate::session::sealer;
use crate::transport::{self, Conn, Role};

/// How long an idle writer waits before looking whether the relay stopped.
const TICK: Duration = Duration::from_millis(100);
/// Attempts to re-dial the same hop after a data connection broke.
const REDIALS: u32 = 3;

/// A writer's connection, to hop `generation`.
struct Link {
    generation: u64,
    conn: Conn,
    sealer: Sealer,
}

impl StreamRelay {
    /// One data stream: writes released blocks to the current next hop until stopped.
    pub(super) fn writer(&self) {
        let mut link: Option<Link> = None;
        let mut frame = Vec::new();
        loop {
            let b = match self.work_rx.recv_timeout(TICK) {
                Ok(b) => b,
                Err(RecvTimeoutError::Timeout) if !self.stop.load(Ordering::Acquire) => continue,
                Err(_) => break,
            };
            if self.stop.load(Ordering::Acquire) {
                break;
            }
            let Some((target, have)) = self.target() else {
                continue;
            };
            if b.end() <= have {
                continue;
            }
            if !self.send(&mut link, &target, &b, &mut frame) {
                self.broke(target.generation);
                // Sent again from the kept blocks once the chain has re-formed.
            }
        }
        if let Some(mut l) = link {
            let _ = l.conn.write_all(&l.sealer.header(FrameKind::End, 0));
            let _ = l.conn.shutdown_write();
        }
    }

    /// Writes `b` to `target`, dialing (again) as needed; false when it cannot be reached.
    fn send(&self, link: &mut Option<Link>, target: &Target, b: &Fwd, frame: &mut Vec<u8>) -> bool {
        for attempt in 0..=REDIALS {
            if link
                .as_ref()
                .is_some_and(|l| l.generation != target.generation)
            {
                *link = None;
            }
            if link.is_none() {
                if attempt > 0 {
                    std::thread::sleep(Duration::from_millis(250 << attempt.min(3)));
                }
                match transport::connect(&target.ticket, Role::Data, self.encrypt) {
                    Ok(conn) => {
                        let sealer = sealer(&conn);
                        *link = Some(Link {
                            generation: target.generation,
                            conn,
                            sealer,
                        });
                    }
                    Err(_) => continue,
                }
            }
            if let Some(l) = link.as_mut() {
                let h = &b.held;
                unit(
                    frame,
                    &mut l.sealer,
                    &target.key,
                    (b.offset, h.bytes(), &h.cv),
                );
                if l.conn
                    .write_all(frame)
                    .and_then(|()| l.conn.flush())
                    .is_ok()
                {
                    return true;
                }
            }
            *link = None;
        }
        false
    }
}

/// Builds the block at `offset` (its bytes and chaining value) as one sealed data frame
/// for a hop whose block key is `key`.
fn unit(
    frame: &mut Vec<u8>,
    sealer: &mut Sealer,
    key: &[u8; 32],
    (offset, bytes, cv): (u64, &[u8], &BlockCv),
) {
    let mut hdr = Vec::with_capacity(96);
    let seg = Segment {
        file: 0,
        offset,
        len: bytes.len() as u32,
        keep: false,
    };
    encode_data_header(&mut hdr, Codec::Raw, bytes.len() as u32, &[seg]);
    let hash = stream_unit_hash(key, hashed_parts(&hdr), cv);
    set_hash(&mut hdr, &hash);
    frame.clear();
    frame.extend_from_slice(&sealer.header(FrameKind::Data, hdr.len() + bytes.len()));
    frame.extend_from_slice(&hdr);
    frame.extend_from_slice(bytes);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::tree::block_cv;
    use crate::codec::Decoder;
    use crate::protocol::{DataHeader, FrameReader, Opener};

    #[test]
    fn a_forwarded_block_verifies_with_the_next_hops_key_only() {
        let (k1, k2) = ([1u8; 32], [2u8; 32]);
        let bytes = vec![7u8; 64 << 10];
        let offset = 128 << 10;
        let cv = block_cv(offset, &bytes);
        let (mut frame, mut sealer) = (Vec::new(), Sealer::new([9; 32], false));
        unit(&mut frame, &mut sealer, &k2, (offset, &bytes, &cv));
        let mut reader = FrameReader::new(Opener::new([9; 32], true));
        let f = reader
            .read_frame(&mut &frame[..])
            .expect("a frame")
            .expect("not the end");
        assert_eq!(f.kind, FrameKind::Data);
        let h = DataHeader::parse(f.payload).unwrap();
        assert_eq!(Decoder::new(k2).verify_stream_raw(&h, offset).unwrap(), cv);
        assert!(Decoder::new(k1).verify_stream_raw(&h, offset).is_err());
        assert!(
            Decoder::new(k2).verify_stream_raw(&h, 0).is_err(),
            "bound to its offset"
        );
    }
}
