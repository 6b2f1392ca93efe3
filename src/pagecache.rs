//! Leaving the page cache as haul found it (the default; `--keep-cache` turns it off).
//!
//! Reading a 2 TB data directory must not evict a database's working set, and writing it
//! must not fill the receiver's memory. So:
//!
//! - **Reading:** [`Reader::before`] notes which pages of a range are cached before haul
//!   reads it, [`Reader::after`] drops (`POSIX_FADV_DONTNEED`) the runs of pages that
//!   were not. Residency comes from `cachestat(2)` where the range is cached wholly or
//!   not at all (one call; see `cachestat`), else from `mincore(2)` on a read-only shared
//!   mapping of the range: `mincore` never touches the pages, so a file truncated
//!   meanwhile cannot raise SIGBUS. Source files are read with `POSIX_FADV_RANDOM` ([`Reader::open`]), so the
//!   kernel reads what haul asks for and no speculative readahead beyond it, which a
//!   neighbouring range's `before` would otherwise take for pages cached before. One
//!   readahead remains: reading a page that another reader's readahead marked starts the
//!   next window even so, and each window marks a page of the one after (a chain that
//!   would run ahead of haul to the end of the file). So `before` also notes the
//!   [`LOOKAHEAD`] past the range and `after` drops what came in there too, which ends
//!   the chain; the pages of that window may be read twice, once. Where nothing around
//!   the range was cached there is no marked page and only the range itself is dropped
//!   (the lookahead would hold the blocks the other streams are reading). Streams
//!   reading blocks of one file share what they first saw of it ([`Seen`]): a page one
//!   stream's readahead brought in is not taken for cached by the stream that reads it.
//! - **Writing:** [`drop_written`] waits for a written range's writeback and drops it.
//!   The pages are new data that nobody else had cached.
//!
//! Granularity is the page. What it cannot see: since Linux 5.2 `mincore` reports every
//! page of a file resident unless the caller owns the file or may write it (a side
//! channel closed); then nothing read is dropped, which is the polite side to err on.
//! Every call here is advice: errors are ignored, data is never affected.

use std::fs::File;
use std::num::NonZeroU64;
use std::os::fd::AsRawFd;

use rustix::fs::{fadvise, Advice};

mod cachestat;
mod seen;

pub use seen::Seen;

/// How far past a range read its readahead may reach (the kernel's window is at most the
/// device's `read_ahead_kb`: 128 KiB by default, 8 MiB on some virtual disks).
pub const LOOKAHEAD: u64 = 16 << 20;

/// Page residency of the range being read, noted before reading it.
#[derive(Debug)]
pub struct Reader<'a> {
    /// Do nothing (`--keep-cache`).
    keep: bool,
    /// What the streams reading the same files saw first, and the file open now.
    shared: Option<(&'a Seen, Option<u64>)>,
    /// Page-aligned start of the noted range.
    start: u64,
    /// One byte per page: bit 0 set when the page was cached before.
    resident: Vec<u8>,
    /// How many of `resident`'s pages are the range's own (the rest is lookahead).
    own: usize,
}

impl<'a> Reader<'a> {
    /// A reader that drops what it brings in, or (`keep`) leaves the cache alone.
    pub fn new(keep: bool) -> Reader<'static> {
        Reader {
            keep,
            shared: None,
            start: 0,
            resident: Vec::new(),
            own: 0,
        }
    }

    /// A reader of one of several streams reading blocks of the same files: they share
    /// what they saw first in `seen` (see [`Seen`]).
    pub fn shared(keep: bool, seen: &'a Seen) -> Reader<'a> {
        Reader {
            keep,
            shared: (!keep).then_some((seen, None)),
            start: 0,
            resident: Vec::new(),
            own: 0,
        }
    }

    /// Advises the kernel not to read ahead of what haul asks for on `file` (a descriptor
    /// of this run's own: the advice belongs to the open file, not to the inode), and
    /// notes that this reader now reads file `id` (of the transfer's manifest).
    pub fn open(&mut self, file: &File, id: u64) {
        if self.keep {
            return;
        }
        let _ = fadvise(file, 0, None, Advice::Random);
        self.close();
        if let Some((seen, open)) = &mut self.shared {
            seen.enter(id);
            *open = Some(id);
        }
    }

    /// This reader is done with the file it opened last.
    pub fn close(&mut self) {
        if let Some((seen, open)) = &mut self.shared {
            if let Some(id) = open.take() {
                seen.leave(id);
            }
        }
    }

    /// Notes which pages of `[offset, offset + len)` of `file` (of `size` bytes) and of
    /// the [`LOOKAHEAD`] after it are cached now.
    pub fn before(&mut self, file: &File, offset: u64, len: u64, size: u64) {
        self.resident.clear();
        if self.keep || len == 0 {
            return;
        }
        let page = page_size();
        self.start = offset - offset % page;
        let end = (offset + len).max(size.min(offset + len + LOOKAHEAD));
        let span = end - self.start;
        let pages = span.div_ceil(page) as usize;
        self.own = (offset + len - self.start).div_ceil(page) as usize;
        self.resident.resize(pages, 0);
        match cachestat::cached_pages(file, self.start, pages as u64 * page) {
            Some(0) => {}
            Some(n) if n >= pages as u64 => self.resident.fill(1),
            // Partly cached, or unknown to cachestat: which pages, from mincore.
            _ => self.note_pages(file, page),
        }
        if let Some((seen, Some(id))) = self.shared {
            seen.merge(id, self.start / page, &mut self.resident);
        }
        // Nothing cached around: no page another reader's readahead marked, so no chain
        // to end. Keep to the range itself then, or the lookahead would drop the blocks
        // other streams are reading right now and make them read them again.
        if self.resident.iter().all(|r| r & 1 == 0) {
            self.resident.truncate(self.own);
        }
    }

    /// Whether this reader leaves the cache alone (`--keep-cache`).
    pub fn keeps(&self) -> bool {
        self.keep
    }

    /// Whether no page of the range noted by [`Reader::before`] was cached (false when
    /// nothing was noted: `--keep-cache`, an empty range). Such a range can be read
    /// with `O_DIRECT`: there is nothing cached to read it from, and nothing is then
    /// brought in to drop again.
    pub fn cold(&self) -> bool {
        let own = self.own.min(self.resident.len());
        own > 0 && self.resident[..own].iter().all(|r| r & 1 == 0)
    }

    /// Forgets the range noted by [`Reader::before`] without dropping anything (it was
    /// read with `O_DIRECT`: nothing was brought in).
    pub fn forget(&mut self) {
        self.resident.clear();
    }

    /// Fills the noted range's residency page by page (`mincore`).
    fn note_pages(&mut self, file: &File, page: u64) {
        let len = self.resident.len() as u64 * page;
        if !mincore(file, self.start, len, &mut self.resident) {
            // Unknown: count every page as cached, so nothing is dropped.
            self.resident.fill(1);
        }
    }

    /// Drops the pages of the range noted by [`Reader::before`] that were not cached then.
    pub fn after(&mut self, file: &File) {
        let page = page_size();
        let mut i = 0;
        while i < self.resident.len() {
            if self.resident[i] & 1 != 0 {
                i += 1;
                continue;
            }
            let run = self.resident[i..]
                .iter()
                .take_while(|r| *r & 1 == 0)
                .count();
            let at = self.start + i as u64 * page;
            let _ = fadvise(
                file,
                at,
                NonZeroU64::new(run as u64 * page),
                Advice::DontNeed,
            );
            i += run;
        }
        self.resident.clear();
    }
}

impl Drop for Reader<'_> {
    fn drop(&mut self) {
        self.close();
    }
}

/// The share (0 to 1) of the pages of `[offset, offset + len)` of `file` that are cached;
/// 0 when it cannot be learned.
pub fn cached_share(file: &File, offset: u64, len: u64) -> f64 {
    let mut r = Reader::new(false);
    r.before(file, offset, len, 0);
    if r.resident.is_empty() {
        return 0.0;
    }
    let n = r.resident.iter().filter(|b| *b & 1 != 0).count();
    n as f64 / r.resident.len() as f64
}

/// Waits until `[offset, offset + len)` of `file` is written back, then drops its pages
/// from the cache (written data nobody else had cached). Costs the writing thread the
/// wait for its own range; the file's fsync afterwards is then short.
pub fn drop_written(file: &File, offset: u64, len: u64) {
    if len == 0 {
        return;
    }
    sync_range(
        file,
        offset,
        len,
        libc::SYNC_FILE_RANGE_WAIT_BEFORE
            | libc::SYNC_FILE_RANGE_WRITE
            | libc::SYNC_FILE_RANGE_WAIT_AFTER,
    );
    let _ = fadvise(file, offset, NonZeroU64::new(len), Advice::DontNeed);
}

/// Drops every clean cached page of `file` (after its fsync: all of them).
pub fn drop_all(file: &File) {
    let _ = fadvise(file, 0, None, Advice::DontNeed);
}

/// Starts (`SYNC_FILE_RANGE_WRITE`) or waits for writeback of a range.
pub fn sync_range(file: &File, offset: u64, len: u64, flags: libc::c_uint) {
    // Hand-written because neither rustix nor std wraps sync_file_range.
    // SAFETY: sync_file_range only reads its integer arguments; the descriptor is valid
    // for the duration of the call because `file` is borrowed. Errors are advisory.
    unsafe {
        libc::sync_file_range(
            file.as_raw_fd(),
            offset as libc::off64_t,
            len as libc::off64_t,
            flags,
        );
    }
}

fn page_size() -> u64 {
    rustix::param::page_size() as u64
}

/// Fills `vec` (one byte per page) with the residency of `[offset, offset + len)`;
/// `false` when it cannot be learned (a file system without mmap, an unaligned offset).
fn mincore(file: &File, offset: u64, len: u64, vec: &mut [u8]) -> bool {
    let Ok(off) = libc::off_t::try_from(offset) else {
        return false;
    };
    // Hand-written: neither rustix nor std offers mincore, and no crate made for it is
    // better kept than these three calls.
    // SAFETY: a fresh PROT_READ mapping chosen by the kernel (no fixed address, so nothing
    // existing is replaced); it is never dereferenced, only passed to mincore, which
    // writes one byte per page into `vec` (sized by the caller to `len` in pages), and
    // unmapped before returning. The descriptor is borrowed for the whole call.
    unsafe {
        let addr = libc::mmap(
            std::ptr::null_mut(),
            len as usize,
            libc::PROT_READ,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            off,
        );
        if addr == libc::MAP_FAILED {
            return false;
        }
        let ok = libc::mincore(addr, len as usize, vec.as_mut_ptr()) == 0;
        libc::munmap(addr, len as usize);
        ok
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::fs::FileExt;

    fn resident_pages(f: &File, len: u64) -> usize {
        let page = page_size();
        let mut v = vec![0u8; len.div_ceil(page) as usize];
        assert!(mincore(f, 0, len, &mut v));
        v.iter().filter(|b| *b & 1 != 0).count()
    }

    #[test]
    fn reading_drops_only_pages_it_brought_in() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        let len = 4u64 << 20;
        let mut f = File::create(&p).unwrap();
        f.write_all(&vec![7u8; len as usize]).unwrap();
        f.sync_all().unwrap();
        drop_all(&f);
        let f = File::open(&p).unwrap();
        if resident_pages(&f, len) > 0 {
            // tmpfs and the like: their pages are the file, nothing can be dropped.
            return;
        }
        // The first half is cached before haul reads (someone else's working set), read
        // without readahead: a readahead still in flight would bring in pages after they
        // were counted here, which haul's reader then rightly leaves alone.
        let other = File::open(&p).unwrap();
        fadvise(&other, 0, None, Advice::Random).unwrap();
        let mut half = vec![0u8; (len / 2) as usize];
        other.read_exact_at(&mut half, 0).unwrap();
        let before = resident_pages(&f, len);
        let mut r = Reader::new(false);
        r.open(&f, 0);
        r.before(&f, 0, len, len);
        let mut all = vec![0u8; len as usize];
        f.read_exact_at(&mut all, 0).unwrap();
        r.after(&f);
        let after = resident_pages(&f, len);
        // Generous: memory pressure may take some of the first half meanwhile.
        assert!(after <= before, "{after} pages resident, {before} before");
        assert!(
            after * 4 >= before * 3,
            "{after} pages resident, {before} before"
        );
    }

    /// Two streams reading neighbouring blocks of a cold file: the first one's readahead
    /// (played here by a read through another descriptor) brings in the second's block
    /// before the second notes it. Alone, the second takes those pages for cached before
    /// and keeps them; sharing what was seen first, it drops them.
    #[test]
    fn a_block_another_streams_readahead_brought_in_is_dropped_by_its_reader() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        let (len, mib) = (8u64 << 20, 1u64 << 20);
        std::fs::write(&p, vec![3u8; len as usize]).unwrap();
        let f = File::open(&p).unwrap();
        f.sync_all().unwrap();
        let pages_of_second = |f: &File| {
            let mut v = vec![0u8; (mib / page_size()) as usize];
            assert!(mincore(f, mib, mib, &mut v));
            v.iter().filter(|b| *b & 1 != 0).count()
        };
        let readahead = File::open(&p).unwrap();
        fadvise(&readahead, 0, None, Advice::Random).unwrap();
        let mut buf = vec![0u8; mib as usize];
        for share in [false, true] {
            drop_all(&f);
            if resident_pages(&f, len) > 0 {
                return; // tmpfs and the like: nothing can be dropped.
            }
            let seen = Seen::default();
            let (mut a, mut b) = if share {
                (Reader::shared(false, &seen), Reader::shared(false, &seen))
            } else {
                (Reader::new(false), Reader::new(false))
            };
            a.open(&f, 1);
            b.open(&f, 1);
            a.before(&f, 0, mib, len);
            readahead.read_exact_at(&mut buf, mib).unwrap();
            b.before(&f, mib, mib, len);
            f.read_exact_at(&mut buf, 0).unwrap();
            a.after(&f);
            f.read_exact_at(&mut buf, mib).unwrap();
            b.after(&f);
            let left = pages_of_second(&f);
            if share {
                assert_eq!(left, 0, "pages of the second block left cached");
            } else {
                assert!(left > 0, "alone, the second reader keeps what it found");
            }
        }
    }

    #[test]
    fn a_range_cached_whole_or_not_at_all_is_noted_as_mincore_sees_it() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        let len = 64u64 << 10;
        std::fs::write(&p, vec![5u8; len as usize]).unwrap();
        let f = File::open(&p).unwrap();
        f.sync_all().unwrap();
        let pages = len.div_ceil(page_size()) as usize;
        let mut r = Reader::new(false);
        for drop_first in [false, true] {
            if drop_first {
                drop_all(&f);
            }
            r.before(&f, 0, len, len);
            let mut v = vec![0u8; pages];
            assert!(mincore(&f, 0, len, &mut v));
            let noted: Vec<u8> = r.resident.iter().map(|b| b & 1).collect();
            let seen: Vec<u8> = v.iter().map(|b| b & 1).collect();
            assert_eq!(noted, seen, "dropped first: {drop_first}");
            r.after(&f);
        }
    }

    #[test]
    fn keep_notes_nothing_and_unknown_residency_drops_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, vec![1u8; 1 << 16]).unwrap();
        let f = File::open(&p).unwrap();
        let mut r = Reader::new(true);
        r.before(&f, 0, 1 << 16, 1 << 16);
        assert!(r.resident.is_empty());
        let mut r = Reader::new(false);
        r.before(&f, 4096, 0, 1 << 16);
        assert!(r.resident.is_empty());
        r.before(&f, 100, 5000, 5100);
        assert_eq!(r.start, 0);
        assert_eq!(r.resident.len(), 2);
        // The lookahead, up to the end of the file, when something there is cached.
        r.before(&f, 0, 4096, 1 << 16);
        assert!([1, 16].contains(&r.resident.len()), "{}", r.resident.len());
    }
}
