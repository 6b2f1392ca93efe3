//! The resume journal of one partial file: which byte ranges of it are verified and
//! durable. It sits beside the partial file as `.haul-<hash>.journal`.
//!
//! Crash safety comes from ordering, not from fsyncing the journal: a record is appended
//! only after the partial file's data covering it was `fdatasync`ed (every 64 MiB or 1 s,
//! and when the transfer stops), so no record can claim bytes that are not on disk. A
//! record that did not reach the disk only costs resending its bytes. Every record carries
//! a check value, and reading stops at the first record that is torn or corrupt, so a
//! truncated tail is ignored.
//!
//! The header is authenticated with the receiver's private key (see `key`) and binds the
//! journal to one source version, one destination path and one partial file (its inode):
//! a journal someone else wrote, or one moved from another file, never matches.
//!
//! Layout (little-endian): a 64-byte header — magic `HAULJNL2`, size u64, mtime_sec i64,
//! mtime_nsec u32, reserved u32, data_bytes u64, the partial file's inode u64, tag
//! [u8; 16] (keyed BLAKE3 of the preceding 48 bytes and the path) — then 16-byte records —
//! offset u64, len u32, check u32 (first 4 bytes of BLAKE3 of offset and len).

use std::fs::File;
use std::io::{self, Read, Write};

const MAGIC: &[u8; 8] = b"HAULJNL2";
const HEADER_LEN: usize = 64;
const RECORD_LEN: usize = 16;

/// What a journal belongs to: the source file's identity at walk time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Identity {
    /// File size.
    pub size: u64,
    /// Modification time, seconds.
    pub mtime_sec: i64,
    /// Modification time, nanoseconds.
    pub mtime_nsec: u32,
    /// Bytes outside holes.
    pub data_bytes: u64,
}

/// Which file a journal belongs to, beyond the source version.
#[derive(Clone, Copy, Debug)]
pub struct Binding<'a> {
    /// The receiver's private journal key.
    pub key: &'a [u8; 32],
    /// The file's path beneath the destination root.
    pub path: &'a [u8],
    /// The partial file's inode number.
    pub inode: u64,
}

/// Sorted, disjoint `(start, end)` byte ranges.
pub type Ranges = Vec<(u64, u64)>;

/// Encodes the header for `id`, bound by `b`.
pub fn header(b: &Binding<'_>, id: &Identity) -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[0..8].copy_from_slice(MAGIC);
    h[8..16].copy_from_slice(&id.size.to_le_bytes());
    h[16..24].copy_from_slice(&id.mtime_sec.to_le_bytes());
    h[24..28].copy_from_slice(&id.mtime_nsec.to_le_bytes());
    h[32..40].copy_from_slice(&id.data_bytes.to_le_bytes());
    h[40..48].copy_from_slice(&b.inode.to_le_bytes());
    let mut mac = blake3::Hasher::new_keyed(b.key);
    mac.update(&h[..48]);
    mac.update(b.path);
    h[48..64].copy_from_slice(&mac.finalize().as_bytes()[..16]);
    h
}

fn record_check(offset: u64, len: u32) -> [u8; 4] {
    let mut b = [0u8; 12];
    b[..8].copy_from_slice(&offset.to_le_bytes());
    b[8..].copy_from_slice(&len.to_le_bytes());
    let h = blake3::hash(&b);
    let mut c = [0u8; 4];
    c.copy_from_slice(&h.as_bytes()[..4]);
    c
}

/// Encodes records for `ranges` into `out`.
pub fn encode_records(ranges: &[(u64, u32)], out: &mut Vec<u8>) {
    for &(offset, len) in ranges {
        out.extend_from_slice(&offset.to_le_bytes());
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&record_check(offset, len));
    }
}

/// Reads a journal: `None` if its header does not match `id` and `b` (a different source
/// version or file, or not written with our key: start over); otherwise the durable ranges, sorted and merged, each within
/// `[0, size)`, and the length of the journal's intact prefix (truncate to it before
/// appending). Stops at the first torn or corrupt record.
pub fn read(file: &mut File, b: &Binding<'_>, id: &Identity) -> io::Result<Option<(Ranges, u64)>> {
    let mut buf = Vec::new();
    file.read_to_end(&mut buf)?;
    if buf.len() < HEADER_LEN || buf[..HEADER_LEN] != header(b, id) {
        return Ok(None);
    }
    let mut ranges = Vec::new();
    for rec in buf[HEADER_LEN..].chunks_exact(RECORD_LEN) {
        let offset = u64::from_le_bytes(rec[0..8].try_into().unwrap_or_default());
        let len = u32::from_le_bytes(rec[8..12].try_into().unwrap_or_default());
        if rec[12..16] != record_check(offset, len) {
            break;
        }
        let end = match offset.checked_add(u64::from(len)) {
            Some(e) if e <= id.size && len > 0 => e,
            _ => break,
        };
        ranges.push((offset, end));
    }
    let good = (HEADER_LEN + RECORD_LEN * ranges.len()) as u64;
    Ok(Some((merge(ranges), good)))
}

/// Sorts and merges overlapping or touching ranges.
pub fn merge(mut ranges: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    ranges.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(ranges.len());
    for (a, b) in ranges {
        match out.last_mut() {
            Some(last) if a <= last.1 => last.1 = last.1.max(b),
            _ => out.push((a, b)),
        }
    }
    out
}

/// `[0, size)` minus `have` (sorted, merged).
pub fn missing(size: u64, have: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut pos = 0;
    for &(a, b) in have {
        if a > pos {
            out.push((pos, a));
        }
        pos = pos.max(b);
    }
    if pos < size {
        out.push((pos, size));
    }
    out
}

/// Appends records to an open journal.
pub fn append(file: &mut File, ranges: &[(u64, u32)]) -> io::Result<()> {
    let mut out = Vec::with_capacity(ranges.len() * RECORD_LEN);
    encode_records(ranges, &mut out);
    file.write_all(&out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Seek, SeekFrom};

    fn id() -> Identity {
        Identity {
            size: 1 << 30,
            mtime_sec: 1_700_000_000,
            mtime_nsec: 5,
            data_bytes: 1 << 30,
        }
    }

    const KEY: [u8; 32] = [5; 32];

    fn bind() -> Binding<'static> {
        Binding {
            key: &KEY,
            path: b"dir/f",
            inode: 42,
        }
    }

    fn journal_with(records: &[(u64, u32)]) -> File {
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(&header(&bind(), &id())).unwrap();
        append(&mut f, records).unwrap();
        f.seek(SeekFrom::Start(0)).unwrap();
        f
    }

    #[test]
    fn round_trip_merges_ranges() {
        let mut f = journal_with(&[(4096, 4096), (0, 4096), (100_000, 10)]);
        let (r, good) = read(&mut f, &bind(), &id()).unwrap().unwrap();
        assert_eq!(r, [(0, 8192), (100_000, 100_010)]);
        assert_eq!(good, 64 + 3 * 16);
        assert_eq!(missing(200_000, &r), [(8192, 100_000), (100_010, 200_000)]);
    }

    #[test]
    fn other_source_version_is_ignored() {
        let mut f = journal_with(&[(0, 4096)]);
        let mut other = id();
        other.mtime_nsec = 6;
        assert_eq!(read(&mut f, &bind(), &other).unwrap(), None);
    }

    #[test]
    fn journal_of_another_key_path_or_partial_file_is_ignored() {
        let other_key = [6u8; 32];
        let others = [
            Binding {
                key: &other_key,
                ..bind()
            },
            Binding {
                path: b"dir/g",
                ..bind()
            },
            Binding {
                inode: 43,
                ..bind()
            },
        ];
        for b in others {
            let mut f = journal_with(&[(0, 4096)]);
            assert_eq!(read(&mut f, &b, &id()).unwrap(), None, "{b:?}");
        }
    }

    #[test]
    fn torn_tail_is_ignored_at_every_cut() {
        let mut full = Vec::new();
        full.extend_from_slice(&header(&bind(), &id()));
        encode_records(&[(0, 4096), (4096, 4096), (8192, 4096)], &mut full);
        for cut in HEADER_LEN..full.len() {
            let mut f = tempfile::tempfile().unwrap();
            f.write_all(&full[..cut]).unwrap();
            f.seek(SeekFrom::Start(0)).unwrap();
            let (r, good) = read(&mut f, &bind(), &id()).unwrap().unwrap();
            assert_eq!(
                good as usize,
                HEADER_LEN + (cut - HEADER_LEN) / RECORD_LEN * RECORD_LEN
            );
            let whole = (cut - HEADER_LEN) / RECORD_LEN;
            let want: u64 = whole as u64 * 4096;
            assert_eq!(r.iter().map(|(a, b)| b - a).sum::<u64>(), want, "cut {cut}");
        }
    }

    #[test]
    fn corrupt_record_stops_reading() {
        let mut full = Vec::new();
        full.extend_from_slice(&header(&bind(), &id()));
        encode_records(&[(0, 4096), (4096, 4096), (8192, 4096)], &mut full);
        full[HEADER_LEN + RECORD_LEN + 3] ^= 0xff;
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(&full).unwrap();
        f.seek(SeekFrom::Start(0)).unwrap();
        assert_eq!(
            read(&mut f, &bind(), &id()).unwrap().unwrap().0,
            [(0, 4096)]
        );
    }

    #[test]
    fn records_beyond_the_file_are_rejected() {
        let mut f = journal_with(&[(0, 4096), ((1 << 30) - 10, 4096)]);
        assert_eq!(
            read(&mut f, &bind(), &id()).unwrap().unwrap().0,
            [(0, 4096)]
        );
    }
}
