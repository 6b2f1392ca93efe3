//! `-K` (`--keep-dirlinks`): a symlink to a directory that was at the destination before
//! the run stands for the directory the sender sends. The one place the store follows a
//! destination symlink, so it follows only what it checked, and acts on descriptors: the
//! link is opened once (`O_PATH | O_NOFOLLOW`), its owner checked on that descriptor, its
//! target read from it (`readlinkat(fd, "")`) and resolved name by name from a descriptor,
//! a symlink on the way followed only when it too belongs to the receiving user or root;
//! at the end the name must still hold the link that was checked. A destination user who
//! swaps the link while haul looks at it gets what a link she planted gets: replaced by
//! the directory, as without `-K`.
//!
//! Not here: the paths below a kept link (`Store::at` resolves them from the descriptor
//! returned here, without symlinks), and which links this run made (`make_special`).

use std::io;
use std::os::fd::OwnedFd;

use rustix::fs::{self as rfs, AtFlags, FileType, Mode, OFlags};

use super::fsops;
use super::state::Store;
use crate::protocol::SafeRelPath;

/// Most symlinks followed for one kept link, itself included (Linux's own bound).
const MAX_LINKS: usize = 40;

impl Store {
    /// With -K, the directory that `name` in `pfd` leads to when it is a symlink to a
    /// directory that this run did not make and that belongs to the receiving user or
    /// root (a link someone else planted, or one swapped meanwhile, is replaced, as
    /// without -K).
    pub(super) fn kept_dirlink(
        &self,
        pfd: &OwnedFd,
        path: &SafeRelPath,
        name: &[u8],
    ) -> Option<OwnedFd> {
        if !self.accept().keep_dirlinks {
            return None;
        }
        if self.made_links.lock().map_or(true, |m| m.contains(path)) {
            return None;
        }
        let link = open_path(pfd, name).ok()?;
        let st = rfs::fstat(&link).ok()?;
        if FileType::from_raw_mode(st.st_mode) != FileType::Symlink || !trusted(st.st_uid) {
            return None;
        }
        let dir = follow(pfd, &link).ok()?;
        fsops::race_point("kept-dirlink");
        // The name must still hold the link checked: otherwise what was followed is not
        // what the destination has.
        let now = rfs::statat(pfd, name, AtFlags::SYMLINK_NOFOLLOW).ok()?;
        ((now.st_dev, now.st_ino) == (st.st_dev, st.st_ino)).then_some(dir)
    }
}

/// A link haul follows: the receiving user's or root's.
fn trusted(uid: u32) -> bool {
    uid == 0 || uid == rustix::process::geteuid().as_raw()
}

fn open_path(at: &OwnedFd, name: &[u8]) -> io::Result<OwnedFd> {
    let flags = OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    Ok(rfs::openat(at, name, flags, Mode::empty())?)
}

/// The target of the open symlink `link`, read from its descriptor.
fn target(link: &OwnedFd) -> io::Result<Vec<u8>> {
    Ok(rfs::readlinkat(link, c"", Vec::new())?.into_bytes())
}

/// The directory the symlink `link` (in directory `at`) leads to, opened for reading.
/// Each name on the way is opened `O_PATH | O_NOFOLLOW` from the directory before it; a
/// symlink there is followed only when trusted, at most [`MAX_LINKS`] in all, and
/// anything else but a directory ends the walk (`ENOTDIR`).
fn follow(at: &OwnedFd, link: &OwnedFd) -> io::Result<OwnedFd> {
    let dir = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let mut cur = rfs::openat(at, c".", dir, Mode::empty())?;
    // Names still to walk, the next one last; each target is at most PATH_MAX, so this
    // holds at most MAX_LINKS of them.
    let mut names: Vec<Vec<u8>> = Vec::new();
    let mut links = 1;
    let mut next = Some(target(link)?);
    loop {
        if let Some(t) = next.take() {
            if t.first() == Some(&b'/') {
                cur = rfs::open("/", dir, Mode::empty())?;
            }
            let parts = t
                .split(|&b| b == b'/')
                .filter(|p| !p.is_empty() && *p != b".");
            names.extend(parts.map(<[u8]>::to_vec).rev());
        }
        let Some(name) = names.pop() else {
            break;
        };
        let fd = open_path(&cur, &name)?;
        let st = rfs::fstat(&fd)?;
        match FileType::from_raw_mode(st.st_mode) {
            FileType::Directory => cur = fd,
            FileType::Symlink if trusted(st.st_uid) && links < MAX_LINKS => {
                links += 1;
                next = Some(target(&fd)?);
            }
            FileType::Symlink => return Err(rustix::io::Errno::LOOP.into()),
            _ => return Err(rustix::io::Errno::NOTDIR.into()),
        }
    }
    let read = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    Ok(rfs::openat(&cur, c".", read, Mode::empty())?)
}

#[cfg(test)]
pub(super) mod tests {
    use std::os::unix::fs::symlink;
    use std::path::Path;

    use crate::protocol::{Accept, Entry, EntryKind, SyncOptions};
    use crate::store::tests::{at_point, no_race};
    use crate::store::{fsops, Store};

    const NOBODY: u32 = 65534;

    fn entry(path: &str, kind: EntryKind) -> Entry {
        Entry {
            id: 0,
            path: path.as_bytes().to_vec(),
            kind,
            mode: 0o755,
            mtime_sec: 1_700_000_000,
            mtime_nsec: 0,
            uid: rustix::process::geteuid().as_raw(),
            gid: rustix::process::getegid().as_raw(),
            xattrs: None,
            checksum: None,
        }
    }

    pub(crate) fn keep_dirlinks_store(dest: &Path) -> Store {
        let s = Store::open(dest).unwrap();
        s.configure(1 << 20, SyncOptions::default(), [9u8; 32]);
        s.set_accept(Accept {
            keep_dirlinks: true,
            ..Accept::default()
        })
        .unwrap();
        s
    }

    /// Sends directories `wal` and `wal/<name>` to `dest`.
    fn send_below_wal(s: &Store, name: &str) -> crate::error::Result<()> {
        let below = format!("wal/{name}");
        s.apply_entries(vec![
            entry("", EntryKind::Dir),
            entry("wal", EntryKind::Dir),
            entry(&below, EntryKind::Dir),
        ])
        .map(|_| ())
    }

    #[test]
    fn keep_dirlinks_follows_a_link_that_was_there() {
        let tmp = tempfile::tempdir().unwrap();
        let (dest, disk) = (tmp.path().join("dest"), tmp.path().join("disk"));
        std::fs::create_dir_all(&dest).unwrap();
        std::fs::create_dir_all(disk.join("on")).unwrap();
        // Through a trusted link on the way, and back up with `..`.
        symlink(&disk, dest.join("mnt")).unwrap();
        symlink("mnt/on/../", dest.join("wal")).unwrap();
        let s = keep_dirlinks_store(&dest);
        send_below_wal(&s, "sub").unwrap();
        assert!(disk.join("sub").is_dir());
        assert!(std::fs::symlink_metadata(dest.join("wal"))
            .unwrap()
            .file_type()
            .is_symlink());
    }

    /// Issue 37 finding 2, made deterministic: the user who owns the destination swaps the
    /// kept link for her own link to elsewhere while haul looks at it (before, the check
    /// was by name and a second open followed whatever link was there by then).
    #[test]
    fn keep_dirlinks_never_follows_a_link_swapped_in_while_it_looked() {
        let tmp = tempfile::tempdir().unwrap();
        let (dest, outside) = (tmp.path().join("dest"), tmp.path().join("outside"));
        std::fs::create_dir_all(dest.join("legit")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        symlink("legit", dest.join("wal")).unwrap();
        let s = keep_dirlinks_store(&dest);
        let (wal, out) = (dest.join("wal"), outside.clone());
        at_point("kept-dirlink", move || {
            let evil = wal.with_file_name("evil");
            symlink(&out, &evil).unwrap();
            if fsops::is_root() {
                std::os::unix::fs::lchown(&evil, Some(NOBODY), Some(NOBODY)).unwrap();
            }
            std::fs::rename(&evil, &wal).unwrap();
        });
        let r = send_below_wal(&s, "pwned");
        no_race();
        assert!(!outside.join("pwned").exists(), "wrote outside DIR ({r:?})");
        // Treated as a link someone else planted: replaced by the directory.
        assert!(dest.join("wal/pwned").is_dir(), "{r:?}");
        assert!(std::fs::read_dir(dest.join("legit"))
            .unwrap()
            .next()
            .is_none());
    }

    /// A kept link is followed only through links as trusted as itself: one on the way
    /// that the destination's user made is not followed (before, the open followed it).
    #[test]
    fn keep_dirlinks_follows_no_foreign_link_on_the_way() {
        if !fsops::is_root() {
            println!("SKIPPED: needs root to make another user's symlink");
            return;
        }
        let tmp = tempfile::tempdir().unwrap();
        let (dest, outside) = (tmp.path().join("dest"), tmp.path().join("outside"));
        std::fs::create_dir_all(&dest).unwrap();
        std::fs::create_dir_all(outside.join("x")).unwrap();
        symlink("mid/x", dest.join("wal")).unwrap();
        symlink(&outside, dest.join("mid")).unwrap();
        std::os::unix::fs::lchown(dest.join("mid"), Some(NOBODY), Some(NOBODY)).unwrap();
        let s = keep_dirlinks_store(&dest);
        let r = send_below_wal(&s, "pwned");
        assert!(
            !outside.join("x/pwned").exists(),
            "wrote outside DIR ({r:?})"
        );
    }

    /// A link that leads to itself ends the walk (bounded), and is then replaced.
    #[test]
    fn keep_dirlinks_gives_up_on_a_loop() {
        let tmp = tempfile::tempdir().unwrap();
        let dest = tmp.path().join("dest");
        std::fs::create_dir_all(&dest).unwrap();
        symlink("wal", dest.join("wal")).unwrap();
        let s = keep_dirlinks_store(&dest);
        send_below_wal(&s, "sub").unwrap();
        assert!(dest.join("wal/sub").is_dir());
    }

    #[test]
    fn keep_dirlinks_never_follows_a_link_the_sender_just_made() {
        let tmp = tempfile::tempdir().unwrap();
        let (dest, elsewhere) = (tmp.path().join("dest"), tmp.path().join("elsewhere"));
        std::fs::create_dir_all(&dest).unwrap();
        std::fs::create_dir_all(&elsewhere).unwrap();
        let s = keep_dirlinks_store(&dest);
        let target = elsewhere.to_str().unwrap().as_bytes().to_vec();
        s.apply_entries(vec![
            entry("", EntryKind::Dir),
            entry("a", EntryKind::Symlink { target }),
            entry("a", EntryKind::Dir),
            entry("a/planted", EntryKind::Dir),
        ])
        .unwrap();
        assert!(!elsewhere.join("planted").exists());
        assert!(dest.join("a/planted").is_dir());
        assert!(!std::fs::symlink_metadata(dest.join("a"))
            .unwrap()
            .file_type()
            .is_symlink());
    }
}
