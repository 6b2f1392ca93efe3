//! Frame layer: `decode_frame` on a buffer, `FrameReader` over a reader that hands out
//! the input in fuzzer-chosen chunk sizes, `DataHeader::parse` (and the segment table)
//! on every data payload, and the codec's decompress-and-verify step on it.
#![no_main]

use std::cell::RefCell;
use std::io::{self, Read};

use haul::codec::Decoder;
use haul::protocol::{decode_frame, DataHeader, FrameKind, FrameReader, FRAME_HEADER_LEN};
use libfuzzer_sys::fuzz_target;

/// Hands out the bytes in chunks whose sizes come from the input itself, so partial
/// headers and payloads split across reads are exercised.
struct Chunked<'a> {
    data: &'a [u8],
    sizes: &'a [u8],
    i: usize,
}

impl Read for Chunked<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let want = match self.sizes.get(self.i % self.sizes.len().max(1)) {
            Some(&0) => return Err(io::Error::new(io::ErrorKind::WouldBlock, "tick")),
            Some(&s) => usize::from(s),
            None => buf.len(),
        };
        self.i += 1;
        let n = want.min(buf.len()).min(self.data.len());
        buf[..n].copy_from_slice(&self.data[..n]);
        self.data = &self.data[n..];
        Ok(n)
    }
}

thread_local! {
    /// One decoder for the whole run, as a receiver keeps one per stream: its buffer grows
    /// to the largest unit once instead of being zeroed again for every input.
    static DEC: RefCell<Decoder> = RefCell::new(Decoder::new([0u8; 32]));
}

fn check_data(payload: &[u8]) {
    if let Ok(h) = DataHeader::parse(payload) {
        let mut sum = 0u64;
        for s in h.segments() {
            assert!(s.len > 0);
            if !s.keep {
                sum += u64::from(s.len);
            }
        }
        assert_eq!(sum, u64::from(h.raw_len), "segments must add up to raw_len");
        assert!(h.body.len() <= h.raw_len as usize);
        DEC.with_borrow_mut(|dec| {
            if let Ok(v) = dec.decode(&h) {
                assert_eq!(v.bytes().len(), h.raw_len as usize);
            }
        });
    }
}

fuzz_target!(|data: &[u8]| {
    // 1. decode_frame over the whole buffer, frame after frame.
    let mut rest = data;
    while let Ok(Some((f, used))) = decode_frame(rest) {
        assert!(used >= FRAME_HEADER_LEN && used <= rest.len());
        assert_eq!(used, FRAME_HEADER_LEN + f.payload.len());
        if f.kind == FrameKind::Data {
            check_data(f.payload);
        }
        rest = &rest[used..];
    }
    // 2. The same bytes through FrameReader; the first byte picks how many leading bytes
    // are read sizes (0 = a timeout tick, which must lose nothing).
    let (sizes, stream) = match data.split_first() {
        Some((&n, tail)) => tail.split_at(usize::from(n % 8).min(tail.len())),
        None => (&[][..], data),
    };
    let mut r = Chunked {
        data: stream,
        sizes,
        i: 0,
    };
    let mut reader = FrameReader::new();
    let mut ticks = 0;
    loop {
        match reader.read_frame(&mut r) {
            Ok(Some(f)) => {
                if f.kind == FrameKind::Data {
                    check_data(f.payload);
                }
            }
            Ok(None) => break,
            Err(e) if e.is_timeout() && ticks < 64 => ticks += 1,
            Err(_) => break,
        }
    }
    // 3. The raw bytes as a data payload.
    check_data(data);
});
