//! Reading a pack of small files into one unit, two files in flight at once.
//!
//! A pack's files are laid out in slots of whole pages in the buffer's room (each slot
//! starts aligned, so a cold file is read with `O_DIRECT` straight into it), read by two
//! threads at once (this stream's and a scoped one, each taking half the slots), and then
//! moved down one after another to make the unit: a file that could not be read, or
//! changed while read, is left out. A file read with `O_DIRECT` waits for the disk, and
//! nothing reads ahead of it: one stream reading its pack file by file left the disk
//! idle between reads (measured: design.md, *Direct I/O for small files*).
//!
//! Slots are taken a chunk of at most [`CHUNK_ROOM`] at a time, so a pack of thousands of
//! one-byte files (a page each) does not need thousands of pages of room at once.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use super::readbuf::{ReadBuf, ALIGN};
use crate::pagecache;
use crate::plan::queue::FileJob;
use crate::plan::walk::Stamp;

/// What went wrong reading one file.
pub(super) enum ReadFail {
    /// Cannot be read: reported, the rest goes on (exit "partial").
    Unreadable(io::Error),
    /// Changed while read: sent again in a later round.
    Changed,
}

/// The most room one chunk of a pack's slots takes (one file more if its slot crosses it).
const CHUNK_ROOM: usize = 4 << 20;

/// Reads `files` whole to the end of the unit in `raw`, in order, and tells for each
/// whether it is there (`Ok`) or why not. `cache` and `direct` are the stream's (see
/// `worker`); the second thread gets a page-cache reader of its own.
pub(super) fn read_pack(
    files: &[Arc<FileJob>],
    raw: &mut ReadBuf,
    cache: &mut pagecache::Reader<'_>,
    direct: &mut bool,
) -> Vec<Result<(), ReadFail>> {
    let mut out = Vec::with_capacity(files.len());
    let mut rest = files;
    while !rest.is_empty() {
        let mut room = 0;
        let n = rest
            .iter()
            .take_while(|j| {
                let fits = room < CHUNK_ROOM;
                room += slot_len(j);
                fits
            })
            .count();
        let (chunk, after) = rest.split_at(n);
        out.extend(read_chunk(chunk, raw, cache, direct));
        rest = after;
    }
    out
}

/// A file's slot: its size in whole pages.
fn slot_len(job: &FileJob) -> usize {
    (job.size as usize).next_multiple_of(ALIGN)
}

/// Reads one chunk's files into their slots (two threads when there are two files or
/// more), then appends those read right to the unit.
fn read_chunk(
    chunk: &[Arc<FileJob>],
    raw: &mut ReadBuf,
    cache: &mut pagecache::Reader<'_>,
    direct: &mut bool,
) -> Vec<Result<(), ReadFail>> {
    let lens: Vec<usize> = chunk.iter().map(|j| slot_len(j)).collect();
    let room = raw.room(lens.iter().sum());
    let read = read_split(chunk, &lens, room, cache, direct)
        .unwrap_or_else(|| read_slots(chunk, &lens, room, cache, direct));
    let mut taken = Vec::with_capacity(chunk.len());
    let mut at = 0;
    let out = chunk
        .iter()
        .zip(read)
        .zip(&lens)
        .map(|((job, r), len)| {
            let r = match r {
                Ok(now) if now == job.stamp => {
                    taken.push(at..at + job.size as usize);
                    Ok(())
                }
                Ok(_) => Err(ReadFail::Changed),
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Err(ReadFail::Changed),
                Err(e) => Err(ReadFail::Unreadable(e)),
            };
            at += len;
            r
        })
        .collect();
    raw.take_parts(taken);
    out
}

/// Reads the slots' first half (by bytes) on this thread and the rest on a scoped one;
/// `None` when there is nothing to split or no thread could be started (the caller then
/// reads them all here).
fn read_split(
    chunk: &[Arc<FileJob>],
    lens: &[usize],
    room: &mut [u8],
    cache: &mut pagecache::Reader<'_>,
    direct: &mut bool,
) -> Option<Vec<io::Result<Stamp>>> {
    if chunk.len() < 2 {
        return None;
    }
    let total: usize = lens.iter().sum();
    let mut head = 0;
    let k = lens
        .iter()
        .take_while(|l| {
            let before = head;
            head += *l;
            before < total / 2
        })
        .count()
        .clamp(1, chunk.len() - 1);
    let split_at: usize = lens[..k].iter().sum();
    let keep = cache.keeps();
    let theirs = *direct;
    std::thread::scope(|s| {
        let (first, second) = room.split_at_mut(split_at);
        let (files, lens_b) = (&chunk[k..], &lens[k..]);
        let other = std::thread::Builder::new()
            .name("haul-read".into())
            .spawn_scoped(s, move || {
                let mut cache = pagecache::Reader::new(keep);
                let mut direct = theirs;
                let read = read_slots(files, lens_b, second, &mut cache, &mut direct);
                (read, direct)
            })
            .ok()?;
        let mut read = read_slots(&chunk[..k], &lens[..k], first, cache, direct);
        match other.join() {
            Ok((rest, still)) => {
                *direct &= still;
                read.extend(rest);
            }
            Err(_) => {
                read.extend((k..chunk.len()).map(|_| Err(io::Error::other("a read thread failed"))))
            }
        }
        Some(read)
    })
}

/// Reads each file into its slot of `room`, one after another.
fn read_slots(
    files: &[Arc<FileJob>],
    lens: &[usize],
    room: &mut [u8],
    cache: &mut pagecache::Reader<'_>,
    direct: &mut bool,
) -> Vec<io::Result<Stamp>> {
    let mut at = 0;
    files
        .iter()
        .zip(lens)
        .map(|(job, len)| {
            let slot = &mut room[at..at + len];
            at += len;
            read_whole(job, slot, cache, direct)
        })
        .collect()
}

/// Reads a whole small file into `slot` (aligned, its size in whole pages); a file
/// replaced since the walk reads as changed (EOF). A file none of whose pages is cached
/// is read with `O_DIRECT` (see [`read_small_direct`]), any other buffered, its pages
/// brought in dropped again.
fn read_whole(
    job: &FileJob,
    slot: &mut [u8],
    cache: &mut pagecache::Reader<'_>,
    direct: &mut bool,
) -> io::Result<Stamp> {
    let replaced = || io::Error::new(io::ErrorKind::UnexpectedEof, "replaced since the walk");
    let f = job.at.open_file().map_err(|e| match e.raw_os_error() {
        Some(libc::ELOOP) => replaced(),
        _ => e,
    })?;
    if !stamp_of(&f)?.same_file(&job.stamp) {
        return Err(replaced());
    }
    let size = job.size as usize;
    cache.before(&f, 0, job.size, job.size);
    if *direct && cache.cold() {
        match read_small_direct(&f, slot, size) {
            Ok(()) => {
                // Nothing was brought into the cache, so there is nothing to drop.
                cache.forget();
                return stamp_of(&f);
            }
            Err(e) if matches!(e.raw_os_error(), Some(libc::EINVAL | libc::EOPNOTSUPP)) => {
                *direct = false;
            }
            Err(e) => {
                cache.forget();
                return Err(e);
            }
        }
    }
    let r = f.read_exact_at(&mut slot[..size], 0);
    cache.after(&f);
    r?;
    stamp_of(&f)
}

/// Reads a whole small file of `size` bytes with `O_DIRECT` into `room` (aligned, `size`
/// rounded up to whole pages): one `pread` of all its pages, the last one short at the
/// end of the file, so not a byte of it passes through the page cache (20,000 files of
/// 100 KiB read buffered cost the sender 1.1 of its 3.8 CPU s: page-cache inserts, the
/// copy out, and dropping them again). `O_DIRECT` is set on the file's own descriptor,
/// opened for this read alone. Fewer bytes than `size` (a file shrunk since the walk,
/// whose stamp the caller checks next) read as EOF; more are not asked for.
fn read_small_direct(f: &File, room: &mut [u8], size: usize) -> io::Result<()> {
    let flags = rustix::fs::fcntl_getfl(f)?;
    rustix::fs::fcntl_setfl(f, flags | rustix::fs::OFlags::DIRECT)?;
    let r = read_pages(f, room, size);
    if r.is_err() {
        // The caller may read it again buffered (a refusal of `O_DIRECT`).
        rustix::fs::fcntl_setfl(f, flags)?;
    }
    r
}

/// [`read_small_direct`]'s reads, on a descriptor with `O_DIRECT` set.
fn read_pages(f: &File, room: &mut [u8], size: usize) -> io::Result<()> {
    let mut got = 0;
    while got < size {
        // Whole pages at page offsets: what `O_DIRECT` accepts. A read that stops short
        // of a page boundary has reached the end of the file.
        if got % ALIGN != 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "shorter than when walked",
            ));
        }
        match f.read_at(&mut room[got..], got as u64) {
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "shorter than when walked",
                ))
            }
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// The file's size, mtime and ctime now.
pub(super) fn stamp_of(f: &File) -> io::Result<Stamp> {
    f.metadata().map(|m| Stamp::of(&m))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::beneath::{Root, Within};
    use crate::plan::meta::Meta;
    use std::path::Path;

    /// A file of `len` bytes named `name` in `dir`, and its job.
    fn job(root: &Arc<Root>, dir: &Path, id: u64, len: usize) -> (Arc<FileJob>, Vec<u8>) {
        let data: Vec<u8> = (0..len).map(|i| (i * 31 + id as usize) as u8).collect();
        let path = dir.join(format!("f{id}"));
        std::fs::write(&path, &data).unwrap();
        let stamp = Stamp::of(&std::fs::metadata(&path).unwrap());
        let job = FileJob {
            id,
            path: path.clone(),
            at: Within::new(root, &path).unwrap(),
            size: len as u64,
            stamp,
            dest: format!("f{id}").into_bytes(),
            delta: None,
        };
        (Arc::new(job), data)
    }

    fn read(files: &[Arc<FileJob>], direct: bool) -> (Vec<u8>, Vec<bool>) {
        let mut raw = ReadBuf::with_capacity(0);
        raw.clear();
        let mut cache = pagecache::Reader::new(false);
        let mut direct = direct;
        let r = read_pack(files, &mut raw, &mut cache, &mut direct);
        (raw.bytes().to_vec(), r.iter().map(|r| r.is_ok()).collect())
    }

    #[test]
    fn a_pack_is_its_files_in_order_whatever_their_sizes() {
        let dir = tempfile::tempdir().unwrap();
        let root = Arc::new(Root::held(dir.path(), &Meta::stat(dir.path()).unwrap()).unwrap());
        let sizes = [0, 1, 4095, 4096, 4097, 100 << 10, 12345, 3, 200 << 10];
        let (files, want): (Vec<_>, Vec<_>) = sizes
            .iter()
            .enumerate()
            .map(|(i, &n)| job(&root, dir.path(), i as u64, n))
            .unzip();
        for direct in [true, false] {
            let (got, ok) = read(&files, direct);
            assert!(ok.iter().all(|&o| o));
            assert!(got == want.concat(), "direct {direct}");
        }
    }

    #[test]
    fn files_that_changed_or_vanished_are_left_out_of_the_pack() {
        let dir = tempfile::tempdir().unwrap();
        let root = Arc::new(Root::held(dir.path(), &Meta::stat(dir.path()).unwrap()).unwrap());
        let made: Vec<_> = (0..6)
            .map(|i| job(&root, dir.path(), i, 5000 + i as usize))
            .collect();
        let files: Vec<_> = made.iter().map(|(j, _)| Arc::clone(j)).collect();
        // f1 gone, f4 grown since the walk.
        std::fs::remove_file(dir.path().join("f1")).unwrap();
        std::fs::write(dir.path().join("f4"), vec![9u8; 9000]).unwrap();
        let (got, ok) = read(&files, true);
        assert_eq!(ok, [true, false, true, true, false, true]);
        let want: Vec<u8> = [0, 2, 3, 5]
            .iter()
            .flat_map(|&i| made[i].1.clone())
            .collect();
        assert!(got == want);
    }

    #[test]
    fn a_pack_of_many_tiny_files_is_read_a_chunk_at_a_time() {
        let dir = tempfile::tempdir().unwrap();
        let root = Arc::new(Root::held(dir.path(), &Meta::stat(dir.path()).unwrap()).unwrap());
        // 1,500 pages of slots: more than one chunk's room.
        let (files, want): (Vec<_>, Vec<_>) = (0..1500)
            .map(|i| job(&root, dir.path(), i, 1 + i as usize % 7))
            .unzip();
        let mut raw = ReadBuf::with_capacity(0);
        raw.clear();
        let mut cache = pagecache::Reader::new(false);
        let mut direct = true;
        let r = read_pack(&files, &mut raw, &mut cache, &mut direct);
        assert!(r.iter().all(|r| r.is_ok()));
        assert!(raw.bytes() == want.concat());
        // The buffer never reached much past one chunk of slots beyond the unit.
        assert!(
            raw.mark() <= raw.len() + CHUNK_ROOM + 3 * ALIGN,
            "{}",
            raw.mark()
        );
    }
}
