//! A stream relay's data streams: each takes kept blocks the control loop released and
//! writes them to the next hop as a sender's stream does, one block per unit of file 0,
//! its unit hash made with the next hop's key over the block's chaining value (verified
//! here already, so nothing is hashed again). A block goes on as it arrived: compressed
//! (the body the sender chose, kept beside the decompressed block) or raw, so every hop
//! carries the bytes of the first and no relay compresses again.
//!
//! A connection that breaks is dialed again (a few times, then the hop counts as
//! unreachable and the control loop re-forms the chain); the block goes back to the queue,
//! and what the next hop lost with the old connection it lists in `StreamLost`.

use std::io::Write;
use std::sync::atomic::Ordering;
use std::time::Duration;

use crossbeam_channel::RecvTimeoutError;

use super::relay::{Fwd, StreamRelay, Target};
use super::window::Held;
use crate::codec::tree::stream_unit_hash;
use crate::protocol::{
    encode_data_header, hashed_parts, set_hash, Codec, FrameKind, Sealer, Segment,
};
use crate::session::sealer;
use crate::transport::{self, Conn, Role};

/// How long an idle writer waits before looking whether the relay stopped.
const TICK: Duration = Duration::from_millis(100);
/// Attempts to re-dial the same hop after a data connection broke.
const REDIALS: u32 = 3;
/// How long a write may block: a hop cut off by a partition never drains its socket, and
/// a writer stuck in it would serve no later hop (the control loop gives such a hop up
/// after 10 s of silence too).
const WRITE_STALL: Duration = Duration::from_secs(10);

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
                        if conn.set_write_timeout(Some(WRITE_STALL)).is_err() {
                            continue;
                        }
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
                unit(frame, &mut l.sealer, &target.key, b.offset, &b.held);
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

/// Builds the block at `offset` as one sealed data frame for a hop whose block key is
/// `key`: its compressed body where it has one, else its bytes; the unit hash covers the
/// header and the block's chaining value, so neither body is hashed again.
fn unit(frame: &mut Vec<u8>, sealer: &mut Sealer, key: &[u8; 32], offset: u64, held: &Held) {
    let bytes = held.bytes();
    let (codec, body) = match &held.packed {
        Some(p) => (p.codec, &p.body[..]),
        None => (Codec::Raw, bytes),
    };
    let mut hdr = Vec::with_capacity(96);
    let seg = Segment {
        file: 0,
        offset,
        len: bytes.len() as u32,
        keep: false,
    };
    encode_data_header(&mut hdr, codec, bytes.len() as u32, &[seg]);
    let hash = stream_unit_hash(key, hashed_parts(&hdr), &held.cv);
    set_hash(&mut hdr, &hash);
    frame.clear();
    frame.extend_from_slice(&sealer.header(FrameKind::Data, hdr.len() + body.len()));
    frame.extend_from_slice(&hdr);
    frame.extend_from_slice(body);
}

#[cfg(test)]
mod tests {
    use super::super::window::Packed;
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
        let held = Held {
            range: 0..bytes.len(),
            buf: bytes,
            cv,
            packed: None,
        };
        let (mut frame, mut sealer) = (Vec::new(), Sealer::new([9; 32], false));
        unit(&mut frame, &mut sealer, &k2, offset, &held);
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

    #[test]
    fn a_compressed_block_goes_on_compressed_and_decodes_to_the_same_block() {
        let (k2, offset) = ([2u8; 32], 192 << 10);
        let bytes: Vec<u8> = (0..64u32 << 10).map(|i| (i / 300) as u8).collect();
        let body = lz4_flex::block::compress(&bytes);
        assert!(body.len() < bytes.len() / 4);
        let cv = block_cv(offset, &bytes);
        let held = Held {
            range: 0..bytes.len(),
            buf: bytes.clone(),
            cv,
            packed: Some(Packed {
                codec: Codec::Lz4,
                body: body.clone(),
            }),
        };
        let (mut frame, mut sealer) = (Vec::new(), Sealer::new([9; 32], false));
        unit(&mut frame, &mut sealer, &k2, offset, &held);
        assert!(
            frame.len() < body.len() + 200,
            "the compressed body, not the block"
        );
        let mut reader = FrameReader::new(Opener::new([9; 32], true));
        let f = reader.read_frame(&mut &frame[..]).unwrap().unwrap();
        let h = DataHeader::parse(f.payload).unwrap();
        assert_eq!((h.codec, h.body), (Codec::Lz4, &body[..]));
        let mut out = Vec::new();
        let got = Decoder::new(k2).decode_stream_into(&h, offset, &mut out);
        assert_eq!(got.unwrap(), cv);
        assert_eq!(out, bytes);
        assert!(Decoder::new([1; 32])
            .decode_stream_into(&h, offset, &mut out)
            .is_err());
    }
}
