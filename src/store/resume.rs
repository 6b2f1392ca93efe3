//! Deciding what to ask the sender for, for each regular file: nothing when the quick
//! check (same size and mtime) says it is unchanged, the missing ranges when an earlier
//! run's partial file and journal belong to this same source version (resume), piece
//! hashes of the older version under the final name (delta), or everything.
//!
//! Nothing found in the destination is trusted by name: the older version is used through
//! a descriptor checked to be the file stat'ed, and leftovers of an earlier run only if
//! they are this user's files with one link and the journal carries this receiver's key
//! (see `key`); anything else is replaced and the file sent whole. Nor is the older
//! version trusted for what it is: the quick check gives it the sender's owner, mode and
//! attributes only when that cannot bless someone else's content (see [`kept`]), and
//! `--inplace` writes only into a file of the right owner with one link.
//!
//! Delta: for a dense file larger than one block whose older version exists, the old
//! content is hashed in 16 KiB pieces (16 bytes of keyed BLAKE3 each; database pages of 8
//! or 16 KiB do not move), the piece doubled while a file would have more than 262,144
//! pieces and the piece still divides the block (4 MiB blocks: up to 1 TiB; larger files
//! go whole), and the sender is asked with `Want::Delta`; it sends the pieces whose hash
//! differs and marks the rest KEEP. The partial file starts as a `copy_file_range` copy of
//! the old one (a reflink where offered); `--inplace` writes into the old file (no
//! journal, no rename). With `--checksum` the file of the same size is hashed whole
//! instead of the quick check (`codec::content_hash`, against the entry's `checksum`);
//! equal hashes count as unchanged under the same rules ([`kept`]; a time that differs is
//! applied like any metadata).
//!
//! It sets up the file's state and work file and then hands over to `partial`: it
//! deliberately writes no unit data and finishes no file itself.

use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::MetadataExt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use std::os::fd::AsFd;

use rustix::fs::{AtFlags, FileType, OFlags, Stat};

use super::fsops::{self, Owners};
use super::journal::{self, Identity};
use super::key::{self, Key};
use super::partial::copy_range;
use super::state::{FileState, JournalState, Received, Store};
use super::xattr;
use crate::codec::piece_hash;
use crate::error::{Error, Result};
use crate::progress::Counters;
use crate::protocol::{Entry, ProtocolError, SafeRelPath, Want, WantKind, Xattrs};

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

        // Quick check: same size and mtime means up to date (rsync's rule), when the file
        // may be given the entry's metadata (see `kept`); otherwise it is sent again.
        let (owners, ns) = (self.owners(), self.namespaces());
        if let Some((st, f)) = &existing {
            // --checksum: same size and content (the sender's hash of it), whatever the time.
            let same = match opts.checksum {
                false if opts.rules.size_only => st.st_size as u64 == size,
                false => st.st_size as u64 == size && same_mtime(st, &e),
                true => st.st_size as u64 == size && same_content(f, size, &e, &self.key()),
            };
            if same {
                let have = match e.xattrs {
                    Some(_) => xattr::read(xattr::Target::Fd(f.as_fd())).ok(),
                    None => None,
                };
                let verdict = kept(st, &e, (owners, ns), have.as_ref());
                if verdict != Kept::Resend {
                    if verdict == Kept::Update {
                        let done = fsops::apply_meta_fd(f, &e, owners, ns).map_err(err)?;
                        self.note_xattrs(&path, done);
                    }
                    self.unchanged_files.fetch_add(1, Ordering::Relaxed);
                    self.unchanged_bytes
                        .fetch_add(data_bytes, Ordering::Relaxed);
                    return Ok(None);
                }
            }
        }
        // Written in place only if it is a file of ours to give metadata to (one link, the
        // right owner): never another name's inode (a planted hardlink to /etc/passwd).
        let inplace_ok = existing
            .as_ref()
            .is_some_and(|(st, _)| st.st_nlink == 1 && owner_ok(st, &e, owners));

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
                Counters::add(&self.stats.resumed_files, 1);
                Counters::add(&self.stats.resumed_bytes, have_bytes);
                want = WantKind::Ranges(journal::missing(size, &have));
                received = have.into_iter().collect();
                journal = Some(j);
                file = Some(f);
            } else if let (Some((st, old)), true) = (existing, dense) {
                // Delta against the older version under the final name, read through the
                // descriptor already checked; written only --inplace.
                let old_len = st.st_size as u64;
                let in_place = opts.inplace && inplace_ok;
                let old = if in_place {
                    fsops::open_same_file(pfd, &name, OFlags::RDWR, &st).map_err(err)?
                } else {
                    old
                };
                if let Some((chunk, hashes)) =
                    self.hash_pieces(&old, old_len, block).map_err(err)?
                {
                    want = WantKind::Delta { chunk, hashes };
                    if in_place {
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

/// Whether `st` has `e`'s mtime, to the nanosecond.
pub(super) fn same_mtime(st: &Stat, e: &Entry) -> bool {
    st.st_mtime == e.mtime_sec && st.st_mtime_nsec as u32 == e.mtime_nsec
}

/// `--checksum`: whether the first `size` bytes of `f` hash as the sender's `e.checksum`
/// says its content does (`false` without one, or when `f` cannot be read).
pub(super) fn same_content(f: &File, size: u64, e: &Entry, key: &[u8; 32]) -> bool {
    e.checksum
        .is_some_and(|c| crate::codec::content_hash(key, f, size).is_ok_and(|h| h == c))
}

/// What the quick check makes of a destination file that has an entry's size and mtime.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kept {
    /// Unchanged; its owner, mode, attributes and mtime are made the entry's.
    Update,
    /// Unchanged, and its metadata already is the entry's: nothing is applied.
    AsIs,
    /// Sent again, into a new file renamed over it: its metadata cannot safely be made
    /// the entry's.
    Resend,
}

/// Whether `st` (an existing file with `e`'s size and mtime, or with `--checksum` its size
/// and content, not written this run, whose attributes are `have` when `e` brings some)
/// counts as unchanged. Same size and mtime
/// says nothing about who wrote the content: giving it `e`'s metadata is safe only when it
/// already belongs to the owner to apply or to the receiving user (else a user's planted
/// file would become root's), has one link (else another name's inode changes too, outside
/// DIR perhaps: a planted hardlink to `/etc/shadow`), and gains no set-id bit and no file
/// capability (which would bless content nobody verified). A file whose metadata already
/// is `e`'s needs nothing applied, so its links do not matter (a hardlink group an earlier
/// run made, a `cp -al` snapshot).
pub(super) fn kept(
    st: &Stat,
    e: &Entry,
    (owners, ns): (Owners, xattr::Namespaces),
    have: Option<&Xattrs>,
) -> Kept {
    let (uid, gid) = wanted_owner(e, owners);
    let mode = e.mode & 0o7777;
    let attrs_same = match (&e.xattrs, have) {
        (None, _) => true,
        (Some(want), Some(have)) => !xattr::differs(have, want, ns),
        (Some(_), None) => false,
    };
    let as_is = st.st_uid == uid
        && gid.is_none_or(|g| st.st_gid == g)
        && st.st_mode & 0o7777 == mode
        && same_mtime(st, e)
        && attrs_same;
    if as_is {
        return Kept::AsIs;
    }
    let set_id = mode & 0o6000 & !st.st_mode != 0;
    let new_cap = e
        .xattrs
        .as_ref()
        .and_then(|x| x.get(CAPABILITY))
        .is_some_and(|want| have.and_then(|x| x.get(CAPABILITY)) != Some(want));
    match st.st_nlink == 1 && owner_ok(st, e, owners) && !set_id && !new_cap {
        true => Kept::Update,
        false => Kept::Resend,
    }
}

const CAPABILITY: &[u8] = b"security.capability";

/// The owner and group (`None`: left as it is) that `e`'s metadata gives a file here.
fn wanted_owner(e: &Entry, owners: Owners) -> (u32, Option<u32>) {
    let me = rustix::process::geteuid().as_raw();
    match owners {
        Owners::Both => (e.uid, Some(e.gid)),
        Owners::Group => (me, Some(e.gid)),
        Owners::Neither => (me, None),
    }
}

/// Whether `st` belongs to the owner `e` gives it or to the receiving user.
fn owner_ok(st: &Stat, e: &Entry, owners: Owners) -> bool {
    let me = rustix::process::geteuid().as_raw();
    st.st_uid == me || st.st_uid == wanted_owner(e, owners).0
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

#[cfg(test)]
mod tests {
    use std::fs;
    use std::os::unix::fs::PermissionsExt;

    use super::{kept, Kept};
    use crate::protocol::{EntryKind, Xattr, Xattrs};
    use crate::store::fsops::Owners;
    use crate::store::tests::entry;
    use crate::store::xattr::Namespaces;

    const ALL: (Owners, Namespaces) = (Owners::Both, Namespaces::All);

    fn caps() -> Xattrs {
        let cap = Xattr {
            name: b"security.capability".to_vec(),
            value: vec![1, 2, 3],
        };
        Xattrs::new(vec![cap]).unwrap()
    }

    /// `kept` on its own: who may be given what, by owner, links, set-id bits and
    /// capabilities (the receiving user's files here; `Both` owners as for root).
    #[test]
    fn the_quick_check_blesses_only_what_it_may() {
        let tmp = tempfile::tempdir().unwrap();
        let f = tmp.path().join("f");
        fs::write(&f, b"x").unwrap();
        fs::set_permissions(&f, fs::Permissions::from_mode(0o755)).unwrap();
        let me = rustix::process::geteuid().as_raw();
        let st = || rustix::fs::stat(&f).unwrap();
        let file = EntryKind::File {
            size: 1,
            data_bytes: 1,
        };
        let mut e = entry(1, "f", file, 0o755);
        e.uid = me;
        e.gid = rustix::process::getegid().as_raw();
        (e.mtime_sec, e.mtime_nsec) = (st().st_mtime, st().st_mtime_nsec as u32);
        assert_eq!(kept(&st(), &e, ALL, None), Kept::AsIs);
        e.mode = 0o700;
        assert_eq!(kept(&st(), &e, ALL, None), Kept::Update);
        // Another owner to give it, from the receiving user's file: fine.
        e.uid = me + 1;
        assert_eq!(kept(&st(), &e, ALL, None), Kept::Update);
        // Set-id bits or capabilities it does not have: never.
        e.mode = 0o4755;
        assert_eq!(kept(&st(), &e, ALL, None), Kept::Resend);
        e.mode = 0o755;
        e.xattrs = Some(caps());
        let none = Xattrs::default();
        assert_eq!(kept(&st(), &e, ALL, Some(&none)), Kept::Resend);
        e.xattrs = None;
        // A second link: its metadata may not change (the other name may be outside).
        fs::hard_link(&f, tmp.path().join("g")).unwrap();
        assert_eq!(kept(&st(), &e, ALL, None), Kept::Resend);
        e.uid = me;
        assert_eq!(kept(&st(), &e, ALL, None), Kept::AsIs);
        // Someone else's file (not root's), with one link.
        fs::remove_file(tmp.path().join("g")).unwrap();
        if me == 0 {
            std::os::unix::fs::chown(&f, Some(65534), None).unwrap();
            e.mode = 0o700;
            assert_eq!(kept(&st(), &e, ALL, None), Kept::Resend);
            e.uid = 65534;
            assert_eq!(kept(&st(), &e, ALL, None), Kept::Update);
        }
    }

    /// `--inplace` writes into the older version's inode only when it is a file of ours
    /// with one link: a planted hardlink to a file outside DIR is left alone (before, its
    /// length and content were changed in place).
    #[test]
    fn inplace_never_writes_through_a_planted_hardlink() {
        let tmp = tempfile::tempdir().unwrap();
        let (root, victim) = (tmp.path().join("d"), tmp.path().join("victim"));
        fs::create_dir(&root).unwrap();
        fs::write(&victim, vec![b'a'; 2 << 20]).unwrap();
        fs::hard_link(&victim, root.join("f")).unwrap();
        let s = crate::store::Store::open(&root).unwrap();
        let opts = crate::protocol::SyncOptions {
            inplace: true,
            ..Default::default()
        };
        s.configure(1 << 20, opts, [9u8; 32]);
        s.journal_key.set(Some([1u8; 32])).unwrap();
        let size = (2 << 20) + 1;
        let file = EntryKind::File {
            size,
            data_bytes: size,
        };
        let me = rustix::process::geteuid().as_raw();
        let mut e = entry(1, "f", file, 0o644);
        (e.uid, e.gid) = (me, rustix::process::getegid().as_raw());
        let want = s.apply_entries(vec![entry(0, "", EntryKind::Dir, 0o755), e]);
        assert!(want.is_ok(), "{want:?}");
        assert_eq!(fs::metadata(&victim).unwrap().len(), 2 << 20);
    }
}
