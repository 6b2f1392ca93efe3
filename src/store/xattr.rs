//! Extended attributes of files on this host, always through a descriptor: read (the
//! sender's walk, and the receiver's look at what a destination file has), compared, and
//! applied by the receiver.
//!
//! Regular files and directories use `flistxattr`/`fgetxattr`/`fsetxattr` on a descriptor
//! opened for them. A symlink cannot be opened for I/O, and Linux has no descriptor-based
//! xattr call for an `O_PATH` descriptor before `getxattrat` (6.13), so a symlink's go
//! through `/proc/self/fd/N` of an `O_PATH | O_NOFOLLOW` descriptor: the magic link names
//! exactly the inode checked, nobody can repoint it, and the (following) path calls stop
//! at that inode, the link itself — the same means `fsops::apply_meta_made` uses for a
//! link's mode and times.
//!
//! Not here: which attributes a receiver takes (`protocol::Accept`), and the bounds on
//! what a sender may send (`protocol::Xattrs`).

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

use rustix::fs::XattrFlags;
use rustix::io::Errno;

use crate::protocol::{known_name, Xattr, Xattrs, MAX_XATTR_VALUE};

/// Largest list of names Linux returns (`XATTR_LIST_MAX`).
const LIST_MAX: usize = 64 << 10;

/// How to reach one file's attributes.
#[derive(Clone, Copy)]
pub enum Target<'a> {
    /// A descriptor opened for I/O (regular file, directory).
    Fd(BorrowedFd<'a>),
    /// An `O_PATH` descriptor (a symlink), reached through `/proc/self/fd/N`.
    Path(BorrowedFd<'a>),
}

impl Target<'_> {
    fn proc(fd: BorrowedFd<'_>) -> String {
        format!("/proc/self/fd/{}", fd.as_raw_fd())
    }

    fn list(self, buf: &mut [u8]) -> Result<usize, Errno> {
        match self {
            Target::Fd(fd) => rustix::fs::flistxattr(fd, buf),
            Target::Path(fd) => rustix::fs::listxattr(Self::proc(fd).as_str(), buf),
        }
    }

    fn get(self, name: &[u8], buf: &mut [u8]) -> Result<usize, Errno> {
        match self {
            Target::Fd(fd) => rustix::fs::fgetxattr(fd, name, buf),
            Target::Path(fd) => rustix::fs::getxattr(Self::proc(fd).as_str(), name, buf),
        }
    }

    fn set(self, name: &[u8], value: &[u8]) -> Result<(), Errno> {
        let flags = XattrFlags::empty();
        match self {
            Target::Fd(fd) => rustix::fs::fsetxattr(fd, name, value, flags),
            Target::Path(fd) => rustix::fs::setxattr(Self::proc(fd).as_str(), name, value, flags),
        }
    }

    fn remove(self, name: &[u8]) -> Result<(), Errno> {
        match self {
            Target::Fd(fd) => rustix::fs::fremovexattr(fd, name),
            Target::Path(fd) => rustix::fs::removexattr(Self::proc(fd).as_str(), name),
        }
    }
}

/// The attributes of `t` that haul copies (see `protocol::known_name`); none on a file
/// system without extended attributes. An attribute removed between listing and reading
/// is left out.
pub fn read(t: Target<'_>) -> io::Result<Xattrs> {
    // Most files have no or few attributes: a small list buffer on the stack, and the
    // largest one Linux can return only when that is too small.
    let mut small = [0u8; 1024];
    let mut big = Vec::new();
    let names = match t.list(&mut small) {
        Ok(n) => &small[..n],
        Err(Errno::RANGE) => {
            big.resize(LIST_MAX, 0);
            let n = t.list(&mut big)?;
            &big[..n]
        }
        Err(Errno::NOTSUP) => &[][..],
        Err(e) => return Err(e.into()),
    };
    let mut out = Vec::new();
    if names.is_empty() {
        return Ok(Xattrs::default());
    }
    let mut value = vec![0u8; MAX_XATTR_VALUE];
    for name in names.split(|&b| b == 0).filter(|n| known_name(n)) {
        let n = match t.get(name, &mut value) {
            Ok(n) => n,
            Err(Errno::NODATA) => continue,
            Err(e) => return Err(e.into()),
        };
        out.push(Xattr {
            name: name.to_vec(),
            value: value[..n].to_vec(),
        });
    }
    Xattrs::new(out).map_err(io::Error::other)
}

/// The namespaces a receiver takes from the sender, and so manages at the destination.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Namespaces {
    /// Every namespace haul copies (a root receiver that keeps the sender's owners).
    All,
    /// `user.*` and ACLs: `trusted.*` and `security.*` are neither taken from the sender
    /// nor removed from the destination (see `protocol::Accept::apply`).
    Unprivileged,
}

/// Whether the receiver removes a destination attribute of this name that the sender did
/// not send: `security.*` other than file capabilities (an SELinux label, IMA/EVM) belongs
/// to the receiving host's policy and stays, and so do the namespaces it does not manage.
fn removable(name: &[u8], ns: Namespaces) -> bool {
    let privileged = name.starts_with(b"security.") || name.starts_with(b"trusted.");
    known_name(name)
        && (!name.starts_with(b"security.") || name == b"security.capability")
        && (ns == Namespaces::All || !privileged)
}

/// What to set and remove so that `have` becomes `want`.
fn plan<'w>(have: &Xattrs, want: &'w Xattrs, ns: Namespaces) -> (Vec<&'w Xattr>, Vec<Vec<u8>>) {
    let set = want
        .list()
        .iter()
        .filter(|x| have.get(&x.name) != Some(x.value.as_slice()))
        .collect();
    let remove = have
        .list()
        .iter()
        .filter(|x| removable(&x.name, ns) && want.get(&x.name).is_none())
        .map(|x| x.name.clone())
        .collect();
    (set, remove)
}

/// Whether applying `want` to a file that has `have` changes anything (`-i`'s `x`), for a
/// receiver that manages `ns`.
pub fn differs(have: &Xattrs, want: &Xattrs, ns: Namespaces) -> bool {
    let (set, remove) = plan(have, want, ns);
    !set.is_empty() || !remove.is_empty()
}

/// What applying attributes to one file did.
#[derive(Debug, Default)]
pub struct Applied {
    /// Something was set or removed.
    pub changed: bool,
    /// The first attribute that could not be set or removed (the file system does not
    /// take extended attributes, or this user may not set that namespace).
    pub failed: Option<io::Error>,
}

/// Makes the attributes of `t` those of `want` in the namespaces `ns` (see [`removable`]
/// for what stays). Call after `chown`, which clears `security.capability`.
pub fn apply(t: Target<'_>, want: &Xattrs, ns: Namespaces) -> Applied {
    let mut out = Applied::default();
    let have = match read(t) {
        Ok(h) => h,
        Err(e) => {
            out.failed = Some(e);
            return out;
        }
    };
    let (set, remove) = plan(&have, want, ns);
    for x in set {
        match t.set(&x.name, &x.value) {
            Ok(()) => out.changed = true,
            Err(e) => {
                out.failed.get_or_insert_with(|| named(&x.name, e));
            }
        }
    }
    for name in remove {
        match t.remove(&name) {
            Ok(()) | Err(Errno::NODATA) => out.changed = true,
            Err(e) => {
                out.failed.get_or_insert_with(|| named(&name, e));
            }
        }
    }
    out
}

fn named(name: &[u8], e: Errno) -> io::Error {
    let e = io::Error::from(e);
    io::Error::new(
        e.kind(),
        format!("{}: {e}", crate::progress::escape_bytes(name)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::File;
    use std::os::fd::AsFd;

    fn xs(list: &[(&str, &str)]) -> Xattrs {
        Xattrs::new(
            list.iter()
                .map(|(n, v)| Xattr {
                    name: n.as_bytes().to_vec(),
                    value: v.as_bytes().to_vec(),
                })
                .collect(),
        )
        .unwrap()
    }

    #[test]
    fn plan_sets_what_differs_and_keeps_the_hosts_labels() {
        let have = xs(&[
            ("user.same", "1"),
            ("user.old", "x"),
            ("user.changed", "a"),
            ("security.selinux", "system_u:object_r:tmp_t:s0"),
            ("security.capability", "c"),
        ]);
        let want = xs(&[("user.same", "1"), ("user.changed", "b"), ("user.new", "n")]);
        let (set, remove) = plan(&have, &want, Namespaces::All);
        let set: Vec<&[u8]> = set.iter().map(|x| x.name.as_slice()).collect();
        assert_eq!(set, [&b"user.changed"[..], b"user.new"]);
        assert_eq!(
            remove,
            [b"security.capability".to_vec(), b"user.old".to_vec()]
        );
        assert!(differs(&have, &want, Namespaces::All));
        assert!(!differs(&want, &want, Namespaces::All));
        // A receiver that does not take trusted.* and security.* leaves the destination's.
        let have = xs(&[
            ("trusted.t", "1"),
            ("security.capability", "c"),
            ("user.x", ""),
        ]);
        let (set, remove) = plan(&have, &want, Namespaces::Unprivileged);
        assert_eq!(set.len(), 3);
        assert_eq!(remove, [b"user.x".to_vec()]);
    }

    #[test]
    fn user_attributes_round_trip_through_a_descriptor() {
        let dir = tempfile::tempdir().unwrap();
        let f = File::create(dir.path().join("f")).unwrap();
        let want = xs(&[("user.a", "1"), ("user.b", "")]);
        let done = apply(Target::Fd(f.as_fd()), &want, Namespaces::All);
        if let Some(e) = &done.failed {
            // A temp dir on a file system without user xattrs: nothing more to check.
            assert_eq!(e.raw_os_error(), Some(libc::EOPNOTSUPP), "{e}");
            return;
        }
        assert!(done.changed);
        assert_eq!(read(Target::Fd(f.as_fd())).unwrap(), want);
        let again = apply(Target::Fd(f.as_fd()), &want, Namespaces::All);
        assert!(!again.changed && again.failed.is_none());
        let fewer = xs(&[("user.b", "2")]);
        assert!(apply(Target::Fd(f.as_fd()), &fewer, Namespaces::All).changed);
        assert_eq!(read(Target::Fd(f.as_fd())).unwrap(), fewer);
        // More names than the small list buffer holds.
        let names: Vec<String> = (0..40).map(|i| format!("user.{i:0>40}")).collect();
        let many = xs(&names.iter().map(|n| (n.as_str(), "v")).collect::<Vec<_>>());
        let done = apply(Target::Fd(f.as_fd()), &many, Namespaces::All);
        assert!(done.failed.is_none(), "{:?}", done.failed);
        assert_eq!(read(Target::Fd(f.as_fd())).unwrap(), many);
    }
}
