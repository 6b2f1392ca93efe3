//! [`FrameReader`], the one adapter that turns a byte stream into checked frames: it checks
//! each header's tag (`seal`) before it waits for the payload, and a control payload's MAC
//! before it hands the message on.
//!
//! Not here: the envelope's layout (`frame`), what a payload means (`data`, `msg`).

use std::io::{self, Read};
use std::ops::Range;

use super::frame::{Frame, FrameHeader, FrameKind, ReadError, FRAME_HEADER_LEN};
use super::seal::Opener;

/// Turns a byte stream into checked frames. It keeps partial frames across read timeouts,
/// so a caller may poll a stream with a timeout without losing bytes.
pub struct FrameReader {
    opener: Opener,
    /// The header of the frame being read, already checked, and its sequence number.
    pending: Option<(FrameHeader, u64)>,
    buf: Vec<u8>,
    start: usize,
    end: usize,
    consumed: usize,
    /// Where a frame that starts a buffer is placed (see [`FrameReader::align_payloads`]):
    /// its payload's byte `.0` at an address that is a multiple of `.1`.
    align: Option<(usize, usize)>,
}

const READ_CHUNK: usize = 256 << 10;

impl FrameReader {
    /// A reader checking frames with `opener` (see `seal`).
    pub fn new(opener: Opener) -> FrameReader {
        FrameReader {
            opener,
            pending: None,
            buf: Vec::new(),
            start: 0,
            end: 0,
            consumed: 0,
            align: None,
        }
    }

    /// Places every frame that starts a buffer (one taken with [`FrameReader::take_frame`],
    /// or moved to make room) so that its payload's byte `at` lies at an address that is
    /// a multiple of `align` (a power of two). A stream receiver passes where a raw
    /// block's bytes start: the block is then written with `O_DIRECT` from where it was
    /// read, without a copy into an aligned buffer. Frames behind another in the same
    /// buffer stay where they are read.
    pub fn align_payloads(&mut self, at: usize, align: usize) {
        debug_assert!(align.is_power_of_two());
        self.align = Some((FRAME_HEADER_LEN + at, align));
    }

    /// Where in `buf` a frame starts for its byte `skip` to be aligned (0 unaligned).
    fn home(&self, buf: &[u8]) -> usize {
        match self.align {
            Some((skip, align)) => {
                let addr = buf.as_ptr() as usize + skip;
                (align - addr % align) % align
            }
            None => 0,
        }
    }

    /// Reads until one whole frame is buffered and checked, and returns it; `Ok(None)` on
    /// a clean end of stream between frames. A control frame's payload is the message,
    /// its MAC checked and removed. The frame borrows the reader until the next call.
    pub fn read_frame<R: Read>(&mut self, r: &mut R) -> Result<Option<Frame<'_>>, ReadError> {
        self.start += std::mem::take(&mut self.consumed);
        loop {
            let avail = self.end - self.start;
            if self.pending.is_none() && avail >= FRAME_HEADER_LEN {
                let h = self.header()?;
                self.pending = Some(self.opener.open_header(&h)?);
            }
            let need = match self.pending {
                Some((h, seq)) if avail >= FRAME_HEADER_LEN + h.len => {
                    self.pending = None;
                    self.consumed = FRAME_HEADER_LEN + h.len;
                    let head = self.header()?;
                    let body = self.start + FRAME_HEADER_LEN;
                    let payload = &self.buf[body..body + h.len];
                    let payload = match h.kind {
                        FrameKind::Control => self.opener.open_control(seq, &head, payload)?,
                        _ => payload,
                    };
                    return Ok(Some(Frame {
                        kind: h.kind,
                        payload,
                    }));
                }
                Some((h, _)) => FRAME_HEADER_LEN + h.len,
                None => FRAME_HEADER_LEN,
            };
            self.make_room(need);
            let n = loop {
                match r.read(&mut self.buf[self.end..]) {
                    Ok(n) => break n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(e.into()),
                }
            };
            if n == 0 {
                return if self.start == self.end {
                    Ok(None)
                } else {
                    Err(ReadError::Truncated)
                };
            }
            self.end += n;
        }
    }

    /// Hands over the buffer holding the frame [`FrameReader::read_frame`] returned last,
    /// with where its payload lies, and goes on in `fresh` (bytes read ahead move there).
    /// Lets a caller keep a large payload without copying it; `None` when there is no
    /// such frame (none read yet, or already taken).
    pub fn take_frame(&mut self, mut fresh: Vec<u8>) -> Option<(Vec<u8>, Range<usize>)> {
        if self.consumed < FRAME_HEADER_LEN {
            return None;
        }
        let frame_end = self.start + self.consumed;
        let payload = self.start + FRAME_HEADER_LEN..frame_end;
        let ahead = self.end - frame_end;
        let slack = self.align.map_or(0, |(_, a)| a);
        if fresh.capacity() < ahead + slack {
            // Growing moves the memory: where the frame goes is known only after.
            fresh.reserve_exact(ahead + slack - fresh.len());
        }
        let home = self.home(&fresh);
        if fresh.len() < home + ahead {
            fresh.resize(home + ahead, 0);
        }
        fresh[home..home + ahead].copy_from_slice(&self.buf[frame_end..self.end]);
        let old = std::mem::replace(&mut self.buf, fresh);
        self.start = home;
        self.end = home + ahead;
        self.consumed = 0;
        Some((old, payload))
    }

    /// The buffered header at `start` (the caller made sure it is there).
    fn header(&self) -> Result<[u8; FRAME_HEADER_LEN], ReadError> {
        self.buf[self.start..self.end]
            .first_chunk::<FRAME_HEADER_LEN>()
            .copied()
            .ok_or(ReadError::Truncated)
    }

    /// Ensures the buffer can hold `need` bytes from `start`, with read-ahead room.
    fn make_room(&mut self, need: usize) {
        if let Some((_, align)) = self.align {
            return self.make_room_aligned(need, align);
        }
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
        let want = need.max(READ_CHUNK);
        if self.buf.len() - self.start < want {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if self.buf.len() < want {
            self.buf.resize(want, 0);
        }
        if self.end == self.buf.len() {
            // A full frame is buffered is impossible here (decode said incomplete), so
            // `need > end`; the resize above made room.
            self.buf.resize(self.buf.len() + READ_CHUNK, 0);
        }
    }

    /// [`FrameReader::make_room`] that puts the frame it moves at its aligned place.
    fn make_room_aligned(&mut self, need: usize, align: usize) {
        let want = need.max(READ_CHUNK);
        if self.start == self.end {
            // Nothing buffered: the next frame starts at its aligned place.
            let home = self.home(&self.buf);
            if self.buf.len() >= home + want {
                (self.start, self.end) = (home, home);
                return;
            }
            (self.start, self.end) = (0, 0);
        } else if self.buf.len() - self.start >= want {
            return;
        }
        let len = self.end - self.start;
        if self.buf.capacity() < want + align {
            // Keep only the frame's bytes, at the front, for the reallocation to copy.
            self.buf.copy_within(self.start..self.end, 0);
            self.buf.truncate(len);
            (self.start, self.end) = (0, len);
            self.buf.reserve_exact(want + align - self.buf.len());
        }
        let home = self.home(&self.buf);
        if self.buf.len() < home + want {
            // Within the capacity: the memory (and so `home`) stays where it is.
            self.buf.resize(home + want, 0);
        }
        self.buf.copy_within(self.start..self.end, home);
        (self.start, self.end) = (home, home + len);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{ProtocolError, Sealer, MAX_CONTROL_LEN};
    use proptest::prelude::*;

    const K: [u8; 32] = [4; 32];

    fn reader() -> FrameReader {
        FrameReader::new(Opener::new(K, false))
    }

    /// One frame of `kind` as the dialer's `n`th frame would be sealed.
    fn frame(s: &mut Sealer, out: &mut Vec<u8>, kind: FrameKind, payload: &[u8]) {
        match kind {
            FrameKind::Control => s.control(payload, out),
            _ => {
                out.extend_from_slice(&s.header(kind, payload.len()));
                out.extend_from_slice(payload);
            }
        }
    }

    #[test]
    fn oversized_header_rejected_before_allocation() {
        let h = Sealer::new(K, true).header(FrameKind::Control, MAX_CONTROL_LEN + 1);
        let mut src: &[u8] = &h;
        assert!(matches!(
            reader().read_frame(&mut src),
            Err(ReadError::Protocol(ProtocolError::TooLong { .. }))
        ));
    }

    /// A reader that hands out bytes a few at a time and times out in between.
    struct Trickle {
        data: Vec<u8>,
        pos: usize,
        step: usize,
        tick: bool,
    }

    impl Read for Trickle {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            self.tick = !self.tick;
            if self.tick {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            let n = self.step.min(buf.len()).min(self.data.len() - self.pos);
            buf[..n].copy_from_slice(&self.data[self.pos..self.pos + n]);
            self.pos += n;
            Ok(n)
        }
    }

    #[test]
    fn a_taken_frame_keeps_its_payload_and_the_reader_goes_on() {
        let mut stream = Vec::new();
        let mut s = Sealer::new(K, true);
        let payloads: Vec<Vec<u8>> = (0..6u8)
            .map(|i| vec![i; 1000 + 70_000 * i as usize])
            .collect();
        for p in &payloads {
            frame(&mut s, &mut stream, FrameKind::Data, p);
        }
        let mut src: &[u8] = &stream;
        let mut r = reader();
        assert!(r.take_frame(Vec::new()).is_none(), "nothing read yet");
        for (i, want) in payloads.iter().enumerate() {
            let f = r.read_frame(&mut src).unwrap().unwrap();
            assert_eq!(f.payload, &want[..]);
            if i % 2 == 0 {
                // A small fresh buffer: the reader grows it as it needs.
                let (buf, range) = r.take_frame(vec![9; 10]).unwrap();
                assert_eq!(&buf[range], &want[..]);
                assert!(r.take_frame(Vec::new()).is_none(), "taken once");
            }
        }
        assert!(r.read_frame(&mut src).unwrap().is_none());
    }

    #[test]
    fn payloads_placed_aligned_after_a_taken_frame_and_when_moved() {
        // Where a raw stream block's bytes start in its payload (`body_at(1)`).
        const AT: usize = 64;
        const ALIGN: usize = 4096;
        let mut stream = Vec::new();
        let mut s = Sealer::new(K, true);
        let payloads: Vec<Vec<u8>> = (0..12u8)
            .map(|i| {
                // Large ones (as raw blocks are) and small ones between them.
                let len = if i % 3 == 2 {
                    100 + i as usize
                } else {
                    300_000 + 4099 * i as usize
                };
                (0..len).map(|k| (k as u8) ^ i).collect()
            })
            .collect();
        for p in &payloads {
            frame(&mut s, &mut stream, FrameKind::Data, p);
        }
        for step in [7777, 64 << 10, 1 << 20, usize::MAX] {
            let mut t = Trickle {
                data: stream.clone(),
                pos: 0,
                step,
                tick: false,
            };
            let mut r = reader();
            r.align_payloads(AT, ALIGN);
            // Taken buffers come back as fresh ones, as a window recycles them.
            let mut spare: Vec<Vec<u8>> = vec![Vec::new(), vec![1; 5], Vec::with_capacity(400_000)];
            let mut taken_last = true;
            for (i, want) in payloads.iter().enumerate() {
                let got = loop {
                    match r.read_frame(&mut t) {
                        Ok(Some(f)) => break f.payload == &want[..],
                        Ok(None) => panic!("frame {i}: the end"),
                        Err(e) if e.is_timeout() => continue,
                        Err(e) => panic!("frame {i}: {e}"),
                    }
                };
                assert!(got, "frame {i} (step {step})");
                let take = want.len() > 1000;
                if take {
                    let (buf, range) = r.take_frame(spare.pop().unwrap_or_default()).unwrap();
                    assert!(buf[range.clone()] == want[..], "frame {i} (step {step})");
                    if taken_last {
                        let addr = buf[range.start + AT..].as_ptr() as usize;
                        assert_eq!(addr % ALIGN, 0, "frame {i} (step {step}) not aligned");
                    }
                    spare.insert(0, buf);
                }
                taken_last = take;
            }
            let end = loop {
                match r.read_frame(&mut t) {
                    Err(e) if e.is_timeout() => continue,
                    other => break matches!(other, Ok(None)),
                }
            };
            assert!(end, "step {step}: the end");
        }
    }

    #[test]
    fn reader_survives_timeouts_mid_frame() {
        let mut stream = Vec::new();
        let mut s = Sealer::new(K, true);
        for i in 0..50u8 {
            frame(
                &mut s,
                &mut stream,
                FrameKind::Control,
                &vec![i; i as usize * 100],
            );
        }
        frame(&mut s, &mut stream, FrameKind::End, &[]);
        let mut t = Trickle {
            data: stream,
            pos: 0,
            step: 37,
            tick: false,
        };
        let mut r = reader();
        let mut got = Vec::new();
        loop {
            match r.read_frame(&mut t) {
                Ok(Some(f)) => got.push((f.kind, f.payload.to_vec())),
                Ok(None) => break,
                Err(e) if e.is_timeout() => continue,
                Err(e) => panic!("{e}"),
            }
        }
        assert_eq!(got.len(), 51);
        for (i, (kind, p)) in got.iter().take(50).enumerate() {
            assert_eq!(*kind, FrameKind::Control);
            assert_eq!(p, &vec![i as u8; i * 100]);
        }
        assert_eq!(got[50].0, FrameKind::End);
    }

    #[test]
    fn truncated_stream_is_an_error() {
        let mut stream = Vec::new();
        frame(
            &mut Sealer::new(K, true),
            &mut stream,
            FrameKind::Control,
            b"hello",
        );
        stream.pop();
        let mut src: &[u8] = &stream;
        assert!(matches!(
            reader().read_frame(&mut src),
            Err(ReadError::Truncated)
        ));
    }

    #[test]
    fn any_flipped_bit_is_caught() {
        let mut stream = Vec::new();
        let mut s = Sealer::new(K, true);
        frame(&mut s, &mut stream, FrameKind::Control, b"start");
        frame(&mut s, &mut stream, FrameKind::End, &[]);
        for bit in 0..stream.len() * 8 {
            let mut bad = stream.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            let mut src: &[u8] = &bad;
            let mut r = reader();
            let first = r
                .read_frame(&mut src)
                .map(|f| f.map(|f| f.payload.to_vec()));
            let ok = matches!(&first, Ok(Some(p)) if p == b"start")
                && matches!(r.read_frame(&mut src), Ok(Some(f)) if f.kind == FrameKind::End);
            assert!(!ok, "bit {bit} went unnoticed");
        }
    }

    proptest! {
        #[test]
        fn control_frames_split_anywhere(payloads in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..300), 1..10), step in 1usize..64) {
            let mut stream = Vec::new();
            let mut s = Sealer::new(K, true);
            for p in &payloads {
                frame(&mut s, &mut stream, FrameKind::Control, p);
            }
            let mut t = Trickle { data: stream, pos: 0, step, tick: false };
            let mut r = reader();
            let mut got = Vec::new();
            loop {
                match r.read_frame(&mut t) {
                    Ok(Some(f)) => got.push(f.payload.to_vec()),
                    Ok(None) => break,
                    Err(e) if e.is_timeout() => continue,
                    Err(e) => panic!("{e}"),
                }
            }
            prop_assert_eq!(got, payloads);
        }

        #[test]
        fn any_bytes_read_or_error(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let mut src: &[u8] = &bytes;
            let mut r = reader();
            for _ in 0..bytes.len() + 1 {
                match r.read_frame(&mut src) {
                    Ok(Some(_)) => continue,
                    _ => break,
                }
            }
        }
    }
}
