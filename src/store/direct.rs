//! Writing a large file's units with `O_DIRECT` (the default; `--keep-cache` writes
//! through the page cache as before).
//!
//! Measured on a virtual disk, a direct write of 4 MiB pieces ran 2–4× faster than the
//! same bytes written into the page cache and then flushed by writeback (which is what
//! the default did to leave the page cache as it found it: write, wait for the range's
//! writeback, drop it). A direct write also brings nothing into the cache to drop.
//!
//! `O_DIRECT` needs the file offset, the length and the buffer's address aligned (to the
//! device's logical block; [`ALIGN`] covers every common one). So a range is split
//! ([`split`]): the aligned body is written directly, from the unit's own bytes when
//! they happen to be aligned, else copied through one aligned buffer per writer
//! ([`Bounce`]); the unaligned head and tail (the end of the file, an odd segment of a
//! sparse file) are written buffered and dropped from the cache as before.
//!
//! The flag is set on the writer's own descriptor with `fcntl(F_SETFL)` just for the
//! body and cleared again, so the descriptor always leaves here buffered (the finisher,
//! the journal and the fallbacks never see it direct). A file system that refuses
//! `O_DIRECT` (`EINVAL`/`EOPNOTSUPP`: tmpfs before Linux 6.6, some FUSE and NFS mounts)
//! is remembered by device number ([`Refused`]) and written buffered from then on.
//!
//! Durability does not change: `O_DIRECT` does not flush the device's cache nor commit
//! the allocation metadata, so the fdatasync of the journal and the fsync before the
//! rename stay exactly where they were.

use std::collections::HashSet;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::Mutex;

use rustix::fs::{fcntl_getfl, fcntl_setfl, OFlags};

/// Alignment of direct writes: offset, length and buffer address.
pub(crate) const ALIGN: usize = 4096;
// The decoder places units at this alignment for these writes to take them as they lie.
const _: () = assert!(ALIGN == crate::codec::PAGE);
/// Size of a writer's bounce buffer (one unit: a body larger than this is written in
/// several pieces).
const BOUNCE: usize = 4 << 20;

/// The three parts of a range at `offset`, `len` bytes long: `(head, body, tail)`
/// lengths, with the body starting and ending on [`ALIGN`] boundaries (`body` may be 0).
pub(super) fn split(offset: u64, len: usize) -> (usize, usize, usize) {
    let align = ALIGN as u64;
    let end = offset + len as u64;
    let body_start = offset.next_multiple_of(align).min(end);
    let body_end = (end / align * align).max(body_start);
    let head = (body_start - offset) as usize;
    let body = (body_end - body_start) as usize;
    (head, body, len - head - body)
}

/// A buffer whose bytes start on an [`ALIGN`] boundary, for copying unaligned data into
/// before a direct write (safe code: an over-allocated `Vec` and an aligned window).
#[derive(Default)]
pub struct Bounce {
    buf: Vec<u8>,
}

impl Bounce {
    /// The aligned window of `len` bytes (at most [`BOUNCE`]), allocated on first use.
    fn window(&mut self, len: usize) -> &mut [u8] {
        if self.buf.is_empty() {
            self.buf = vec![0u8; BOUNCE + ALIGN];
        }
        let start = self.buf.as_ptr().align_offset(ALIGN);
        &mut self.buf[start..start + len]
    }
}

/// Devices whose file system refused `O_DIRECT` this run.
#[derive(Default)]
pub(crate) struct Refused(Mutex<HashSet<u64>>);

impl Refused {
    pub(crate) fn has(&self, dev: u64) -> bool {
        self.0.lock().map(|s| s.contains(&dev)).unwrap_or(true)
    }

    fn add(&self, dev: u64) {
        if let Ok(mut s) = self.0.lock() {
            s.insert(dev);
        }
    }
}

/// Whether an error of a direct open or write means the file system does not do it.
fn refuses(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EINVAL | libc::EOPNOTSUPP))
}

/// Writes `data` at `offset` of `file` (on device `dev`): the aligned body directly, the
/// rest through `buffered` (which writes a piece through the page cache and drops it).
pub(super) fn write(
    file: &File,
    dev: u64,
    data: &[u8],
    offset: u64,
    refused: &Refused,
    bounce: &mut Bounce,
    buffered: &dyn Fn(&[u8], u64) -> io::Result<()>,
) -> io::Result<()> {
    let direct = |d: &[u8], at: u64| write_direct(file, d, at, bounce);
    write_parts(dev, data, offset, refused, direct, buffered)
}

/// [`write`] with the direct write given (a test makes it fail as a file system would;
/// a stream's sink passes its own, see `receive::pipe::sink`).
pub(crate) fn write_parts(
    dev: u64,
    data: &[u8],
    offset: u64,
    refused: &Refused,
    mut direct: impl FnMut(&[u8], u64) -> io::Result<()>,
    buffered: &dyn Fn(&[u8], u64) -> io::Result<()>,
) -> io::Result<()> {
    let (head, body, _) = split(offset, data.len());
    if body == 0 || refused.has(dev) {
        return buffered(data, offset);
    }
    if head > 0 {
        buffered(&data[..head], offset)?;
    }
    let body_at = offset + head as u64;
    let body_data = &data[head..head + body];
    match direct(body_data, body_at) {
        Ok(()) => {}
        Err(x) if refuses(&x) => {
            refused.add(dev);
            buffered(body_data, body_at)?;
        }
        Err(x) => return Err(x),
    }
    let tail_at = head + body;
    if tail_at < data.len() {
        buffered(&data[tail_at..], offset + tail_at as u64)?;
    }
    Ok(())
}

/// Writes an aligned range with `O_DIRECT` set on `file` for the while.
pub(crate) fn write_direct(
    file: &File,
    data: &[u8],
    offset: u64,
    bounce: &mut Bounce,
) -> io::Result<()> {
    let flags = fcntl_getfl(file)?;
    fcntl_setfl(file, flags | OFlags::DIRECT)?;
    let written = write_aligned(file, data, offset, bounce);
    let restored = fcntl_setfl(file, flags);
    written?;
    restored.map_err(io::Error::from)
}

/// The direct writes themselves: straight from `data` when it is aligned in memory, else
/// in [`BOUNCE`]-sized pieces copied into `bounce`.
fn write_aligned(file: &File, data: &[u8], offset: u64, bounce: &mut Bounce) -> io::Result<()> {
    if data.as_ptr().align_offset(ALIGN) == 0 {
        return file.write_all_at(data, offset);
    }
    let mut done = 0usize;
    for piece in data.chunks(BOUNCE) {
        let window = bounce.window(piece.len());
        window.copy_from_slice(piece);
        file.write_all_at(window, offset + done as u64)?;
        done += piece.len();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    #[test]
    fn a_range_splits_into_an_aligned_body_and_buffered_ends() {
        assert_eq!(split(0, 0), (0, 0, 0));
        assert_eq!(split(0, 1), (0, 0, 1));
        assert_eq!(split(0, 4095), (0, 0, 4095));
        assert_eq!(split(0, 4096), (0, 4096, 0));
        assert_eq!(split(0, 4097), (0, 4096, 1));
        assert_eq!(split(4 << 20, (4 << 20) - 1), (0, (4 << 20) - 4096, 4095));
        assert_eq!(split(100, 5000), (3996, 0, 1004));
        assert_eq!(split(100, 9000), (3996, 4096, 908));
        assert_eq!(split(4095, 2), (1, 0, 1));
        assert_eq!(split(5000, 10), (10, 0, 0));
        assert_eq!(split(8192, 8192), (0, 8192, 0));
    }

    #[test]
    fn the_bounce_window_is_aligned() {
        let mut b = Bounce::default();
        for len in [1, ALIGN, BOUNCE] {
            let w = b.window(len);
            assert_eq!(w.len(), len);
            assert_eq!(w.as_ptr().align_offset(ALIGN), 0);
        }
    }

    /// Writes `data` at `offset` of a fresh file of `size` zero bytes, directly where it
    /// can, and returns the file's bytes and the buffered pieces `(offset, len)`.
    fn roundtrip(
        dir: &std::path::Path,
        size: u64,
        data: &[u8],
        offset: u64,
        refused: &Refused,
        dev: u64,
    ) -> (Vec<u8>, Vec<(u64, usize)>) {
        let path = dir.join("f");
        let f = File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        f.set_len(size).unwrap();
        let pieces = RefCell::new(Vec::new());
        let buffered = |d: &[u8], at: u64| {
            pieces.borrow_mut().push((at, d.len()));
            f.write_all_at(d, at)
        };
        let mut bounce = Bounce::default();
        write(&f, dev, data, offset, refused, &mut bounce, &buffered).unwrap();
        // The descriptor leaves buffered.
        assert!(!fcntl_getfl(&f).unwrap().contains(OFlags::DIRECT));
        (std::fs::read(&path).unwrap(), pieces.into_inner())
    }

    fn pattern(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 7 + i / 4096) as u8).collect()
    }

    #[test]
    fn a_write_at_an_unaligned_offset_lands_byte_exact() {
        let dir = tempfile::tempdir().unwrap();
        // Unaligned in memory too: a slice one byte into a buffer.
        let owned = pattern(20_001);
        let data = &owned[1..];
        let offset = 1234u64;
        let size = 40_000u64;
        let (got, pieces) = roundtrip(dir.path(), size, data, offset, &Refused::default(), 1);
        let mut want = vec![0u8; size as usize];
        want[offset as usize..offset as usize + data.len()].copy_from_slice(data);
        assert_eq!(got, want);
        // Head and tail went buffered; the body (16 KiB) directly unless refused here.
        let (head, body, tail) = split(offset, data.len());
        assert_eq!((head, body), (4096 - 1234, 16384));
        let ends = [(offset, head), (offset + (head + body) as u64, tail)];
        assert!(pieces == ends || pieces.len() == 3, "{pieces:?}");
    }

    #[test]
    fn a_refused_device_is_written_buffered() {
        let dir = tempfile::tempdir().unwrap();
        let refused = Refused::default();
        refused.add(9);
        let data = pattern(3 * 4096 + 5);
        let (got, pieces) = roundtrip(dir.path(), data.len() as u64, &data, 0, &refused, 9);
        assert_eq!(got, data);
        assert_eq!(pieces, [(0, data.len())]);
    }

    /// A file system that refuses O_DIRECT (tmpfs before Linux 6.6, some FUSE and NFS
    /// mounts) fails the first direct write with EINVAL: that body is written buffered,
    /// the device is remembered, and its later writes go buffered without trying.
    #[test]
    fn einval_on_the_first_direct_write_falls_back_and_is_remembered() {
        let refused = Refused::default();
        let pieces = RefCell::new(Vec::new());
        let buffered = |d: &[u8], at: u64| {
            pieces.borrow_mut().push((at, d.len()));
            Ok(())
        };
        let mut tries = 0;
        let einval = |_: &[u8], _: u64| {
            tries += 1;
            Err(io::Error::from_raw_os_error(libc::EINVAL))
        };
        let data = pattern(3 * 4096 + 5);
        write_parts(7, &data, 0, &refused, einval, &buffered).unwrap();
        assert_eq!(tries, 1);
        assert!(refused.has(7) && !refused.has(8));
        assert_eq!(*pieces.borrow(), [(0, 3 * 4096), (3 * 4096, 5)]);
        let never = |_: &[u8], _: u64| -> io::Result<()> { panic!("tried direct again") };
        write_parts(7, &data, 4096, &refused, never, &buffered).unwrap();
        assert_eq!(pieces.borrow()[2], (4096, data.len()));
        // Any other error is the write's own and is reported.
        let eio = |_: &[u8], _: u64| Err(io::Error::from_raw_os_error(libc::EIO));
        let err = write_parts(8, &data, 0, &refused, eio, &buffered).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EIO));
        assert!(!refused.has(8));
    }
}
