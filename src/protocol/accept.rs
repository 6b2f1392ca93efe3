//! What a receiver takes from a sender's metadata: the receiver's own choice, never the
//! sender's (rsync's `--no-owner`, `--no-group`, `--no-devices`, `--no-specials`). A root
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
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
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
}

impl Default for Accept {
    fn default() -> Self {
        Accept {
            owner: true,
            group: true,
            devices: true,
            specials: true,
            keep_dirlinks: false,
        }
    }
}

impl Accept {
    /// Adjusts `e` to this policy for a receiver running as `uid`:`gid`; `false` means the
    /// entry is skipped. An owner or group not kept also drops the set-id bits of anything
    /// but a directory: they would grant the receiving user's rights, not the sender's; an
    /// owner not kept drops `security.*` attributes for the same reason. A receiver that
    /// is not root drops `trusted.*`, which only root may set.
    pub fn apply(&self, e: &mut Entry, uid: u32, gid: u32) -> bool {
        match e.kind {
            EntryKind::Device { .. } if !self.devices => return false,
            EntryKind::Fifo if !self.specials => return false,
            _ => {}
        }
        if let Some(x) = &mut e.xattrs {
            // trusted.* is root's alone; security.* (file capabilities, SELinux labels)
            // grants rights like set-id bits do, so it goes with the sender's owner.
            x.retain(|n| {
                !(n.starts_with(b"trusted.") && uid != 0
                    || n.starts_with(b"security.") && !self.owner)
            });
        }
        let dir = matches!(e.kind, EntryKind::Dir);
        if !self.owner {
            e.uid = uid;
            if !dir {
                e.mode &= !SET_ID;
            }
        }
        if !self.group {
            e.gid = gid;
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
        assert!(Accept::default().apply(&mut e, 1000, 1000));
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
        assert!(a.apply(&mut e, 1000, 100));
        assert_eq!((e.uid, e.gid, e.mode), (1000, 100, 0o0755));
        // A set-gid directory only makes new files inherit its group: kept.
        let mut d = entry(EntryKind::Dir, 0o2775);
        assert!(a.apply(&mut d, 1000, 100));
        assert_eq!(d.mode, 0o2775);
        let only_group = Accept {
            group: false,
            ..Accept::default()
        };
        let mut e = entry(file(), 0o6755);
        assert!(only_group.apply(&mut e, 1000, 100));
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
            a.apply(&mut e, uid, 0);
            let x = e.xattrs.unwrap();
            x.list().iter().map(|x| x.name.clone()).collect::<Vec<_>>()
        };
        assert_eq!(kept(Accept::default(), 0).len(), 3);
        assert_eq!(
            kept(Accept::default(), 1000),
            [b"security.capability".to_vec(), b"user.a".to_vec()]
        );
        let no_owner = Accept {
            owner: false,
            ..Accept::default()
        };
        assert_eq!(
            kept(no_owner, 0),
            [b"trusted.t".to_vec(), b"user.a".to_vec()]
        );
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
        assert!(!a.apply(&mut dev, 0, 0));
        let mut fifo = entry(EntryKind::Fifo, 0o644);
        assert!(!a.apply(&mut fifo, 0, 0));
        let mut f = entry(file(), 0o644);
        assert!(a.apply(&mut f, 0, 0));
    }
}
