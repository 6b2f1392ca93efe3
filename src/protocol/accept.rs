//! What a receiver takes from a sender's metadata: the receiver's own choice, never the
//! sender's (rsync's `--no-owner`, `--no-group`, `--no-devices`, `--no-specials`, and
//! `--no-xattrs` on the receiving side too: a far sender may ignore it). A root
//! receiver that pulls from a host it does not fully trust uses them so the far host cannot
//! plant root-owned set-id files or device nodes in its tree.
//!
//! Plain data and one pure function; the store applies it to each entry as it arrives.

use serde::{Deserialize, Serialize};

use super::{Entry, EntryKind};

/// Set-user-ID and set-group-ID bits.
const SET_ID: u32 = 0o6000;
/// Set-group-ID alone.
const SET_GID: u32 = 0o2000;

/// Which of the sender's metadata the receiver keeps. The default keeps everything (a
/// faithful copy); owners and devices still need a root receiver.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Accept {
    /// Keep the sender's owner (else files belong to the receiving user).
    pub owner: bool,
    /// Keep the sender's group (else the receiving user's group).
    pub group: bool,
    /// Recreate character and block devices (else skip them).
    pub devices: bool,
    /// Recreate FIFOs (else skip them).
    pub specials: bool,
    /// `-K`: a symlink to a directory already at the destination (not made by this run,
    /// owned by the receiving user or root) stands for the directory the sender sends.
    pub keep_dirlinks: bool,
    /// `--chown USER:GROUP`: this owner and group for everything received, as given
    /// (names are looked up on the receiving host, where they mean something).
    pub chown: Option<OwnerSpec>,
    /// Take extended attributes (else `--no-xattrs`: whatever the sender sends, none is
    /// applied and the destination's stay as they are).
    pub xattrs: bool,
}

/// `--chown`'s two parts as the user wrote them: names or numbers, either may be absent.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OwnerSpec {
    /// The user, if given.
    pub user: Option<String>,
    /// The group, if given.
    pub group: Option<String>,
}

impl OwnerSpec {
    /// Parses rsync's `USER:GROUP`, `USER` or `:GROUP`; `None` when both are empty.
    pub fn parse(s: &str) -> Option<OwnerSpec> {
        let (user, group) = s.split_once(':').unwrap_or((s, ""));
        let part = |p: &str| (!p.is_empty()).then(|| p.to_string());
        let spec = OwnerSpec {
            user: part(user),
            group: part(group),
        };
        (spec != OwnerSpec::default()).then_some(spec)
    }
}

/// `--chown`'s owner and group as numbers on the receiving host.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Chown {
    /// Owner of everything received.
    pub uid: Option<u32>,
    /// Group of everything received.
    pub gid: Option<u32>,
}

impl Default for Accept {
    fn default() -> Self {
        Accept {
            owner: true,
            group: true,
            devices: true,
            specials: true,
            keep_dirlinks: false,
            chown: None,
            xattrs: true,
        }
    }
}

impl Accept {
    /// Adjusts `e` to this policy for a receiver running as `uid`:`gid`; `false` means the
    /// entry is skipped. An owner or group not kept also drops the set-id bits of anything
    /// but a directory: they would grant the receiving user's rights, not the sender's.
    /// `trusted.*` and `security.*` attributes are kept only by a root receiver that keeps
    /// the sender's owner: only root may set them, and they grant what an owner's rights
    /// do (capabilities as set-id bits; `trusted.overlay.*` redirects an overlay); POSIX
    /// ACLs and `user.*` grant no more than the mode could, and are kept. Without `xattrs`
    /// none are. `chown` (`--chown`, resolved) replaces the owner and group like
    /// `--no-owner`/`--no-group` do, with its own instead of the receiving user's.
    pub fn apply(&self, e: &mut Entry, (uid, gid): (u32, u32), chown: Chown) -> bool {
        match e.kind {
            EntryKind::Device { .. } if !self.devices => return false,
            EntryKind::Fifo if !self.specials => return false,
            _ => {}
        }
        let owner = self.owner && chown.uid.is_none();
        let group = self.group && chown.gid.is_none();
        if !self.xattrs {
            e.xattrs = None;
        }
        if let Some(x) = &mut e.xattrs {
            // trusted.* is root's alone, and so in practice is security.* (setting
            // capabilities or labels needs privileges): a user's receiver drops both, as
            // rsync's does, rather than warn about every labelled file. Both grant rights
            // as set-id bits do, so they also go with the sender's owner (the store then
            // leaves the destination's own alone: `store::xattr::Namespaces`).
            let privileged = uid == 0 && owner;
            x.retain(|n| {
                privileged || !(n.starts_with(b"trusted.") || n.starts_with(b"security."))
            });
        }
        let dir = matches!(e.kind, EntryKind::Dir);
        if !owner {
            e.uid = chown.uid.unwrap_or(uid);
            if !dir {
                e.mode &= !SET_ID;
            }
        }
        if !group {
            e.gid = chown.gid.unwrap_or(gid);
            if !dir {
                e.mode &= !SET_GID;
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(kind: EntryKind, mode: u32) -> Entry {
        Entry {
            id: 1,
            path: b"x".to_vec(),
            kind,
            mode,
            mtime_sec: 0,
            mtime_nsec: 0,
            uid: 0,
            gid: 0,
            xattrs: None,
            checksum: None,
        }
    }

    fn file() -> EntryKind {
        EntryKind::File {
            size: 1,
            data_bytes: 1,
        }
    }

    #[test]
    fn default_keeps_everything() {
        let mut e = entry(file(), 0o4755);
        assert!(Accept::default().apply(&mut e, (1000, 1000), Chown::default()));
        assert_eq!((e.uid, e.gid, e.mode), (0, 0, 0o4755));
    }

    #[test]
    fn no_owner_takes_the_receiver_and_drops_set_id() {
        let a = Accept {
            owner: false,
            group: false,
            ..Accept::default()
        };
        let mut e = entry(file(), 0o6755);
        assert!(a.apply(&mut e, (1000, 100), Chown::default()));
        assert_eq!((e.uid, e.gid, e.mode), (1000, 100, 0o0755));
        // A set-gid directory only makes new files inherit its group: kept.
        let mut d = entry(EntryKind::Dir, 0o2775);
        assert!(a.apply(&mut d, (1000, 100), Chown::default()));
        assert_eq!(d.mode, 0o2775);
        let only_group = Accept {
            group: false,
            ..Accept::default()
        };
        let mut e = entry(file(), 0o6755);
        assert!(only_group.apply(&mut e, (1000, 100), Chown::default()));
        assert_eq!((e.uid, e.gid, e.mode), (0, 100, 0o4755));
    }

    #[test]
    fn privileged_attributes_follow_owner_and_root() {
        let names = [&b"user.a"[..], b"trusted.t", b"security.capability"];
        let all = crate::protocol::Xattrs::new(
            names
                .iter()
                .map(|n| crate::protocol::Xattr {
                    name: n.to_vec(),
                    value: vec![1],
                })
                .collect(),
        )
        .unwrap();
        let kept = |a: Accept, uid: u32| {
            let mut e = entry(file(), 0o644);
            e.xattrs = Some(all.clone());
            a.apply(&mut e, (uid, 0), Chown::default());
            let x = e.xattrs.unwrap();
            x.list().iter().map(|x| x.name.clone()).collect::<Vec<_>>()
        };
        assert_eq!(kept(Accept::default(), 0).len(), 3);
        assert_eq!(kept(Accept::default(), 1000), [b"user.a".to_vec()]);
        let no_owner = Accept {
            owner: false,
            ..Accept::default()
        };
        assert_eq!(kept(no_owner, 0), [b"user.a".to_vec()]);
        let no_xattrs = Accept {
            xattrs: false,
            ..Accept::default()
        };
        let mut e = entry(file(), 0o644);
        e.xattrs = Some(all.clone());
        no_xattrs.apply(&mut e, (0, 0), Chown::default());
        assert_eq!(e.xattrs, None);
    }

    #[test]
    fn chown_parses_rsyncs_forms_and_replaces_owners() {
        let spec = |u: Option<&str>, g: Option<&str>| OwnerSpec {
            user: u.map(String::from),
            group: g.map(String::from),
        };
        assert_eq!(OwnerSpec::parse("a:b"), Some(spec(Some("a"), Some("b"))));
        assert_eq!(OwnerSpec::parse("a"), Some(spec(Some("a"), None)));
        assert_eq!(OwnerSpec::parse("a:"), Some(spec(Some("a"), None)));
        assert_eq!(OwnerSpec::parse(":7"), Some(spec(None, Some("7"))));
        assert_eq!(OwnerSpec::parse(":"), None);
        assert_eq!(OwnerSpec::parse(""), None);
        let mut e = entry(file(), 0o6755);
        let only_group = Chown {
            uid: None,
            gid: Some(50),
        };
        assert!(Accept::default().apply(&mut e, (0, 0), only_group));
        assert_eq!((e.uid, e.gid, e.mode), (0, 50, 0o4755));
        let mut d = entry(EntryKind::Dir, 0o2775);
        let both = Chown {
            uid: Some(7),
            gid: Some(8),
        };
        assert!(Accept::default().apply(&mut d, (0, 0), both));
        assert_eq!((d.uid, d.gid, d.mode), (7, 8, 0o2775));
    }

    #[test]
    fn devices_and_specials_can_be_refused() {
        let a = Accept {
            devices: false,
            specials: false,
            ..Accept::default()
        };
        let mut dev = entry(
            EntryKind::Device {
                block: false,
                rdev: 0x0103,
            },
            0o666,
        );
        assert!(!a.apply(&mut dev, (0, 0), Chown::default()));
        let mut fifo = entry(EntryKind::Fifo, 0o644);
        assert!(!a.apply(&mut fifo, (0, 0), Chown::default()));
        let mut f = entry(file(), 0o644);
        assert!(a.apply(&mut f, (0, 0), Chown::default()));
    }
}
