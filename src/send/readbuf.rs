//! A stream's read buffer, reused from unit to unit without being zeroed for each read.
//!
//! `pread` needs an initialised slice to read into, and `Vec::resize` zeroes every byte it
//! adds: a buffer emptied with `clear` and grown again for each file of a pack was zeroed
//! once per file (4–7% of a local copy's sender). Here the vector's length is a high-water
//! mark that never shrinks, and the unit's length is kept apart: bytes past the unit but
//! below the mark hold an earlier unit's data and are simply read over. Only growth past
//! the mark zeroes, so a buffer is zeroed at most once in its life. Safe Rust throughout:
//! reading into uninitialised memory would need `unsafe` for no gain once buffers are
//! reused.

/// Bytes of the current unit, in a buffer that keeps its initialised length.
#[derive(Debug, Default)]
pub(super) struct ReadBuf {
    /// Every byte is initialised; `buf.len()` only grows.
    buf: Vec<u8>,
    /// The current unit's length (at most `buf.len()`).
    len: usize,
}

impl ReadBuf {
    /// An empty buffer with room for `cap` bytes (not yet initialised).
    pub(super) fn with_capacity(cap: usize) -> ReadBuf {
        ReadBuf {
            buf: Vec::with_capacity(cap),
            len: 0,
        }
    }

    /// The current unit's bytes.
    pub(super) fn bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }

    /// The current unit's length.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Empties the unit (keeps the bytes, to be read over).
    pub(super) fn clear(&mut self) {
        self.len = 0;
    }

    /// Shortens the unit to `n` bytes (no effect if it is not longer).
    pub(super) fn truncate(&mut self, n: usize) {
        self.len = self.len.min(n);
    }

    /// Makes the unit `n` bytes long and returns all of them, to be filled (they hold
    /// whatever an earlier unit left, or zeros where the buffer never reached).
    pub(super) fn fill(&mut self, n: usize) -> &mut [u8] {
        self.len = 0;
        self.append(n)
    }

    /// Adds `n` bytes to the end of the unit and returns them, to be filled.
    pub(super) fn append(&mut self, n: usize) -> &mut [u8] {
        let start = self.len;
        let end = start + n;
        if self.buf.len() < end {
            self.buf.resize(end, 0);
        }
        self.len = end;
        &mut self.buf[start..end]
    }

    /// The unit's bytes, writable (to compact them in place).
    pub(super) fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.buf[..self.len]
    }

    /// Hands the buffer over with the unit's length and takes `spare` (of any length, its
    /// bytes to be read over) in its place, empty.
    pub(super) fn swap(&mut self, spare: Vec<u8>) -> (Vec<u8>, usize) {
        let len = std::mem::replace(&mut self.len, 0);
        (std::mem::replace(&mut self.buf, spare), len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reused_buffer_keeps_its_bytes_and_only_growth_zeroes() {
        let mut b = ReadBuf::with_capacity(8);
        b.fill(4).copy_from_slice(b"abcd");
        assert_eq!(b.bytes(), b"abcd");
        b.clear();
        assert!(b.bytes().is_empty());
        // Appending within the mark hands back the old bytes (to be read over) ...
        assert_eq!(b.append(2), b"ab");
        // ... and past it, zeros.
        assert_eq!(b.append(4), b"cd\0\0");
        assert_eq!(b.len(), 6);
        b.truncate(3);
        assert_eq!(b.bytes(), b"abc");
        b.truncate(10);
        assert_eq!(b.len(), 3);
        b.bytes_mut().copy_within(1..3, 0);
        assert_eq!(b.bytes(), b"bcc");
        assert_eq!(b.fill(1), b"b");
    }

    #[test]
    fn swapping_hands_over_the_unit_and_starts_empty() {
        let mut b = ReadBuf::default();
        b.append(3).copy_from_slice(b"xyz");
        let (old, len) = b.swap(b"spare bytes".to_vec());
        assert_eq!(&old[..len], b"xyz");
        assert_eq!(b.len(), 0);
        // The spare's bytes are read over, not zeroed.
        assert_eq!(b.fill(5), b"spare");
    }
}
