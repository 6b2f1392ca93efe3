//! Deciding what to ask the sender for, for each regular file: nothing when the quick
//! check (same size and mtime) says it is unchanged, the missing ranges when an earlier
//! run's partial file and journal belong to this same source version (resume), piece
//! hashes of the older version under the final name (delta), or everything.
//!
//! Nothing found in the destination is trusted by name: the older version is used through
//! a descriptor checked to be the file stat'ed, and leftovers of an earlier run only if
//! they are this user's files with one link and the journal carries this receiver's key
//! (see `key`); anything else is replaced and the file sent whole.
//!
//! It sets up the file's state and work file and then hands over to `partial`: it
//! deliberately writes no unit data and finishes no file itself.

use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::MetadataExt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use rustix::fs::{AtFlags, FileType, OFlags};

use super::fsops;
use super::journal::{self, Identity};
use super::key::{self, Key};
use super::partial::copy_range;
use super::state::{FileState, JournalState, Received, Store};
use crate::codec::piece_hash;
use crate::error::{Error, Result};
use crate::protocol::{Entry, ProtocolError, SafeRelPath, Want, WantKind};

/// Smallest delta piece: database pages are 8 KiB (PostgreSQL) or 16 KiB (InnoDB).
const DELTA_CHUNK: u64 = 16 << 10;
/// Most pieces hashed per file (bounds the `Need` message to 4 MiB).
const DELTA_MAX_PIECES: u64 = 256 << 10;

/// The source version a journal belongs to, from its manifest entry.
fn identity(e: &Entry, size: u64, data_bytes: u64) -> Identity {
    Identity {
        size,
        mtime_sec: e.mtime_sec,
        mtime_nsec: e.mtime_nsec,
        data_bytes,
    }
}

impl Store {
    /// Decides what to do for a regular file and returns what to ask the sender for, if
    /// anything.
    pub(super) fn add_file(
        &self,
        e: Entry,
        path: SafeRelPath,
        size: u64,
        data_bytes: u64,
    ) -> Result<Option<Want>> {
        let id = e.id;
        let (parent, name) = path
            .split_last()
            .ok_or(ProtocolError::Malformed("file at the root path"))?;
        let name = name.to_vec();
        let shown = path.clone();
        let err = |x| self.dest_err(&shown, x);
        let dir = self.dir(&parent).map_err(err)?;
        let pfd = &dir.fd;
        // In a directory this run made there is no older version nor earlier run's partial
        // file to look for (whatever appears there meanwhile is replaced, never used).
        let existing = match dir.made {
            true => None,
            false => match rustix::fs::statat(pfd, name.as_slice(), AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::Directory => {
                    self.make_way(pfd, &name, &path)?;
                    None
                }
                Ok(st) => Some(st)
                    .filter(|st| FileType::from_raw_mode(st.st_mode) == FileType::RegularFile),
                Err(_) => None,
            },
        };
        fsops::race_point("quick-check");
        // From here on the file is used only through a descriptor checked to be the file
        // just stat'ed: a swapped name (a symlink, say) counts as no older version.
        let existing = existing.and_then(|st| {
            fsops::open_same_file(pfd, &name, OFlags::RDONLY, &st)
                .ok()
                .map(|f| (st, f))
        });
        let opts = self.options();

        // Quick check: same size and mtime means up to date (rsync's rule).
        if let Some((st, f)) = &existing {
            let same = st.st_size as u64 == size
                && st.st_mtime == e.mtime_sec
                && st.st_mtime_nsec as u32 == e.mtime_nsec;
            if same && !opts.checksum {
                let done = fsops::apply_meta_fd(f, &e, self.owners()).map_err(err)?;
                self.note_xattrs(&path, done);
                self.unchanged_files.fetch_add(1, Ordering::Relaxed);
                self.unchanged_bytes
                    .fetch_add(data_bytes, Ordering::Relaxed);
                return Ok(None);
            }
        }

        let block = self.block_size.load(Ordering::Relaxed);
        let precreated = data_bytes == 0 || data_bytes != size || size > block;
        let dense = data_bytes == size;
        let ident = identity(&e, size, data_bytes);
        let mut want = WantKind::All;
        let mut remaining = data_bytes;
        let mut received = Received::new();
        let mut journal = None;
        let mut inplace = false;
        let mut file = None;
        let mut preallocate = false;

        if precreated && data_bytes > 0 {
            let partial = fsops::partial_name(&name);
            let jname = fsops::journal_name(&name);
            let key = self.journal_key();
            let jnew =
                |f: &File| new_journal(pfd, &jname, key.as_ref(), path.as_bytes(), &ident, f);
            // Resume: an earlier run's partial file and journal for this same source, file
            // and key.
            let resumed = key.as_ref().and_then(|k| {
                self.open_resumable(pfd, &partial, &jname, k, path.as_bytes(), &ident, size)
            });
            if let Some((f, j, have)) = resumed {
                let have_bytes: u64 = have.iter().map(|(a, b)| b - a).sum();
                remaining = data_bytes.saturating_sub(have_bytes);
                self.unchanged_bytes
                    .fetch_add(have_bytes, Ordering::Relaxed);
                self.matched.fetch_add(have_bytes, Ordering::Relaxed);
                want = WantKind::Ranges(journal::missing(size, &have));
                received = have.into_iter().collect();
                journal = Some(j);
                file = Some(f);
            } else if let (Some((st, old)), true) = (existing, dense) {
                // Delta against the older version under the final name, read through the
                // descriptor already checked; written only --inplace.
                let old_len = st.st_size as u64;
                let old = if opts.inplace {
                    fsops::open_same_file(pfd, &name, OFlags::RDWR, &st).map_err(err)?
                } else {
                    old
                };
                if let Some((chunk, hashes)) =
                    self.hash_pieces(&old, old_len, block).map_err(err)?
                {
                    want = WantKind::Delta { chunk, hashes };
                    if opts.inplace {
                        inplace = true;
                        old.set_len(size).map_err(err)?;
                        file = Some(old);
                    } else {
                        let f = self.create_work_file(pfd, &partial, size).map_err(err)?;
                        copy_range(&old, &f, old_len.min(size)).map_err(err)?;
                        journal = jnew(&f).map_err(err)?;
                        file = Some(f);
                    }
                }
            }
            if file.is_none() {
                let f = self.create_work_file(pfd, &partial, size).map_err(err)?;
                preallocate = dense;
                if size > block {
                    journal = jnew(&f).map_err(err)?;
                }
                file = Some(f);
            }
        }
        let work_id = match &file {
            Some(f) => f
                .metadata()
                .map(|m| Some((m.dev(), m.ino())))
                .map_err(err)?,
            None => None,
        };
        let state = Arc::new(FileState {
            entry: e,
            path,
            size,
            remaining: AtomicU64::new(remaining),
            received: Mutex::new(received),
            precreated,
            inplace,
            journal: journal.map(|file| {
                Mutex::new(JournalState {
                    file,
                    pending: Vec::new(),
                    pending_bytes: 0,
                    last_flush: Instant::now(),
                })
            }),
            anonymous: AtomicBool::new(false),
            preallocate: AtomicBool::new(preallocate),
            work_id,
        });
        if remaining == 0 {
            // Nothing will arrive (empty, all holes, or fully resumed): complete now.
            let f = match file {
                Some(f) => f,
                None => self
                    .create_work_file(pfd, &fsops::partial_name(&name), size)
                    .map_err(err)?,
            };
            self.queue_finish(state, f, None)?;
            return Ok(None);
        }
        // Resumed ranges count towards the bound on ranges held, like received ones.
        let held = state.received.lock().map(|r| r.len() as u64).unwrap_or(0);
        self.count_ranges(0, held);
        match self.files.lock() {
            Ok(mut m) => {
                if m.insert(id, state).is_some() {
                    return Err(ProtocolError::Malformed("duplicate file id").into());
                }
            }
            Err(_) => return Err(Error::io("file table", io::Error::other("poisoned"))),
        }
        Ok(Some(Want { id, what: want }))
    }

    /// The receiver's journal key, loaded on first need; `None` (nothing resumed or
    /// journaled this run, said once) when it cannot be made or read safely.
    fn journal_key(&self) -> Option<Key> {
        *self.journal_key.get_or_init(|| match key::load() {
            Ok(k) => Some(k),
            Err(e) => {
                crate::progress::warn(&format!(
                    "partial files will not be resumable (journal key: {e})"
                ));
                None
            }
        })
    }

    /// An earlier run's partial file and journal, if both are files this user left (never
    /// followed, never a FIFO, one link) and the journal, authenticated with our key,
    /// belongs to this source version, this path and this partial file.
    #[allow(clippy::too_many_arguments)]
    fn open_resumable(
        &self,
        pfd: &std::os::fd::OwnedFd,
        partial: &[u8],
        jname: &[u8],
        key: &Key,
        path: &[u8],
        ident: &Identity,
        size: u64,
    ) -> Option<(File, File, journal::Ranges)> {
        let f = fsops::open_own_file(pfd, partial, OFlags::RDWR).ok()?;
        let st = f.metadata().ok()?;
        if st.len() != size {
            return None;
        }
        let mut j = fsops::open_own_file(pfd, jname, OFlags::RDWR).ok()?;
        let bind = journal::Binding {
            key,
            path,
            inode: st.ino(),
        };
        let (have, good) = journal::read(&mut j, &bind, ident).ok()??;
        // Drop a torn tail so new records follow the last intact one.
        j.set_len(good).ok()?;
        std::io::Seek::seek(&mut j, std::io::SeekFrom::Start(good)).ok()?;
        Some((f, j, have))
    }

    /// Hashes the old content in pieces for a delta; `None` when a delta does not fit.
    fn hash_pieces(
        &self,
        old: &File,
        old_len: u64,
        block: u64,
    ) -> io::Result<Option<(u32, Vec<[u8; 16]>)>> {
        if old_len == 0 {
            return Ok(None);
        }
        let mut chunk = DELTA_CHUNK;
        while old_len.div_ceil(chunk) > DELTA_MAX_PIECES && block % (chunk * 2) == 0 {
            chunk *= 2;
        }
        if block % chunk != 0 || old_len.div_ceil(chunk) > DELTA_MAX_PIECES {
            return Ok(None);
        }
        let key = self.key();
        let mut hashes = Vec::with_capacity(old_len.div_ceil(chunk) as usize);
        let mut buf = vec![0u8; (4 << 20) as usize];
        let mut pos = 0u64;
        let mut reader = old;
        while pos < old_len {
            let want = ((old_len - pos) as usize).min(buf.len());
            reader.read_exact(&mut buf[..want])?;
            for piece in buf[..want].chunks(chunk as usize) {
                hashes.push(piece_hash(&key, piece));
            }
            pos += want as u64;
        }
        Ok(Some((chunk as u32, hashes)))
    }
}

/// Creates afresh the journal of new partial file `partial` and writes its header; without
/// a key, removes any journal under that name and makes none.
fn new_journal(
    pfd: &std::os::fd::OwnedFd,
    name: &[u8],
    key: Option<&Key>,
    path: &[u8],
    ident: &Identity,
    partial: &File,
) -> io::Result<Option<File>> {
    let Some(key) = key else {
        fsops::remove_if_present(pfd, name)?;
        return Ok(None);
    };
    let bind = journal::Binding {
        key,
        path,
        inode: partial.metadata()?.ino(),
    };
    let mut f = fsops::create_new(pfd, name, OFlags::WRONLY | OFlags::APPEND)?;
    std::io::Write::write_all(&mut f, &journal::header(&bind, ident))?;
    Ok(Some(f))
}
