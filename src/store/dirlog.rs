//! What the receiver owes its directories at the end of a transfer: each directory entry's
//! metadata (mode, owner, times, attributes; applied deepest first once every file is in,
//! so a read-only parent never blocks its children and no entry made later moves a
//! directory's mtime) and an `fsync` of every directory an entry was made in.
//!
//! Kept out of memory: records are encoded (postcard, as the control stream encodes
//! entries) into one buffer per depth, and when the buffers hold more than
//! [`PENDING_MAX`] bytes they are written as chunks to an anonymous file (`O_TMPFILE`) in
//! the destination, which this run made and which vanishes with it. Memory is then the
//! buffers plus a few bytes per chunk, however many directories the tree has (it was a
//! few hundred bytes per directory, about 2.7 GB for ten million). Where no anonymous
//! file can be made or written (a file system without `O_TMPFILE`, a full disk, a dry
//! run), the chunks stay in memory, as everything did before.
//!
//! Reading back goes depth by depth, deepest first, each depth's chunks in the order they
//! were written: every record once. `Store::finish` first fsyncs every directory while
//! all are still open to the receiving user, then sets the metadata deepest first (a
//! directory its owner may not search is closed only after its children), then one
//! `syncfs` per file system commits it.

use std::collections::{BTreeMap, HashSet};
use std::fs::File;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::fs::FileExt;

use serde::{Deserialize, Serialize};

use super::fsops;
use crate::protocol::{Entry, SafeRelPath};

/// Encoded records held in memory before they are written out as chunks.
const PENDING_MAX: usize = 1 << 20;

/// Directories remembered as already owed an `fsync`, so that the entries of one directory
/// record it once (a walk sends a directory's entries together, between its subtrees):
/// up to twice this many, the ones used lately.
const RECENT: usize = 1024;

/// One thing owed to a directory at the end.
#[derive(Debug, PartialEq)]
pub(super) enum DirRecord {
    /// Apply this directory entry's metadata, then `fsync` it.
    Meta(SafeRelPath, Entry),
    /// `fsync` this directory (an entry was made in it).
    Sync(SafeRelPath),
}

/// The encoded form of a [`DirRecord`]: paths as the bytes a `SafeRelPath` parses from
/// (a `Meta`'s in its entry's `path`).
#[derive(Serialize, Deserialize)]
enum Encoded {
    Meta(Entry),
    Sync(Vec<u8>),
}

/// Where a chunk of one depth's records is.
#[derive(Debug)]
enum Chunk {
    /// In the anonymous file: offset and length.
    Disk(u64, usize),
    /// In memory (no file could be made or written).
    Memory(Vec<u8>),
}

/// The directory records of one transfer (see the module's text).
#[derive(Debug)]
pub(super) struct DirLog {
    /// Where to make the anonymous file (the destination root); `None`: keep everything
    /// in memory.
    dir: Option<OwnedFd>,
    /// The anonymous file, once made, and where its next chunk goes.
    file: Option<File>,
    end: u64,
    /// Per depth (components of the path; the root is 0): records not yet written out…
    pending: BTreeMap<usize, Vec<u8>>,
    pending_bytes: usize,
    /// Pending bytes past which they are written out ([`PENDING_MAX`]; less in tests).
    spill_at: usize,
    /// …and the chunks written, in order.
    chunks: BTreeMap<usize, Vec<Chunk>>,
    /// Directories recorded lately (a `Meta` or a `Sync`): those used since `older` was
    /// filled, and before; a directory used again moves to `recent`, and when `recent`
    /// is full `older` is forgotten and `recent` becomes it.
    recent: HashSet<SafeRelPath>,
    older: HashSet<SafeRelPath>,
}

impl DirLog {
    /// An empty log whose chunks go to an anonymous file in `dir` (`None`: to memory).
    pub(super) fn new(dir: Option<OwnedFd>) -> DirLog {
        DirLog {
            dir,
            file: None,
            end: 0,
            pending: BTreeMap::new(),
            pending_bytes: 0,
            spill_at: PENDING_MAX,
            chunks: BTreeMap::new(),
            recent: HashSet::new(),
            older: HashSet::new(),
        }
    }

    /// Records directory entry `e` at `path`: its metadata is applied at the end.
    pub(super) fn meta(&mut self, path: SafeRelPath, mut e: Entry) {
        let depth = path.components().count();
        e.path = path.as_bytes().to_vec();
        let rec = Encoded::Meta(e);
        self.remember(path);
        self.add(depth, &rec);
    }

    /// Records that an entry was made in directory `dir`: it is fsynced at the end. A
    /// directory recorded lately (by this or by [`DirLog::meta`]) is not recorded again.
    pub(super) fn touch(&mut self, dir: &SafeRelPath) {
        if self.recent.contains(dir) {
            return;
        }
        if let Some(d) = self.older.take(dir) {
            self.remember(d);
            return;
        }
        let rec = Encoded::Sync(dir.as_bytes().to_vec());
        self.remember(dir.clone());
        self.add(dir.components().count(), &rec);
    }

    fn remember(&mut self, path: SafeRelPath) {
        if self.recent.len() >= RECENT {
            self.older = std::mem::take(&mut self.recent);
        }
        self.recent.insert(path);
    }

    fn add(&mut self, depth: usize, rec: &Encoded) {
        // Encoding fails only for a type postcard cannot encode (a sequence of unknown
        // length); the derived Entry is not one. Encoded apart, so that even then the
        // records already pending stay whole.
        let Ok(bytes) = postcard::to_stdvec(rec) else {
            return;
        };
        self.pending
            .entry(depth)
            .or_default()
            .extend_from_slice(&bytes);
        self.pending_bytes += bytes.len();
        if self.pending_bytes > self.spill_at {
            self.spill();
        }
    }

    /// Writes every pending buffer out as a chunk of its depth.
    fn spill(&mut self) {
        let pending = std::mem::take(&mut self.pending);
        self.pending_bytes = 0;
        for (depth, buf) in pending {
            let chunk = self.write_out(buf);
            self.chunks.entry(depth).or_default().push(chunk);
        }
    }

    /// `buf` written at the end of the anonymous file, or kept in memory if it cannot be.
    fn write_out(&mut self, buf: Vec<u8>) -> Chunk {
        if self.file.is_none() {
            // Tried once: a directory that refuses O_TMPFILE refuses it every time.
            if let Some(dir) = self.dir.take() {
                self.file = fsops::open_anonymous(&dir).ok().map(File::from);
            }
        }
        let Some(f) = &self.file else {
            return Chunk::Memory(buf);
        };
        match f.write_all_at(&buf, self.end) {
            Ok(()) => {
                let chunk = Chunk::Disk(self.end, buf.len());
                self.end += buf.len() as u64;
                chunk
            }
            Err(_) => Chunk::Memory(buf),
        }
    }

    /// Bytes of records held in memory (pending and chunks kept there).
    #[cfg(test)]
    fn held(&self) -> usize {
        let kept: usize = (self.chunks.values().flatten())
            .map(|c| match c {
                Chunk::Memory(b) => b.len(),
                Chunk::Disk(..) => 0,
            })
            .sum();
        self.pending_bytes + kept
    }

    /// The paths of every directory entry recorded (for `--delete`, which compares the
    /// destination with all of them).
    pub(super) fn dir_paths(&self) -> io::Result<Vec<SafeRelPath>> {
        let mut paths = Vec::new();
        for depth in self.depths() {
            self.each_at(depth, &|e| e, &mut |r| {
                if let DirRecord::Meta(p, _) = r {
                    paths.push(p);
                }
                Ok(())
            })?;
        }
        Ok(paths)
    }

    /// Every record, deepest first; within one depth in the order recorded. Stops at the
    /// first error `f` returns; a chunk that cannot be read back is `lost`'s error.
    pub(super) fn deepest_first<E>(
        &self,
        lost: impl Fn(io::Error) -> E,
        mut f: impl FnMut(DirRecord) -> Result<(), E>,
    ) -> Result<(), E> {
        for depth in self.depths().into_iter().rev() {
            self.each_at(depth, &lost, &mut f)?;
        }
        Ok(())
    }

    /// The depths that hold records, shallowest first.
    fn depths(&self) -> Vec<usize> {
        let mut d: Vec<usize> = self
            .chunks
            .keys()
            .chain(self.pending.keys())
            .copied()
            .collect();
        d.sort_unstable();
        d.dedup();
        d
    }

    fn each_at<E>(
        &self,
        depth: usize,
        lost: &impl Fn(io::Error) -> E,
        f: &mut impl FnMut(DirRecord) -> Result<(), E>,
    ) -> Result<(), E> {
        for chunk in self.chunks.get(&depth).into_iter().flatten() {
            match chunk {
                Chunk::Memory(b) => decode(b, lost, f)?,
                Chunk::Disk(at, len) => {
                    let file = self
                        .file
                        .as_ref()
                        .ok_or_else(|| lost(broken("its file is gone")))?;
                    let mut b = vec![0u8; *len];
                    file.read_exact_at(&mut b, *at).map_err(lost)?;
                    decode(&b, lost, f)?;
                }
            }
        }
        if let Some(b) = self.pending.get(&depth) {
            decode(b, lost, f)?;
        }
        Ok(())
    }
}

/// Calls `f` with each record encoded back to back in `b`.
fn decode<E>(
    mut b: &[u8],
    lost: &impl Fn(io::Error) -> E,
    f: &mut impl FnMut(DirRecord) -> Result<(), E>,
) -> Result<(), E> {
    while !b.is_empty() {
        let (rec, rest) = postcard::take_from_bytes::<Encoded>(b)
            .map_err(|e| lost(broken(&format!("a record does not decode ({e})"))))?;
        b = rest;
        let parse = |p: &[u8]| {
            SafeRelPath::parse(p).map_err(|e| lost(broken(&format!("a path does not parse ({e})"))))
        };
        f(match rec {
            Encoded::Meta(e) => DirRecord::Meta(parse(&e.path)?, e),
            Encoded::Sync(p) => DirRecord::Sync(parse(&p)?),
        })?;
    }
    Ok(())
}

fn broken(why: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("the directory log this run wrote: {why}"),
    )
}

#[cfg(test)]
#[path = "dirlog_tests.rs"]
mod tests;
