//! Frame authentication on one connection: [`Sealer`] tags what we write, [`Opener`]
//! checks what we read.
//!
//! Both are keyed with the connection's link key, which the handshake derives from the
//! ticket's secret and both fresh nonces, so no other connection (of this or any transfer)
//! shares it. Every frame header carries `tag = BLAKE3_link(side u8 | seq u64 | the 8
//! header bytes)[..16]`, where `side` is 0 for frames the dialer writes and 1 for the
//! listener's and `seq` counts the frames written in that direction from 0. A control
//! payload ends with `mac = BLAKE3_link("control" | side | seq | header | message)`. So a
//! frame edited, dropped, repeated, reordered, reflected or moved from another connection
//! fails here, and a header is checked before its payload is awaited (a forged length
//! cannot make the reader wait for bytes that never come). Data payloads carry their own
//! keyed hash (`codec`), bound to this connection by the header tag.
//!
//! Not here: what a failure means (the drivers drop the connection), keys (transport).

use super::frame::{FrameHeader, FrameKind, FRAME_HEADER_LEN, FRAME_PREFIX_LEN};
use super::limits::{CONTROL_MAC_LEN, FRAME_TAG_LEN};
use super::ProtocolError;

const CONTROL_LABEL: &[u8; 7] = b"control";

/// Tags the frames one side writes on one connection.
pub struct Sealer {
    key: [u8; 32],
    side: u8,
    seq: u64,
}

/// Checks the frames one side reads on one connection, in order.
pub struct Opener {
    key: [u8; 32],
    side: u8,
    seq: u64,
}

fn header_tag(key: &[u8; 32], side: u8, seq: u64, prefix: &[u8]) -> blake3::Hash {
    let mut h = blake3::Hasher::new_keyed(key);
    h.update(&[side]).update(&seq.to_le_bytes()).update(prefix);
    h.finalize()
}

fn control_mac(key: &[u8; 32], side: u8, seq: u64, prefix: &[u8], msg: &[u8]) -> blake3::Hash {
    let mut h = blake3::Hasher::new_keyed(key);
    h.update(CONTROL_LABEL)
        .update(&[side])
        .update(&seq.to_le_bytes())
        .update(prefix)
        .update(msg);
    h.finalize()
}

fn side_byte(dialer: bool) -> u8 {
    if dialer {
        0
    } else {
        1
    }
}

impl Sealer {
    /// Tags frames written with `key` by the dialing side (`dialer`) or the listening one.
    pub fn new(key: [u8; 32], dialer: bool) -> Sealer {
        Sealer {
            key,
            side: side_byte(dialer),
            seq: 0,
        }
    }

    /// The next frame's header (with its tag) for a payload of `len` bytes. For a
    /// control frame use [`Sealer::control`] instead, which also MACs the payload.
    pub fn header(&mut self, kind: FrameKind, len: usize) -> [u8; FRAME_HEADER_LEN] {
        let prefix = FrameHeader::encode(kind, len);
        let tag = header_tag(&self.key, self.side, self.seq, &prefix);
        self.seq += 1;
        let mut out = [0u8; FRAME_HEADER_LEN];
        out[..FRAME_PREFIX_LEN].copy_from_slice(&prefix);
        out[FRAME_PREFIX_LEN..].copy_from_slice(&tag.as_bytes()[..FRAME_TAG_LEN]);
        out
    }

    /// Appends a whole control frame carrying `msg` (an encoded message) to `out`.
    pub fn control(&mut self, msg: &[u8], out: &mut Vec<u8>) {
        let seq = self.seq;
        let header = self.header(FrameKind::Control, msg.len() + CONTROL_MAC_LEN);
        let mac = control_mac(&self.key, self.side, seq, &header[..FRAME_PREFIX_LEN], msg);
        out.extend_from_slice(&header);
        out.extend_from_slice(msg);
        out.extend_from_slice(mac.as_bytes());
    }
}

impl Opener {
    /// Checks frames written with `key` by the other side; `dialer` says whether *we* dialed.
    pub fn new(key: [u8; 32], dialer: bool) -> Opener {
        Opener {
            key,
            side: side_byte(!dialer),
            seq: 0,
        }
    }

    /// Checks the next header's tag, then parses it. The sequence number the header used
    /// is returned for [`Opener::open_control`].
    pub fn open_header(
        &mut self,
        h: &[u8; FRAME_HEADER_LEN],
    ) -> Result<(FrameHeader, u64), ProtocolError> {
        let expected = header_tag(&self.key, self.side, self.seq, &h[..FRAME_PREFIX_LEN]);
        // A plain comparison: the first failure ends the connection, and with it the key
        // and sequence number, so timing offers no oracle to retry against.
        if h[FRAME_PREFIX_LEN..] != expected.as_bytes()[..FRAME_TAG_LEN] {
            return Err(ProtocolError::Forged("frame header"));
        }
        let seq = self.seq;
        self.seq += 1;
        Ok((FrameHeader::parse(h)?, seq))
    }

    /// Checks a control payload's MAC; returns the message without it.
    pub fn open_control<'a>(
        &self,
        seq: u64,
        h: &[u8; FRAME_HEADER_LEN],
        payload: &'a [u8],
    ) -> Result<&'a [u8], ProtocolError> {
        let Some(split) = payload.len().checked_sub(CONTROL_MAC_LEN) else {
            return Err(ProtocolError::Forged("control message"));
        };
        let (msg, mac) = payload.split_at(split);
        let expected = control_mac(&self.key, self.side, seq, &h[..FRAME_PREFIX_LEN], msg);
        let mut got = [0u8; 32];
        got.copy_from_slice(mac);
        if blake3::Hash::from_bytes(got) != expected {
            return Err(ProtocolError::Forged("control message"));
        }
        Ok(msg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trip_and_every_bit_matters() {
        let mut s = Sealer::new([1; 32], true);
        let h0 = s.header(FrameKind::Data, 1234);
        let h1 = s.header(FrameKind::End, 0);
        let mut o = Opener::new([1; 32], false);
        assert_eq!(o.open_header(&h0).unwrap().0.len, 1234);
        assert_eq!(o.open_header(&h1).unwrap().0.kind, FrameKind::End);
        for bit in 0..FRAME_HEADER_LEN * 8 {
            let mut o = Opener::new([1; 32], false);
            let mut bad = h0;
            bad[bit / 8] ^= 1 << (bit % 8);
            assert!(o.open_header(&bad).is_err(), "bit {bit}");
        }
    }

    #[test]
    fn wrong_order_side_or_key_fails() {
        let mut s = Sealer::new([1; 32], true);
        let h0 = s.header(FrameKind::Data, 10);
        let h1 = s.header(FrameKind::Data, 10);
        // Reordered (or h0 dropped).
        assert!(Opener::new([1; 32], false).open_header(&h1).is_err());
        // Reflected back to its writer.
        assert!(Opener::new([1; 32], true).open_header(&h0).is_err());
        // Another connection's key.
        assert!(Opener::new([2; 32], false).open_header(&h0).is_err());
    }

    #[test]
    fn control_payload_is_authenticated() {
        let mut s = Sealer::new([3; 32], false);
        let mut out = Vec::new();
        s.control(b"hello", &mut out);
        let h: [u8; FRAME_HEADER_LEN] = out[..FRAME_HEADER_LEN].try_into().unwrap();
        let mut o = Opener::new([3; 32], true);
        let (fh, seq) = o.open_header(&h).unwrap();
        let payload = &out[FRAME_HEADER_LEN..];
        assert_eq!(fh.len, payload.len());
        assert_eq!(o.open_control(seq, &h, payload).unwrap(), b"hello");
        let mut bad = payload.to_vec();
        bad[1] ^= 0x20;
        assert!(o.open_control(seq, &h, &bad).is_err());
        assert!(o.open_control(seq + 1, &h, payload).is_err());
        assert!(o.open_control(seq, &h, &payload[..10]).is_err());
    }
}
