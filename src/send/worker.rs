//! One data stream of the sender: a blocking loop that takes units from the work queue,
//! reads them (pread, reusing one buffer), checks the file did not change while read,
//! hashes, compresses and writes one frame per unit. A local copy's stream hands each unit
//! over in-process instead (`hand_over`).
//!
//! For a delta file it compares each piece's hash with the receiver's and sends only the
//! pieces that differ; matching pieces go as KEEP segments that carry no bytes.

use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::sync::atomic::AtomicU64;
use std::sync::Mutex;

use super::dial::{DataConn, Redial, UnitBytes};
use super::pack::{self, stamp_of, ReadFail};
use super::readbuf::{ReadBuf, ALIGN};
use super::report::{Failures, SendOptions};
use crate::codec::{content_hash_with, piece_hash, unit_hash, Encoder};
use crate::error::Result;
use crate::pagecache;
use crate::plan::queue::{FileJob, Work, WorkQueue};
use crate::plan::walk::Walked;
use crate::progress::Counters;
use crate::protocol::{encode_data_header, hashed_parts, Codec, FrameKind, Segment};
use crate::session::lost;
use crate::transport::lane::LaneSender;

/// The state of one stream's loop.
struct Worker<'a> {
    /// The block key of the receiver the stream writes to: a delta's pieces are compared
    /// by hashes keyed with it.
    key: [u8; 32],
    failures: &'a Mutex<Failures>,
    raw: ReadBuf,
    segs: Vec<Segment>,
    open: Option<(u64, File)>,
    /// Source bytes read for the current unit.
    read: u64,
    /// Files whose last bytes are in the current unit.
    files: u64,
    /// Drops from the page cache what this stream brought in (unless `--keep-cache`).
    cache: pagecache::Reader<'a>,
    /// Blocks no page of which is cached are read with `O_DIRECT` (until a file system
    /// refuses it).
    direct: bool,
}

/// Runs one data stream until the queue is closed and empty, then ends the stream.
pub(super) fn run(
    link: &Redial<'_>,
    queue: &WorkQueue,
    opts: &SendOptions,
    counters: &Counters,
    failures: &Mutex<Failures>,
    seen: &pagecache::Seen,
) -> Result<()> {
    let mut w = Worker {
        key: link.target.key(),
        failures,
        raw: ReadBuf::with_capacity(opts.block_size as usize),
        segs: Vec::new(),
        open: None,
        read: 0,
        files: 0,
        cache: pagecache::Reader::shared(opts.keep_cache, seen),
        direct: true,
    };
    let mut cbuf = Vec::new();
    let mut hdr = Vec::new();
    let mut enc = Encoder::new(opts.compress, opts.streams);
    // A failed first dial is handled like a dropped connection: the first write re-dials
    // with backoff, and gives up as a lost connection (the control stream already proved
    // the receiver; if it is gone now, that is what happened).
    let mut conn = link.open().ok();
    if let Some(lane) = conn.as_mut().and_then(|c| c.conn.take_lane_sender()) {
        return hand_over(&mut w, &lane, queue, link, counters);
    }
    while let Some(work) = queue.next() {
        if let Some(c) = &conn {
            w.key = c.key;
        }
        w.read_unit(work);
        if !w.segs.is_empty() {
            let sent = send_unit(
                link, &mut conn, &mut enc, &mut w, &mut cbuf, &mut hdr, counters,
            );
            if sent.is_err() {
                queue.done();
                return sent;
            }
        }
        queue.done();
    }
    // The transfer is confirmed (or failed) on the control stream; End only lets the
    // receiver's worker stop early. Errors here change nothing.
    if let Some(DataConn {
        conn: mut c,
        sealer: mut s,
        ..
    }) = conn
    {
        let _ = c
            .write_all(&s.header(FrameKind::End, 0))
            .and_then(|()| c.flush());
        let _ = c.shutdown_write();
    }
    Ok(())
}

/// A local copy's stream: each unit read goes to the receiver over the lane as it is, with
/// its data header, not compressed, hashed or framed (see `transport::lane`).
fn hand_over(
    w: &mut Worker<'_>,
    lane: &LaneSender,
    queue: &WorkQueue,
    link: &Redial<'_>,
    counters: &Counters,
) -> Result<()> {
    let mut hdr = Vec::new();
    while let Some(work) = queue.next() {
        w.read_unit(work);
        if !w.segs.is_empty() {
            let len = w.raw.len();
            link.pace.take(len);
            encode_data_header(&mut hdr, Codec::Raw, len as u32, &w.segs);
            let (bytes, at) = w.raw.swap(lane.spare());
            if lane.send(&hdr, bytes, at).is_err() {
                queue.done();
                return Err(lost(io::Error::other("the local receiver stopped")));
            }
            Counters::add(&counters.units, 1);
            link.target.count(0);
            Counters::add(&counters.done_bytes, len as u64);
            Counters::add(&counters.read_bytes, w.read);
            Counters::add(&counters.done_files, w.files);
            Counters::add(&counters.wire_bytes, len as u64);
        }
        queue.done();
    }
    Ok(())
}

fn send_unit(
    link: &Redial<'_>,
    conn: &mut Option<DataConn>,
    enc: &mut Encoder,
    w: &mut Worker<'_>,
    cbuf: &mut Vec<u8>,
    hdr: &mut Vec<u8>,
    counters: &Counters,
) -> Result<()> {
    let raw = w.raw.bytes_mut();
    let (codec, packed) = if raw.is_empty() {
        (Codec::Raw, 0)
    } else {
        let (codec, packed) = enc.encode(raw, cbuf);
        (codec, packed.len())
    };
    let raw_len = raw.len();
    let wire_len = if codec == Codec::Raw { raw_len } else { packed };
    encode_data_header(hdr, codec, raw_len as u32, &w.segs);
    let before = conn
        .as_ref()
        .and_then(|c| super::sample::before_write(enc, &c.conn));
    let started = std::time::Instant::now();
    // Hashed with the key of the receiver it goes to (another after a chain moved on).
    let hash = |key: &[u8; 32], hdr: &[u8], raw: &[u8]| unit_hash(key, hashed_parts(hdr), raw);
    let unit = UnitBytes {
        raw,
        packed: (codec != Codec::Raw).then(|| &mut cbuf[..packed]),
    };
    let hashing = link.write_unit(conn, hdr, unit, &hash, counters)?;
    let sample = conn
        .as_ref()
        .and_then(|c| super::sample::link_sample(enc, &c.conn, before));
    enc.wrote(started.elapsed().saturating_sub(hashing), sample);
    if let Some(l) = enc.last_level() {
        Counters::add(&counters.codec_units[l], 1);
    }
    Counters::add(&counters.units, 1);
    Counters::add(&counters.done_bytes, raw_len as u64);
    Counters::add(&counters.read_bytes, w.read);
    Counters::add(&counters.done_files, w.files);
    Counters::add(&counters.wire_bytes, (hdr.len() + wire_len) as u64);
    Ok(())
}

impl Worker<'_> {
    /// Reads one unit of work into the buffer (and its segments), over whatever bytes the
    /// buffer held (see `readbuf`: nothing is zeroed per read).
    fn read_unit(&mut self, work: Work) {
        self.segs.clear();
        self.read = 0;
        self.files = 0;
        match work {
            Work::Block { file, offset, len } => self.read_block(&file, offset, len),
            Work::Pack(files) => {
                self.raw.clear();
                self.read_pack(&files)
            }
        }
    }

    fn skip(&self, id: u64) -> bool {
        self.failures
            .lock()
            .map(|f| f.ids.contains(&id))
            .unwrap_or(true)
    }

    fn record(&self, job: &FileJob, fail: ReadFail) {
        let Ok(mut f) = self.failures.lock() else {
            return;
        };
        if !f.ids.insert(job.id) {
            return;
        }
        match fail {
            ReadFail::Unreadable(e) => {
                let shown = crate::progress::shown_path(&job.path);
                crate::progress::warn(&format!("cannot read {shown}: {e}"));
                f.list.push((job.path.clone(), e));
                f.unreadable.push(job.id);
            }
            ReadFail::Changed => {
                f.changed
                    .insert(job.id, (job.path.clone(), job.dest.clone()));
            }
        }
    }

    /// Reads `[offset, offset + len)` of one file into the buffer.
    fn read_block(&mut self, job: &FileJob, offset: u64, len: u32) {
        if self.skip(job.id) {
            return;
        }
        if self.open.as_ref().map(|(id, _)| *id) != Some(job.id) {
            self.open = match job
                .at
                .open_file()
                .and_then(|f| stamp_of(&f).map(|s| (f, s)))
            {
                Ok((f, now)) if now.same_file(&job.stamp) => {
                    self.cache.open(&f, job.id);
                    Some((job.id, f))
                }
                // Replaced since the walk (by another file, a symlink, a FIFO...); a
                // directory on its way replaced is an error (see `plan::beneath`).
                Ok(_) => return self.record(job, ReadFail::Changed),
                Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
                    return self.record(job, ReadFail::Changed)
                }
                Err(e) => return self.record(job, ReadFail::Unreadable(e)),
            };
        }
        let Some((_, f)) = self.open.as_ref() else {
            return;
        };
        let buf = self.raw.fill(len as usize);
        self.cache.before(f, offset, u64::from(len), job.size);
        let r = if self.direct && self.cache.cold() {
            read_cold(f, buf, offset, &mut self.direct)
        } else {
            f.read_exact_at(buf, offset)
        };
        let r = r.and_then(|()| stamp_of(f));
        self.cache.after(f);
        self.read += u64::from(len);
        if offset + u64::from(len) == job.size {
            self.files += 1;
        }
        match r {
            Ok(now) if now == job.stamp => {}
            Ok(_) => return self.record(job, ReadFail::Changed),
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                return self.record(job, ReadFail::Changed)
            }
            Err(e) => return self.record(job, ReadFail::Unreadable(e)),
        }
        match &job.delta {
            None => self.segs.push(Segment {
                file: job.id,
                offset,
                len,
                keep: false,
            }),
            Some(d) => self.keep_matching(job.id, offset, d.chunk, &d.hashes),
        }
    }

    /// Delta: turns the block in the buffer into segments, KEEP for pieces whose hash
    /// matches the receiver's, and compacts the buffer to the bytes that must travel.
    fn keep_matching(&mut self, id: u64, offset: u64, chunk: u32, hashes: &[[u8; 16]]) {
        let chunk = chunk as usize;
        let first = (offset / chunk as u64) as usize;
        let mut write = 0usize;
        let mut read = 0usize;
        while read < self.raw.len() {
            let end = (read + chunk).min(self.raw.len());
            let piece = first + read / chunk;
            let same = hashes
                .get(piece)
                .is_some_and(|h| *h == piece_hash(&self.key, &self.raw.bytes()[read..end]));
            let len = (end - read) as u32;
            let at = offset + read as u64;
            match self.segs.last_mut() {
                Some(s) if s.keep == same && s.offset + u64::from(s.len) == at => s.len += len,
                _ => self.segs.push(Segment {
                    file: id,
                    offset: at,
                    len,
                    keep: same,
                }),
            }
            if !same {
                self.raw.bytes_mut().copy_within(read..end, write);
                write += end - read;
            }
            read = end;
        }
        self.raw.truncate(write);
    }

    /// Reads several whole small files into the buffer, one segment each.
    fn read_pack(&mut self, files: &[std::sync::Arc<FileJob>]) {
        // Small files are read whole by one stream each: nothing shared to note, and the
        // big file this stream had open must not take their pages for its own.
        if self.open.take().is_some() {
            self.cache.close();
        }
        let read = pack::read_pack(files, &mut self.raw, &mut self.cache, &mut self.direct);
        for (job, r) in files.iter().zip(read) {
            self.read += job.size;
            match r {
                Ok(()) => {
                    self.files += 1;
                    self.segs.push(Segment {
                        file: job.id,
                        offset: 0,
                        len: job.size as u32,
                        keep: false,
                    })
                }
                Err(fail) => self.record(job, fail),
            }
        }
    }
}

/// Reads a block none of which is cached: its whole aligned pages with `O_DIRECT` (the
/// buffer starts aligned, see `readbuf`), the rest of it (the end of a file) buffered.
/// Measured on a virtual disk: a cold 4 GiB file read this way and written directly
/// copied faster than with buffered reads (bench/RESULTS.md, *Choices inside one
/// transfer*). A file system that refuses `O_DIRECT` (`EINVAL`) turns `direct` off for
/// this stream.
fn read_cold(f: &File, buf: &mut [u8], offset: u64, direct: &mut bool) -> io::Result<()> {
    let aligned = offset % ALIGN as u64 == 0 && buf.as_ptr().align_offset(ALIGN) == 0;
    let body = if aligned {
        buf.len() / ALIGN * ALIGN
    } else {
        0
    };
    if body > 0 {
        match read_direct(f, &mut buf[..body], offset) {
            Ok(()) => {}
            Err(e) if matches!(e.raw_os_error(), Some(libc::EINVAL | libc::EOPNOTSUPP)) => {
                *direct = false;
                f.read_exact_at(&mut buf[..body], offset)?;
            }
            Err(e) => return Err(e),
        }
    }
    f.read_exact_at(&mut buf[body..], offset + body as u64)
}

/// Reads an aligned range with `O_DIRECT` set on `f` for the while (a descriptor of
/// this stream's own), as two reads in flight (see [`read_halves`]).
fn read_direct(f: &File, buf: &mut [u8], offset: u64) -> io::Result<()> {
    let flags = rustix::fs::fcntl_getfl(f)?;
    rustix::fs::fcntl_setfl(f, flags | rustix::fs::OFlags::DIRECT)?;
    let read = read_halves(f, buf, offset);
    let restored = rustix::fs::fcntl_setfl(f, flags);
    read?;
    restored.map_err(io::Error::from)
}

/// Ranges at least this long are read as two halves at once.
const SPLIT_FROM: usize = 2 << 20;

/// Reads `buf` from `offset`: a range of at least [`SPLIT_FROM`] as two concurrent reads
/// of its halves (the second on a scoped thread; the halves stay page-aligned), so each
/// stream keeps two direct reads in flight where one left the disk waiting between
/// blocks (no readahead runs ahead of `O_DIRECT`). Measured, 4 GiB local copy with caches
/// dropped, 17 alternating rounds: median 4.73 s against 5.62 s with one read and 7.5 s
/// with `--keep-cache` (bench/RESULTS.md, *Choices inside one transfer*). A thread costs
/// some 20 µs against milliseconds per 4 MiB read; when none can be started the halves
/// are read one after the other.
fn read_halves(f: &File, buf: &mut [u8], offset: u64) -> io::Result<()> {
    let half = buf.len() / 2 / ALIGN * ALIGN;
    if buf.len() < SPLIT_FROM || half == 0 {
        return f.read_exact_at(buf, offset);
    }
    let tail_at = offset + half as u64;
    let split = std::thread::scope(|s| {
        let (head, tail) = buf.split_at_mut(half);
        let second = std::thread::Builder::new()
            .name("haul-read".into())
            .spawn_scoped(s, move || f.read_exact_at(tail, tail_at))
            .ok()?;
        let first = f.read_exact_at(head, offset);
        let second = second
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("a read thread failed")));
        Some(first.and(second))
    });
    split.unwrap_or_else(|| f.read_exact_at(buf, offset))
}

/// The walked `w`, with `--checksum` its content hash: read beneath its source's root as
/// the streams read it; none for anything else or a file that cannot be read now (it is
/// then sent, and its read reported as any other).
pub(super) fn summed(
    mut w: Walked,
    key: &[u8; 32],
    checksum: bool,
    walked: &AtomicU64,
) -> Box<Walked> {
    let data = w.data.as_ref().filter(|_| checksum);
    let file = data.and_then(|d| Some((d.at.open_file().ok()?, d.size)));
    // Each piece hashed is a step of the walk: a long hash is not a hung one.
    let mut step = |_| Counters::add(walked, 1);
    w.entry.checksum = file.and_then(|(f, size)| content_hash_with(key, &f, size, &mut step).ok());
    Box::new(w)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pattern(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 7 + i / 4093) as u8).collect()
    }

    #[test]
    fn a_range_read_in_halves_is_the_file_s_bytes() {
        let data = pattern((9 << 20) + 123);
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(&data).unwrap();
        // Split (4 MiB, 2 MiB exactly, an odd length), not split (under 2 MiB), and the
        // end of the file inside the second half.
        for (offset, len) in [
            (4096, 4 << 20),
            (0, 2 << 20),
            (8192, (3 << 20) + 4097),
            (12288, (1 << 20) + 5),
            ((5 << 20) + 4096, (4 << 20) - 4096 + 123),
        ] {
            let mut buf = vec![0u8; len];
            read_halves(&f, &mut buf, offset as u64).unwrap();
            assert!(buf == data[offset..offset + len], "{offset}+{len}");
        }
    }

    #[test]
    fn a_range_past_the_end_read_in_halves_fails() {
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(&pattern(3 << 20)).unwrap();
        let mut buf = vec![0u8; 4 << 20];
        let e = read_halves(&f, &mut buf, 0).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
    }

    #[test]
    fn a_cold_block_read_directly_is_the_file_s_bytes() {
        let data = pattern(6 << 20);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, &data).unwrap();
        let f = File::open(&path).unwrap();
        let mut raw = ReadBuf::with_capacity(8 << 20);
        let buf = raw.fill(4 << 20);
        let mut direct = true;
        read_cold(&f, buf, 1 << 20, &mut direct).unwrap();
        assert!(buf[..] == data[1 << 20..5 << 20]);
    }
}
