//! Opening a relative path beneath a directory descriptor without following a symlink
//! anywhere on the way, the last name included, and without leaving the directory.
//!
//! `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)` does it in one
//! call (Linux 5.6). Older kernels (RHEL 8's 4.18, Debian 10's 4.19, Ubuntu 18.04's 4.15
//! are still common on database servers) lack it; there, once the first call has said
//! `ENOSYS`, every open walks the names one by one: each directory on the way is opened
//! `O_PATH | O_DIRECTORY | O_NOFOLLOW` from the one before (a symlink there fails with
//! `ENOTDIR` or `ELOOP`), the last name with the caller's flags plus `O_NOFOLLOW`. Both
//! refuse `..` and absolute paths with `EXDEV`, as `openat2` does. The sender (opening
//! what it walked, `plan::beneath`) and the receiver (creating beneath its destination,
//! `store::fsops`) share this. Hand-written: neither rustix nor std has a portable
//! "beneath" open.

use std::ffi::OsStr;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path};
use std::sync::atomic::{AtomicBool, Ordering};

use rustix::fs::{Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

const RESOLVE: ResolveFlags = ResolveFlags::BENEATH
    .union(ResolveFlags::NO_SYMLINKS)
    .union(ResolveFlags::NO_MAGICLINKS);

/// Set once `openat2` said the kernel lacks it (before 5.6): each open walks the names.
static NO_OPENAT2: AtomicBool = AtomicBool::new(false);

/// Opens `rel` beneath `dir` with `flags | O_CLOEXEC` (and `mode` where `flags` create),
/// following no symlink. An empty `rel` is `dir` itself.
pub fn open(dir: BorrowedFd<'_>, rel: &[u8], flags: OFlags, mode: Mode) -> Result<OwnedFd, Errno> {
    let rel = if rel.is_empty() { b"." } else { rel };
    let flags = flags | OFlags::CLOEXEC;
    // openat2 rejects a mode without O_CREAT or O_TMPFILE.
    let mode = match flags.contains(OFlags::CREATE) || flags.contains(OFlags::TMPFILE) {
        true => mode,
        false => Mode::empty(),
    };
    if !NO_OPENAT2.load(Ordering::Relaxed) {
        loop {
            match rustix::fs::openat2(dir, rel, flags, mode, RESOLVE) {
                // A concurrent rename raced the lookup.
                Err(Errno::AGAIN | Errno::INTR) => continue,
                Err(Errno::NOSYS) => break NO_OPENAT2.store(true, Ordering::Relaxed),
                r => return r,
            }
        }
    }
    by_names(dir, rel, flags, mode)
}

/// [`open`] without `openat2`: one `openat` per name, never following a symlink.
pub fn by_names(
    dir: BorrowedFd<'_>,
    rel: &[u8],
    flags: OFlags,
    mode: Mode,
) -> Result<OwnedFd, Errno> {
    let mut names = Vec::new();
    for c in Path::new(OsStr::from_bytes(rel)).components() {
        match c {
            Component::Normal(n) => names.push(n),
            Component::CurDir => {}
            Component::ParentDir | Component::RootDir | Component::Prefix(_) => {
                return Err(Errno::XDEV)
            }
        }
    }
    let flags = flags | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let Some((last, dirs)) = names.split_last() else {
        return rustix::fs::openat(dir, ".", flags, mode);
    };
    let mut held: Option<OwnedFd> = None;
    let on_way = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    for name in dirs {
        let at = held.as_ref().map_or(dir, |f| f.as_fd());
        held = Some(rustix::fs::openat(at, *name, on_way, Mode::empty())?);
    }
    let at = held.as_ref().map_or(dir, |f| f.as_fd());
    rustix::fs::openat(at, *last, flags, mode)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::symlink;

    /// `d/t/a/b/f` (the root is `t`), `d/elsewhere/b/f` outside it.
    fn tree() -> (tempfile::TempDir, OwnedFd) {
        let d = tempfile::tempdir().unwrap();
        let t = d.path().join("t");
        fs::create_dir_all(t.join("a/b")).unwrap();
        fs::write(t.join("a/b/f"), b"mine").unwrap();
        fs::create_dir_all(d.path().join("elsewhere/b")).unwrap();
        fs::write(d.path().join("elsewhere/b/f"), b"secret").unwrap();
        let fd = rustix::fs::open(&t, OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty()).unwrap();
        (d, fd)
    }

    type Opener = fn(BorrowedFd<'_>, &[u8], OFlags, Mode) -> Result<OwnedFd, Errno>;

    /// `openat2` (this kernel has it) and the fallback.
    const BOTH: [Opener; 2] = [open, by_names];

    fn contents(fd: OwnedFd) -> String {
        fs::read_to_string(format!("/proc/self/fd/{}", fd.as_raw_fd())).unwrap()
    }

    #[test]
    fn nested_files_and_directories_are_opened() {
        let (_d, root) = tree();
        for o in BOTH {
            let f = o(root.as_fd(), b"a/b/f", OFlags::RDONLY, Mode::empty()).unwrap();
            assert_eq!(contents(f), "mine");
            let dir = OFlags::RDONLY | OFlags::DIRECTORY;
            assert!(o(root.as_fd(), b"a/b", dir, Mode::empty()).is_ok());
            assert!(o(root.as_fd(), b"", dir, Mode::empty()).is_ok());
            assert!(o(root.as_fd(), b"./a/./b/f", OFlags::RDONLY, Mode::empty()).is_ok());
        }
    }

    #[test]
    fn files_are_created_exclusively_and_anonymous_files_made() {
        let (d, root) = tree();
        for (i, o) in BOTH.into_iter().enumerate() {
            let name = format!("a/new{i}");
            let create = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL;
            let mode = Mode::from_raw_mode(0o600);
            o(root.as_fd(), name.as_bytes(), create, mode).unwrap();
            let m = fs::metadata(d.path().join("t").join(&name)).unwrap();
            assert_eq!(
                std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o777,
                0o600
            );
            let again = o(root.as_fd(), name.as_bytes(), create, mode);
            assert_eq!(again.err(), Some(Errno::EXIST));
            let tmp = OFlags::RDWR | OFlags::TMPFILE;
            assert!(o(root.as_fd(), b"a/b", tmp, mode).is_ok());
            assert_eq!(
                o(root.as_fd(), b"a/nothing/x", create, mode).err(),
                Some(Errno::NOENT)
            );
        }
    }

    #[test]
    fn a_directory_on_the_way_swapped_for_a_symlink_is_refused() {
        for target in ["ABS", "../elsewhere"] {
            let (d, root) = tree();
            let t = d.path().join("t");
            fs::rename(t.join("a"), d.path().join("moved")).unwrap();
            match target {
                "ABS" => symlink(d.path().join("elsewhere"), t.join("a")).unwrap(),
                rel => symlink(rel, t.join("a")).unwrap(),
            }
            for o in BOTH {
                let r = o(root.as_fd(), b"a/b/f", OFlags::RDONLY, Mode::empty());
                assert!(
                    matches!(r, Err(Errno::LOOP | Errno::NOTDIR | Errno::XDEV)),
                    "{r:?}"
                );
                let create = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL;
                let r = o(
                    root.as_fd(),
                    b"a/b/planted",
                    create,
                    Mode::from_raw_mode(0o600),
                );
                assert!(r.is_err());
                let r = o(
                    root.as_fd(),
                    b"a/b",
                    OFlags::RDWR | OFlags::TMPFILE,
                    Mode::from_raw_mode(0o600),
                );
                assert!(r.is_err());
            }
            assert!(!d.path().join("elsewhere/b/planted").exists());
        }
    }

    #[test]
    fn the_last_name_a_symlink_is_neither_followed_nor_created_through() {
        let (d, root) = tree();
        let t = d.path().join("t");
        symlink(d.path().join("elsewhere/b/f"), t.join("a/link")).unwrap();
        symlink(d.path().join("elsewhere/b/made"), t.join("a/dangling")).unwrap();
        for o in BOTH {
            let r = o(root.as_fd(), b"a/link", OFlags::RDONLY, Mode::empty());
            assert_eq!(r.err(), Some(Errno::LOOP));
            let create = OFlags::WRONLY | OFlags::CREATE;
            let r = o(
                root.as_fd(),
                b"a/dangling",
                create,
                Mode::from_raw_mode(0o600),
            );
            assert!(r.is_err());
        }
        assert!(!d.path().join("elsewhere/b/made").exists());
    }

    #[test]
    fn dot_dot_and_absolute_paths_are_refused() {
        let (_d, root) = tree();
        for o in BOTH {
            for rel in [
                &b"../elsewhere/b/f"[..],
                b"a/../../elsewhere/b/f",
                b"/etc/hostname",
            ] {
                let r = o(root.as_fd(), rel, OFlags::RDONLY, Mode::empty());
                assert_eq!(
                    r.err(),
                    Some(Errno::XDEV),
                    "{}",
                    String::from_utf8_lossy(rel)
                );
            }
        }
    }
}
