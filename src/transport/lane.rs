//! A lane: the in-process data stream of a local copy. The sender's stream hands each unit
//! it read (its data header, as `protocol` encodes it, and its raw bytes) to the
//! receiver's stream as an owned buffer, and the receiver hands the written buffer back for
//! the next read. The header is opaque here, like every byte a [`super::Conn`] carries.
//!
//! Nothing is framed, sealed, hashed or copied on the way: the bytes the receiver writes
//! are the buffer the sender read, and they never leave the process, so there is nothing a
//! tag or a hash could catch that the type does not already rule out (a `Unit` can only be
//! made here, never decoded from bytes). A lane is carried by a [`super::Conn`] made with
//! [`super::Conn::lane_pair`], so the engine's dialing and dispatching stay as they are.
//!
//! Memory: at most `DEPTH` units wait in a lane, plus the one each side holds. Buffers go
//! round whole: a unit's bytes are a range of its buffer, the rest is left from an
//! earlier unit, so a buffer handed back is read over without being zeroed again.

use std::time::Duration;

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};

/// Units that may wait in one lane.
const DEPTH: usize = 2;

/// One unit in flight: its data header and the raw bytes read.
#[derive(Debug)]
pub struct Unit {
    head: Vec<u8>,
    /// The unit's bytes are `buf[at]` (the sender may start them at an aligned address).
    buf: Vec<u8>,
    at: std::ops::Range<usize>,
}

impl Unit {
    /// The data header (where the bytes go).
    pub fn head(&self) -> &[u8] {
        &self.head
    }

    /// The raw bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.buf[self.at.clone()]
    }
}

/// The sending end of a lane.
#[derive(Debug)]
pub struct LaneSender {
    units: Sender<Unit>,
    empty: Receiver<Vec<u8>>,
}

/// The receiving end of a lane.
#[derive(Debug)]
pub struct LaneReceiver {
    units: Receiver<Unit>,
    empty: Sender<Vec<u8>>,
}

/// What a receiving end got.
pub enum Received {
    /// A unit to write.
    Unit(Unit),
    /// Nothing within the timeout.
    Idle,
    /// The sending end is gone and everything it sent was received.
    Closed,
}

/// A connected pair of lane ends.
pub(super) fn pair() -> (LaneSender, LaneReceiver) {
    let (utx, urx) = crossbeam_channel::bounded(DEPTH);
    // Room for every buffer that can exist at once, so giving one back never blocks.
    let (etx, erx) = crossbeam_channel::bounded(DEPTH + 2);
    (
        LaneSender {
            units: utx,
            empty: erx,
        },
        LaneReceiver {
            units: urx,
            empty: etx,
        },
    )
}

impl LaneSender {
    /// A buffer to read the next unit into: one the receiver gave back (holding an
    /// earlier unit's bytes, to be read over), or a new empty one.
    pub fn spare(&self) -> Vec<u8> {
        self.empty.try_recv().unwrap_or_default()
    }

    /// Hands over a copy of `head` and the unit `buf[at]` (`at` is capped at the
    /// buffer's length); blocks while the lane is full. `Err` when the receiving end is
    /// gone.
    pub fn send(
        &self,
        head: &[u8],
        buf: Vec<u8>,
        at: std::ops::Range<usize>,
    ) -> Result<(), LaneClosed> {
        let end = at.end.min(buf.len());
        let at = at.start.min(end)..end;
        let unit = Unit {
            head: head.to_vec(),
            buf,
            at,
        };
        self.units.send(unit).map_err(|_| LaneClosed)
    }
}

impl LaneReceiver {
    /// The next unit, waiting at most `timeout`.
    pub fn recv(&self, timeout: Duration) -> Received {
        match self.units.recv_timeout(timeout) {
            Ok(u) => Received::Unit(u),
            Err(RecvTimeoutError::Timeout) => Received::Idle,
            Err(RecvTimeoutError::Disconnected) => Received::Closed,
        }
    }

    /// Gives a written unit's buffer back to the sender for reuse, whole and its bytes
    /// left as they are (the next read overwrites them).
    pub fn recycle(&self, unit: Unit) {
        let _ = self.empty.try_send(unit.buf);
    }
}

/// The receiving end of a lane is gone.
#[derive(Debug)]
pub struct LaneClosed;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_arrive_in_order_and_buffers_come_back_whole() {
        let (tx, rx) = pair();
        tx.send(b"h1", b"first!".to_vec(), 0..5).unwrap();
        let spare = tx.spare();
        assert!(spare.is_empty());
        tx.send(b"h2", b"second".to_vec(), 0..6).unwrap();
        let Received::Unit(a) = rx.recv(Duration::from_secs(5)) else {
            panic!("no first unit");
        };
        assert_eq!(a.bytes(), b"first");
        assert_eq!(a.head(), b"h1");
        let cap = a.buf.capacity();
        rx.recycle(a);
        let Received::Unit(b) = rx.recv(Duration::from_secs(5)) else {
            panic!("no second unit");
        };
        assert_eq!(b.bytes(), b"second");
        // The next read reuses the first unit's buffer, whole, as it was.
        let next = tx.spare();
        assert_eq!(next.capacity(), cap);
        assert_eq!(next, b"first!");
    }

    #[test]
    fn a_length_past_the_buffer_is_capped() {
        let (tx, rx) = pair();
        tx.send(b"h", b"abc".to_vec(), 1..10).unwrap();
        let Received::Unit(u) = rx.recv(Duration::from_secs(5)) else {
            panic!("no unit");
        };
        assert_eq!(u.bytes(), b"bc");
    }

    #[test]
    fn closed_when_the_sender_is_gone_after_the_last_unit() {
        let (tx, rx) = pair();
        tx.send(b"h", b"x".to_vec(), 0..1).unwrap();
        drop(tx);
        assert!(matches!(rx.recv(Duration::from_secs(5)), Received::Unit(_)));
        assert!(matches!(rx.recv(Duration::from_secs(5)), Received::Closed));
    }

    #[test]
    fn idle_then_send_fails_once_the_receiver_is_gone() {
        let (tx, rx) = pair();
        assert!(matches!(rx.recv(Duration::from_millis(10)), Received::Idle));
        drop(rx);
        assert!(tx.send(b"h", vec![1], 0..1).is_err());
    }
}
