//! What `-v`, `-i` and `--dry-run` need from the destination: each manifest entry compared
//! with what is there (an [`Item`] saying what a run changes), and, in a dry run, the
//! account of what a real run would do instead of doing it.
//!
//! It only looks (`fstatat` without following symlinks, `readlinkat`) and never creates,
//! writes or removes anything; the parts that do (`resume`, `other`, `mirror`) are called
//! only when it is not a dry run.

use std::sync::atomic::Ordering;

use std::os::fd::AsFd;

use rustix::fs::{AtFlags, FileType, Mode, OFlags, Stat};

use super::fsops;
use super::resume;
use super::state::Store;
use super::xattr;
use crate::progress::escape_bytes;
use crate::protocol::{Change, Entry, EntryKind, Item, ItemKind, SafeRelPath, Xattrs};

impl Store {
    /// Collect an [`Item`] for every entry that changes (for `-v`/`-i`), taken with
    /// [`Store::take_items`]. Off by default: it costs a stat per entry.
    pub fn collect_items(&self, on: bool) {
        self.collect.store(on, Ordering::Relaxed);
    }

    /// The items collected since the last call.
    pub fn take_items(&self) -> Vec<Item> {
        self.items
            .lock()
            .map(|mut i| std::mem::take(&mut *i))
            .unwrap_or_default()
    }

    /// Whether items are wanted.
    pub(super) fn collecting(&self) -> bool {
        self.collect.load(Ordering::Relaxed)
    }

    /// Keeps `item` when items are collected.
    pub(super) fn note_item(&self, item: Item) {
        if self.collecting() {
            if let Ok(mut i) = self.items.lock() {
                i.push(item);
            }
        }
    }

    /// Counts a file whose extended attributes could not all be applied (remembering the
    /// first), for the one warning [`Store::warn_xattrs`] prints.
    pub(super) fn note_xattrs(&self, path: &SafeRelPath, done: xattr::Applied) {
        let Some(e) = done.failed else { return };
        if self.xattr_failed.fetch_add(1, Ordering::Relaxed) == 0 {
            if let Ok(mut first) = self.xattr_first.lock() {
                *first = Some(format!("{}: {e}", escape_bytes(path.as_bytes())));
            }
        }
    }

    /// One warning for the whole run when extended attributes could not be applied (a
    /// file system without them, or a namespace this user may not set). Not an error:
    /// the data and the rest of the metadata are there, as with rsync.
    pub(super) fn warn_xattrs(&self) {
        let n = self.xattr_failed.load(Ordering::Relaxed);
        let first = self.xattr_first.lock().ok().and_then(|f| f.clone());
        if let (1.., Some(first)) = (n, first) {
            crate::progress::warn(&format!(
                "extended attributes (ACLs, labels, user.*) not kept on {n} file{} here \
                 (first: {first}): the file system or this user cannot set them; \
                 --no-xattrs leaves them out",
                if n == 1 { "" } else { "s" }
            ));
        }
    }

    /// What is at `path` now (not following a symlink); `None` when nothing is, or the
    /// destination root itself does not exist yet (a dry run).
    pub(super) fn lookup(&self, path: &SafeRelPath) -> Option<Stat> {
        if self.absent || (self.fresh && path.is_root()) {
            return None;
        }
        let Some((parent, name)) = path.split_last() else {
            return rustix::fs::fstat(&self.root).ok();
        };
        let pfd = self.at(&parent, fsops::open_dir).ok()?;
        rustix::fs::statat(&pfd, name, AtFlags::SYMLINK_NOFOLLOW).ok()
    }

    /// What applying `e` at `path` changes, compared with what is there now; `None` when
    /// nothing does. Call before applying it.
    pub(super) fn observe(&self, path: &SafeRelPath, e: &Entry) -> Option<Item> {
        let (kind, ftype, target) = match &e.kind {
            EntryKind::Dir => (ItemKind::Dir, FileType::Directory, &[][..]),
            EntryKind::File { .. } => (ItemKind::File, FileType::RegularFile, &[][..]),
            EntryKind::Symlink { target } => (ItemKind::Symlink, FileType::Symlink, &target[..]),
            EntryKind::Hardlink { target } => {
                (ItemKind::Hardlink, FileType::RegularFile, &target[..])
            }
            EntryKind::Fifo => (ItemKind::Special, FileType::Fifo, &[][..]),
            EntryKind::Device { block: true, .. } => {
                (ItemKind::Device, FileType::BlockDevice, &[][..])
            }
            EntryKind::Device { .. } => (ItemKind::Device, FileType::CharacterDevice, &[][..]),
        };
        // A hardlink's inode may be a device or FIFO too (`-H` links them as rsync does).
        let here = self.lookup(path).filter(|st| match kind {
            ItemKind::Hardlink => FileType::from_raw_mode(st.st_mode) != FileType::Directory,
            _ => FileType::from_raw_mode(st.st_mode) == ftype,
        });
        let mut change = Change::default();
        match here {
            None => {
                change.new = true;
                change.sent = kind == ItemKind::File;
            }
            Some(st) => self.compare(path, e, &st, &mut change),
        }
        if kind == ItemKind::Hardlink && !change.new {
            return None;
        }
        change.any().then(|| Item {
            path: path.as_bytes().to_vec(),
            kind,
            change,
            target: target.to_vec(),
        })
    }

    /// Whether a FIFO or device `e` is at `path` already, with all of it (type, device
    /// number, mode, owners, time, attributes): it stays, as rsync leaves it, for a new
    /// inode would break its other names (`-H`).
    pub(super) fn special_unchanged(&self, path: &SafeRelPath, e: &Entry) -> bool {
        let Some(st) = self.lookup(path) else {
            return false;
        };
        let same = match e.kind {
            EntryKind::Fifo => FileType::from_raw_mode(st.st_mode) == FileType::Fifo,
            EntryKind::Device { block, rdev } => {
                let want = match block {
                    true => FileType::BlockDevice,
                    false => FileType::CharacterDevice,
                };
                FileType::from_raw_mode(st.st_mode) == want && st.st_rdev == rdev
            }
            _ => false,
        };
        same && self.observe(path, e).is_none()
    }

    /// Fills `change` for an entry whose destination `st` is of the same kind.
    fn compare(&self, path: &SafeRelPath, e: &Entry, st: &Stat, change: &mut Change) {
        let mtime_differs = st.st_mtime != e.mtime_sec || st.st_mtime_nsec as u32 != e.mtime_nsec;
        match &e.kind {
            EntryKind::File { size, .. } => {
                change.size = st.st_size as u64 != *size;
                change.time = mtime_differs;
                // The quick check (`resume`): same size and mtime is up to date; with
                // --checksum, same size and content (whatever the time).
                let opts = self.options();
                change.sent = match opts.checksum {
                    false if opts.rules.size_only => change.size,
                    false => change.size || change.time,
                    true => change.size || !self.same_content_here(path, *size, e),
                };
                change.content = self.options().checksum && change.sent;
            }
            EntryKind::Hardlink { target } => {
                // Already a name of its target: nothing to do.
                let same = SafeRelPath::parse(target)
                    .ok()
                    .and_then(|t| self.lookup(&t))
                    .is_some_and(|t| (t.st_dev, t.st_ino) == (st.st_dev, st.st_ino));
                change.new = !same;
                return;
            }
            EntryKind::Symlink { target } => {
                let now = path.split_last().and_then(|(parent, name)| {
                    let pfd = self.at(&parent, fsops::open_dir).ok()?;
                    rustix::fs::readlinkat(&pfd, name, Vec::new()).ok()
                });
                change.content = now.as_ref().map(|t| t.as_bytes()) != Some(&target[..]);
                change.time = mtime_differs;
                (change.acls, change.xattrs) =
                    xattrs_differ(self.xattrs_here(path, e).as_ref(), e, self.namespaces());
                return;
            }
            _ => change.time = mtime_differs,
        }
        let have = self.xattrs_here(path, e);
        (change.acls, change.xattrs) = xattrs_differ(have.as_ref(), e, self.namespaces());
        change.perms = st.st_mode & 0o7777 != e.mode & 0o7777;
        let owners = self.owners();
        change.owner = owners == fsops::Owners::Both && st.st_uid != e.uid;
        change.group = owners != fsops::Owners::Neither && st.st_gid != e.gid;
        if let EntryKind::File { .. } = e.kind {
            // A file the quick check may not give this metadata to is sent again.
            let how = (owners, self.namespaces());
            change.sent |= resume::kept(st, e, how, have.as_ref()) == resume::Kept::Resend;
        }
    }

    /// `--checksum`: whether the file at `path` (opened without following a symlink) has
    /// the content `e`'s hash says, as `resume` decides it.
    fn same_content_here(&self, path: &SafeRelPath, size: u64, e: &Entry) -> bool {
        let Some((parent, name)) = path.split_last() else {
            return false;
        };
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
        let file = self.at(&parent, fsops::open_dir).and_then(|pfd| {
            Ok(std::fs::File::from(rustix::fs::openat(
                &pfd,
                name,
                flags,
                Mode::empty(),
            )?))
        });
        file.is_ok_and(|f| resume::same_content(&f, size, e, &self.key()))
    }

    /// The extended attributes at `path`, when `e` brings some (`None` also when they
    /// cannot be read).
    fn xattrs_here(&self, path: &SafeRelPath, e: &Entry) -> Option<Xattrs> {
        e.xattrs.as_ref()?;
        match path.split_last() {
            None => xattr::read(xattr::Target::Fd(self.root.as_fd())),
            Some((parent, name)) => self.at(&parent, fsops::open_dir).and_then(|pfd| {
                let flags = OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC;
                let fd = rustix::fs::openat(&pfd, name, flags, Mode::empty())?;
                xattr::read(xattr::Target::Path(fd.as_fd()))
            }),
        }
        .ok()
    }

    /// A dry run's account of `e` (whose `item` says what would change): counted as a
    /// real run would count it; directories are remembered for `--delete`'s listing.
    pub(super) fn dry_entry(&self, path: SafeRelPath, e: Entry, item: Option<&Item>) {
        match e.kind {
            EntryKind::File { size, data_bytes } => {
                if item.is_some_and(|i| i.change.sent) {
                    self.stats.done_files.fetch_add(1, Ordering::Relaxed);
                    self.stats.done_size.fetch_add(size, Ordering::Relaxed);
                } else {
                    self.unchanged_files.fetch_add(1, Ordering::Relaxed);
                    self.unchanged_bytes
                        .fetch_add(data_bytes, Ordering::Relaxed);
                }
            }
            EntryKind::Dir => {
                self.other.fetch_add(1, Ordering::Relaxed);
                if let Ok(mut d) = self.dirs.lock() {
                    d.meta(path, e);
                }
            }
            _ => {
                self.other.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// Whether the ACLs, and the other extended attributes, of a destination that has `have`
/// differ from those `e` brings (never, when it brings none: they are left alone; nor when
/// they cannot be read).
fn xattrs_differ(have: Option<&Xattrs>, e: &Entry, ns: xattr::Namespaces) -> (bool, bool) {
    let (Some(want), Some(have)) = (&e.xattrs, have) else {
        return (false, false);
    };
    let part = |x: &Xattrs, acl: bool| {
        let mut x = x.clone();
        x.retain(|n| n.starts_with(b"system.posix_acl_") == acl);
        x
    };
    (
        xattr::differs(&part(have, true), &part(want, true), ns),
        xattr::differs(&part(have, false), &part(want, false), ns),
    )
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::protocol::SyncOptions;

    fn entry(id: u64, path: &str, kind: EntryKind) -> Entry {
        Entry {
            id,
            path: path.as_bytes().to_vec(),
            kind,
            mode: 0o644,
            mtime_sec: 1_700_000_000,
            mtime_nsec: 0,
            uid: 0,
            gid: 0,
            xattrs: None,
            checksum: None,
        }
    }

    fn dry(store: &Store, delete: bool) {
        let opts = SyncOptions {
            dry_run: true,
            delete,
            items: true,
            ..SyncOptions::default()
        };
        store.configure(1 << 20, opts, [9; 32]);
        store.collect_items(true);
    }

    #[test]
    fn a_dry_run_into_a_missing_root_creates_nothing_and_lists_everything() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("a/b");
        let store = Arc::new(Store::open_dry(&root).unwrap());
        dry(&store, true);
        store.start();
        let file = EntryKind::File {
            size: 5,
            data_bytes: 5,
        };
        let need = store
            .apply_entries(vec![
                entry(0, "", EntryKind::Dir),
                entry(1, "d", EntryKind::Dir),
                entry(2, "d/f", file),
            ])
            .unwrap();
        assert!(need.is_empty(), "a dry run wants no data");
        let summary = store.finish().unwrap();
        assert!(!tmp.path().join("a").exists());
        assert_eq!((summary.files, summary.dry_run), (1, true));
        let items = store.take_items();
        assert_eq!(items.len(), 3);
        assert!(items.iter().all(|i| i.change.new));
    }

    #[test]
    fn a_dry_run_lists_deletions_and_keeps_them() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir(tmp.path().join("old")).unwrap();
        std::fs::write(tmp.path().join("old/x"), "x").unwrap();
        let store = Arc::new(Store::open_dry(tmp.path()).unwrap());
        dry(&store, true);
        store.start();
        store
            .apply_entries(vec![entry(0, "", EntryKind::Dir)])
            .unwrap();
        let summary = store.finish().unwrap();
        assert_eq!(summary.deleted, 2);
        assert!(tmp.path().join("old/x").exists());
        let gone: Vec<_> = store
            .take_items()
            .into_iter()
            .filter(|i| i.change.deleted)
            .map(|i| (i.path, i.kind))
            .collect();
        assert_eq!(
            gone,
            [
                (b"old/x".to_vec(), ItemKind::File),
                (b"old".to_vec(), ItemKind::Dir)
            ]
        );
    }
}
