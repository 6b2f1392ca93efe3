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
//!
//! A block read with [`ReadBuf::fill`] starts on a [`ALIGN`] boundary in memory (the
//! vector has that much room to spare, and the unit starts where its address is
//! aligned): so the block can be read with `O_DIRECT`, and a local copy's receiver,
//! which writes the very same buffer, can write it with `O_DIRECT` without copying it
//! into an aligned one first.

/// The memory alignment of a block's bytes (what `O_DIRECT` needs, see `store::direct`).
pub(super) const ALIGN: usize = 4096;

/// Bytes of the current unit, in a buffer that keeps its initialised length.
#[derive(Debug, Default)]
pub(super) struct ReadBuf {
    /// Every byte is initialised; `buf.len()` only grows.
    buf: Vec<u8>,
    /// Where the current unit starts in `buf`.
    start: usize,
    /// The current unit's length (`start + len` is at most `buf.len()`).
    len: usize,
}

impl ReadBuf {
    /// An empty buffer with room for `cap` bytes (not yet initialised).
    pub(super) fn with_capacity(cap: usize) -> ReadBuf {
        ReadBuf {
            buf: Vec::with_capacity(cap + ALIGN),
            start: 0,
            len: 0,
        }
    }

    /// The current unit's bytes.
    pub(super) fn bytes(&self) -> &[u8] {
        &self.buf[self.start..self.start + self.len]
    }

    /// The current unit's length.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Empties the unit (keeps the bytes, to be read over); it starts on an [`ALIGN`]
    /// boundary where the buffer already reaches that far, so a pack of small files
    /// whose sizes are whole pages has every file aligned (see [`ReadBuf::room`]).
    pub(super) fn clear(&mut self) {
        let aligned = self.buf.as_ptr().align_offset(ALIGN);
        self.start = if aligned <= self.buf.len() {
            aligned
        } else {
            0
        };
        self.len = 0;
    }

    /// Shortens the unit to `n` bytes (no effect if it is not longer).
    pub(super) fn truncate(&mut self, n: usize) {
        self.len = self.len.min(n);
    }

    /// Makes the unit `n` bytes long, starting on an [`ALIGN`] boundary in memory, and
    /// returns all of them, to be filled (they hold whatever an earlier unit left, or
    /// zeros where the buffer never reached).
    pub(super) fn fill(&mut self, n: usize) -> &mut [u8] {
        if self.buf.len() < n + ALIGN {
            self.buf.resize(n + ALIGN, 0);
        }
        self.start = self.buf.as_ptr().align_offset(ALIGN);
        self.len = n;
        &mut self.buf[self.start..self.start + n]
    }

    /// Returns `n` bytes past the end of the unit that start on an [`ALIGN`] boundary in
    /// memory (right at the end when it is aligned, else up to `ALIGN - 1` bytes further),
    /// to be filled, e.g. by `O_DIRECT` reads; [`ReadBuf::take_parts`] then adds what was
    /// read to the unit. The unit itself is unchanged until then.
    pub(super) fn room(&mut self, n: usize) -> &mut [u8] {
        let from = self.start + self.len;
        if self.buf.len() < from + ALIGN + n {
            self.buf.resize(from + ALIGN + n, 0);
        }
        // After any growth: a reallocation may have moved the bytes.
        let at = from + self.buf[from..].as_ptr().align_offset(ALIGN);
        &mut self.buf[at..at + n]
    }

    /// Adds the given byte ranges of the last [`ReadBuf::room`] (offsets into it, in
    /// increasing order, not overlapping) to the end of the unit, one after another,
    /// moving each down where it is not already right there.
    pub(super) fn take_parts(&mut self, parts: impl IntoIterator<Item = std::ops::Range<usize>>) {
        let from = self.start + self.len;
        let at = from + self.buf[from..].as_ptr().align_offset(ALIGN);
        for part in parts {
            let to = self.start + self.len;
            let n = part.len();
            // Never upwards: the unit's end is at most the room's start, and each part
            // starts at or after the end of the one before.
            debug_assert!(to <= at + part.start);
            if to != at + part.start {
                self.buf.copy_within(at + part.start..at + part.end, to);
            }
            self.len += n;
        }
    }

    /// How far the buffer has ever reached (its memory).
    #[cfg(test)]
    pub(super) fn mark(&self) -> usize {
        self.buf.len()
    }

    /// The unit's bytes, writable (to compact them in place).
    pub(super) fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.buf[self.start..self.start + self.len]
    }

    /// Hands the buffer over with where the unit is in it (`start..start + len`), and
    /// takes `spare` (of any length, its bytes to be read over) in its place, empty.
    pub(super) fn swap(&mut self, spare: Vec<u8>) -> (Vec<u8>, std::ops::Range<usize>) {
        let len = std::mem::replace(&mut self.len, 0);
        let start = std::mem::replace(&mut self.start, 0);
        (std::mem::replace(&mut self.buf, spare), start..start + len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Appends `bytes` to the unit through a room.
    fn push(b: &mut ReadBuf, bytes: &[u8]) {
        b.room(bytes.len())[..].copy_from_slice(bytes);
        b.take_parts(std::iter::once(0..bytes.len()));
    }

    #[test]
    fn a_reused_buffer_keeps_its_bytes_and_only_growth_zeroes() {
        let mut b = ReadBuf::with_capacity(8);
        // Growth zeroes ...
        assert!(b.room(ALIGN).iter().all(|&x| x == 0));
        push(&mut b, b"abcd");
        b.clear();
        assert!(b.bytes().is_empty());
        // ... a room within the mark hands back the old bytes (to be read over).
        assert_eq!(&b.room(4)[..], b"abcd");
        push(&mut b, b"xyzzy");
        b.truncate(3);
        assert_eq!(b.bytes(), b"xyz");
        b.truncate(10);
        assert_eq!(b.len(), 3);
        b.bytes_mut().copy_within(1..3, 0);
        assert_eq!(b.bytes(), b"yzz");
        b.fill(1)[0] = b'q';
        assert_eq!(b.bytes(), b"q");
    }

    #[test]
    fn a_filled_block_starts_aligned_in_memory() {
        let mut b = ReadBuf::with_capacity(64);
        for n in [1, 4095, 4096, 10_000, 3] {
            let buf = b.fill(n);
            assert_eq!(buf.len(), n);
            assert_eq!(buf.as_ptr().align_offset(ALIGN), 0);
            buf.fill(7);
            assert_eq!(b.bytes(), vec![7u8; n]);
            assert_eq!(b.bytes().as_ptr().align_offset(ALIGN), 0);
        }
        // A pack starts at the beginning and grows by taking parts of rooms.
        b.clear();
        push(&mut b, b"ab");
        push(&mut b, b"c");
        assert_eq!(b.bytes(), b"abc");
    }

    #[test]
    fn room_is_aligned_and_taking_it_appends_to_the_unit() {
        let mut b = ReadBuf::with_capacity(64);
        // Whatever the unit's end, the room starts aligned; what is taken of it lands
        // right after the unit's bytes.
        let mut want = Vec::new();
        for (i, n) in [3usize, 4096, 1, 8192, 100, 4095].into_iter().enumerate() {
            let room = b.room(n.next_multiple_of(ALIGN));
            assert_eq!(room.as_ptr().align_offset(ALIGN), 0);
            room[..n].fill(i as u8 + 1);
            b.take_parts(std::iter::once(0..n));
            want.extend(std::iter::repeat_n(i as u8 + 1, n));
            assert_eq!(b.bytes(), &want[..]);
        }
        // A room not taken changes nothing.
        b.room(ALIGN).fill(0xee);
        assert_eq!(b.bytes(), &want[..]);
    }

    #[test]
    fn parts_of_a_room_are_taken_in_order_and_gaps_left_out() {
        let mut b = ReadBuf::with_capacity(64);
        push(&mut b, b"start");
        // Three slots of a page: the first holds 3 bytes, the second is skipped (a file
        // that failed), the third is a whole page.
        let room = b.room(3 * ALIGN);
        room[..3].copy_from_slice(b"abc");
        room[ALIGN..2 * ALIGN].fill(b'x');
        room[2 * ALIGN..].fill(b'z');
        b.take_parts([0..3, 2 * ALIGN..3 * ALIGN]);
        let mut want = b"startabc".to_vec();
        want.extend(std::iter::repeat_n(b'z', ALIGN));
        assert_eq!(b.bytes(), &want[..]);
        // Nothing taken changes nothing.
        b.room(ALIGN).fill(0);
        b.take_parts([]);
        assert_eq!(b.bytes(), &want[..]);
    }

    #[test]
    fn a_cleared_buffer_starts_its_next_unit_aligned_once_it_has_grown() {
        let mut b = ReadBuf::with_capacity(0);
        b.clear();
        assert!(b.bytes().is_empty());
        b.fill(3 * ALIGN);
        b.clear();
        // Whole pages appended one after another stay aligned: no move is needed.
        for _ in 0..2 {
            let room = b.room(ALIGN);
            let at = room.as_ptr();
            b.take_parts(std::iter::once(0..ALIGN));
            let end = b.bytes().as_ptr_range().end;
            assert_eq!(end.wrapping_sub(ALIGN), at, "taken where it was read");
        }
        assert_eq!(b.bytes().as_ptr().align_offset(ALIGN), 0);
    }

    #[test]
    fn swapping_hands_over_the_unit_and_starts_empty() {
        let mut b = ReadBuf::default();
        push(&mut b, b"xyz");
        let (old, range) = b.swap(b"spare bytes".to_vec());
        assert_eq!(&old[range], b"xyz");
        assert_eq!(b.len(), 0);
        push(&mut b, b"spare");
        let (old, range) = b.swap(Vec::new());
        assert_eq!(&old[range], b"spare");
    }
}
