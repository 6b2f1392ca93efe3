//! The receiving half of pipe mode's stream conversation, without I/O or clocks: the
//! reorder window's bookkeeping ([`Reorder`]: which blocks arrived, how far the stream is
//! whole, where it ends) and when to ask the sender for blocks again ([`Asks`]).
//!
//! Both the receiver's threads (`receive::pipe`) and the deterministic simulator of the
//! stream conversation (`send::pipe::sim`) drive these, so what the simulator checks is
//! the code that runs. Callers pass the time in milliseconds on a clock of their own.
//!
//! **Why asking again is needed.** A block the sender wrote into a connection that was
//! already dead (cut on the receiver's side, its reset not yet back at the sender) is
//! lost without either side seeing a failure for it: the receiver's reader had already
//! ended and reported its loss, and the sender's stream, having nothing more to send,
//! never writes again and so never learns. A `StreamLost` can also vanish with a control
//! connection cut after it was written. So the receiver does not rely on one report: it
//! asks again whenever a data connection broke, whenever its control connection was
//! replaced, and whenever the stream stalled (nothing arrived while blocks are awaited),
//! the stall asks spaced out so that a long outage costs a few duplicate windows at most.

use std::collections::BTreeMap;

use crate::protocol::ProtocolError;

/// First stall ask after this long without a byte arriving (ms): well beyond the gaps of
/// a busy link (bytes arrive continuously, even within one large frame on a slow link).
pub const STALL_ASK: u64 = 2_000;
/// Stall asks back off, doubling, up to this spacing (ms).
pub const STALL_ASK_MAX: u64 = 16_000;

/// A block's length in the stream.
pub trait Span {
    /// Its length in bytes.
    fn span(&self) -> u64;
}

impl Span for u64 {
    fn span(&self) -> u64 {
        *self
    }
}

/// The reorder window: blocks arrived and not yet handed to the consumer, by offset.
#[derive(Debug)]
pub struct Reorder<T> {
    /// Blocks arrived and not yet written, by offset.
    pub blocks: BTreeMap<u64, T>,
    /// Bytes handed to the consumer.
    pub written: u64,
    /// Every byte before this has arrived.
    pub have: u64,
    /// Length and digest, once the sender said.
    pub end: Option<(u64, [u8; 32])>,
}

impl<T> Default for Reorder<T> {
    fn default() -> Self {
        Reorder {
            blocks: BTreeMap::new(),
            written: 0,
            have: 0,
            end: None,
        }
    }
}

impl<T: Span> Reorder<T> {
    /// Takes one verified block of a stream cut in `block`-byte blocks, with a window of
    /// `window` bytes beyond what was written. A duplicate (or one already written) comes
    /// back as `Ok(Some(it))`, for its buffers to be recycled; a block outside the window
    /// or past the announced end is the sender breaking the protocol.
    pub fn insert(
        &mut self,
        offset: u64,
        it: T,
        window: u64,
        block: u64,
    ) -> Result<Option<T>, ProtocolError> {
        let len = it.span();
        if offset < self.written || self.blocks.contains_key(&offset) {
            return Ok(Some(it));
        }
        if offset + len > self.written + window {
            return Err(ProtocolError::Malformed("stream block beyond the window"));
        }
        if let Some((end, _)) = self.end {
            if offset + len > end || (len < block && offset + len != end) {
                return Err(ProtocolError::Malformed("stream block past its end"));
            }
        }
        self.blocks.insert(offset, it);
        while let Some(b) = self.blocks.get(&self.have) {
            self.have += b.span();
        }
        Ok(None)
    }

    /// The next block for the consumer, if it arrived (taken out; `written` is the
    /// caller's to advance once the consumer has it).
    pub fn take_next(&mut self) -> Option<(u64, T)> {
        let at = self.written;
        self.blocks.remove(&at).map(|b| (at, b))
    }

    /// Every byte is with the consumer.
    pub fn complete(&self) -> bool {
        self.end.is_some_and(|(len, _)| len == self.written)
    }

    /// The offsets of the blocks held beyond the first gap (what `StreamLost` lists).
    pub fn got(&self) -> Vec<u64> {
        self.blocks.range(self.have..).map(|(o, _)| *o).collect()
    }

    /// The sender's `StreamEnd`: a repeat must be the same; an end before data already
    /// here is a lie.
    pub fn set_end(&mut self, len: u64, digest: [u8; 32]) -> Result<bool, ProtocolError> {
        if let Some((l, d)) = self.end {
            if (l, d) != (len, digest) {
                return Err(ProtocolError::Malformed("a second, different StreamEnd"));
            }
            return Ok(false);
        }
        let past = self
            .blocks
            .iter()
            .next_back()
            .is_some_and(|(o, b)| o + b.span() > len);
        if len < self.have || past {
            return Err(ProtocolError::Malformed(
                "StreamEnd before data already sent",
            ));
        }
        self.end = Some((len, digest));
        Ok(true)
    }
}

/// When the receiver asks the sender for blocks again (`StreamLost`).
///
/// Calling order: `handle_*` as things happen, [`Asks::poll_ask`] every time the control
/// loop wakes; a `true` from it means "send `StreamLost` now".
#[derive(Debug)]
pub struct Asks {
    /// A data connection broke, or the control connection was replaced, since the last ask.
    due: bool,
    /// When a byte last arrived or the stream last moved.
    moved_at: u64,
    /// When the last stall ask went out, and the spacing before the next.
    asked_at: Option<u64>,
    spacing: u64,
}

impl Asks {
    /// Nothing to ask yet, the clock at `now`.
    pub fn new(now: u64) -> Asks {
        Asks {
            due: false,
            moved_at: now,
            asked_at: None,
            spacing: STALL_ASK,
        }
    }

    /// Bytes arrived on a data connection, or the consumer took some, at `now`.
    /// (An earlier or the same time again changes nothing.)
    pub fn handle_moved(&mut self, now: u64) {
        if now > self.moved_at {
            self.moved_at = now;
            self.asked_at = None;
            self.spacing = STALL_ASK;
        }
    }

    /// A data connection broke: what it carried may be lost.
    pub fn handle_broken(&mut self) {
        self.due = true;
    }

    /// A new control connection replaced the old one: an ask written on the old one may
    /// never have arrived.
    pub fn handle_control_replaced(&mut self) {
        self.due = true;
    }

    /// Whether to send `StreamLost` now. `awaiting`: the stream is not yet whole at this
    /// receiver (no end yet, or bytes before it missing).
    pub fn poll_ask(&mut self, now: u64, awaiting: bool) -> bool {
        if std::mem::take(&mut self.due) {
            return true;
        }
        if !awaiting {
            return false;
        }
        let since = self.asked_at.unwrap_or(self.moved_at);
        if now.saturating_sub(since) < self.spacing {
            return false;
        }
        if self.asked_at.is_some() {
            self.spacing = (self.spacing * 2).min(STALL_ASK_MAX);
        }
        self.asked_at = Some(now);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const B: u64 = 64 << 10;

    #[test]
    fn blocks_in_any_order_make_the_stream_whole_once() {
        let mut r = Reorder::<u64>::default();
        assert_eq!(r.insert(2 * B, B, 8 * B, B), Ok(None));
        assert_eq!(r.insert(B, B, 8 * B, B), Ok(None));
        assert_eq!(r.have, 0);
        assert_eq!(r.got(), vec![B, 2 * B]);
        assert_eq!(
            r.insert(B, B, 8 * B, B),
            Ok(Some(B)),
            "a duplicate comes back"
        );
        assert_eq!(r.insert(0, B, 8 * B, B), Ok(None));
        assert_eq!(r.have, 3 * B);
        assert!(r.got().is_empty());
        assert_eq!(r.take_next(), Some((0, B)));
        r.written += B;
        assert_eq!(r.insert(0, B, 8 * B, B), Ok(Some(B)), "already written");
        assert!(r.insert(10 * B, B, 8 * B, B).is_err(), "beyond the window");
        assert_eq!(r.set_end(3 * B + 5, [1; 32]), Ok(true));
        assert_eq!(r.set_end(3 * B + 5, [1; 32]), Ok(false));
        assert!(r.set_end(3 * B + 6, [1; 32]).is_err());
        assert!(
            r.insert(3 * B, 4, 8 * B, B).is_err(),
            "a short block not at the end"
        );
        assert_eq!(r.insert(3 * B, 5, 8 * B, B), Ok(None));
    }

    #[test]
    fn an_end_before_data_already_here_is_refused() {
        let mut r = Reorder::<u64>::default();
        r.insert(2 * B, B, 8 * B, B).unwrap();
        assert!(r.set_end(2 * B, [0; 32]).is_err());
    }

    #[test]
    fn a_break_or_a_new_control_connection_asks_at_once_and_once() {
        let mut a = Asks::new(0);
        assert!(!a.poll_ask(10, true));
        a.handle_broken();
        assert!(a.poll_ask(20, false), "even with nothing awaited");
        assert!(!a.poll_ask(30, true));
        a.handle_control_replaced();
        assert!(a.poll_ask(40, true));
    }

    #[test]
    fn a_stall_asks_after_a_while_then_ever_more_rarely_until_the_stream_moves() {
        let mut a = Asks::new(0);
        assert!(!a.poll_ask(STALL_ASK - 1, true));
        assert!(!a.poll_ask(STALL_ASK, false), "nothing awaited: no ask");
        assert!(a.poll_ask(STALL_ASK, true));
        assert!(!a.poll_ask(2 * STALL_ASK - 1, true));
        assert!(a.poll_ask(2 * STALL_ASK, true));
        // The spacing doubles up to its bound: asks at 2, 4, 8, 16, 32, 48, 64 s.
        for at in [8_000, 16_000, 32_000, 48_000, 64_000] {
            assert!(!a.poll_ask(at - 1, true));
            assert!(a.poll_ask(at, true), "an ask at {at} ms");
        }
        // Movement resets: the next stall ask is STALL_ASK after it.
        a.handle_moved(100_000);
        assert!(!a.poll_ask(100_000 + STALL_ASK - 1, true));
        assert!(a.poll_ask(100_000 + STALL_ASK, true));
    }
}
