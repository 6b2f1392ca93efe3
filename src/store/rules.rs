//! rsync's transfer rules (`-u`, `--existing`, `--ignore-existing`): which manifest
//! entries the destination keeps as it is. Decided here, by the receiver, before an entry
//! is listed or applied, with one `fstatat` of the destination name (only when a rule is
//! set). A skipped entry is still "seen", so `--delete` leaves it; nothing is written,
//! listed or counted for it. `--size-only` is no skip but a quick check (`resume`).
//!
//! rsync's meanings (its `generator.c`, `recv_generator`): `--existing` makes nothing new,
//! so nothing below a directory the destination lacks either; `--ignore-existing` leaves
//! every non-directory the destination has, and a directory whose name holds something
//! else (with all below it); `-u` leaves a regular file whose destination is a regular
//! file with a later mtime in whole seconds (an equal one goes to the quick check), never a
//! directory, link or special. Another name of a hardlink group is left when its first
//! name was (rsync then sends the group to the next name; haul, which has the data only
//! for the first, leaves the group's other names as they are, never links them to what
//! the destination kept).
//!
//! What the decision looks at is not trusted for anything else: a name swapped after it
//! is only skipped or written as without the rule, through `resume`'s own checks.

use rustix::fs::{FileType, Stat};

use super::state::Store;
use crate::protocol::{Entry, EntryKind, Rules, SafeRelPath};

impl Store {
    /// Whether the transfer rules leave the destination's `path` as it is, for entry `e`.
    pub(super) fn ruled_out(&self, path: &SafeRelPath, e: &Entry) -> bool {
        let rules = self.options().rules;
        if !rules.any() || path.is_root() {
            return false;
        }
        if self.below_ruled_dir(path) {
            return true;
        }
        let here = self.lookup(path);
        if skips(rules, e, here.as_ref()) {
            if rules.ignore_existing && matches!(e.kind, EntryKind::Dir) {
                if let Ok(mut d) = self.ruled_dirs.lock() {
                    d.push(path.as_bytes().to_vec());
                }
            }
            return true;
        }
        // Another name of a hardlink group whose first name was left as it is.
        let EntryKind::Hardlink { target } = &e.kind else {
            return false;
        };
        let Ok(target) = SafeRelPath::parse(target) else {
            return false;
        };
        let first = self.lookup(&target);
        match first {
            None => rules.existing,
            Some(st) => {
                (rules.update && newer_file(e, &st))
                    || (rules.ignore_existing && self.before_run(&st))
            }
        }
    }

    /// Whether the inode `st` was last changed before this store opened: a first name
    /// `--ignore-existing` left (one this run wrote was renamed since, which sets its
    /// ctime). Both times come from the clock the kernel stamps inodes with.
    fn before_run(&self, st: &Stat) -> bool {
        (st.st_ctime, st.st_ctime_nsec as i64) < self.opened
    }

    /// Whether `path` lies beneath a directory `--ignore-existing` left out (a name the
    /// destination holds as a non-directory).
    fn below_ruled_dir(&self, path: &SafeRelPath) -> bool {
        let Ok(dirs) = self.ruled_dirs.lock() else {
            return false;
        };
        let p = path.as_bytes();
        dirs.iter()
            .any(|d| p.len() > d.len() && p.starts_with(d) && p[d.len()] == b'/')
    }
}

/// Whether `rules` leave entry `e` where the destination holds `here` (`None`: nothing).
fn skips(rules: Rules, e: &Entry, here: Option<&Stat>) -> bool {
    let Some(st) = here else {
        return rules.existing;
    };
    let dir_on_dir = matches!(e.kind, EntryKind::Dir)
        && FileType::from_raw_mode(st.st_mode) == FileType::Directory;
    if rules.ignore_existing && !dir_on_dir {
        return true;
    }
    rules.update
        && matches!(e.kind, EntryKind::File { .. } | EntryKind::Hardlink { .. })
        && newer_file(e, st)
}

/// `-u`: whether `st` is a regular file whose mtime is later than `e`'s in whole seconds
/// (rsync's `modtime - st_mtime < modify_window`, with a window of 0).
fn newer_file(e: &Entry, st: &Stat) -> bool {
    FileType::from_raw_mode(st.st_mode) == FileType::RegularFile && e.mtime_sec < st.st_mtime
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(kind: EntryKind, mtime_sec: i64) -> Entry {
        Entry {
            id: 1,
            path: b"f".to_vec(),
            kind,
            mode: 0o644,
            mtime_sec,
            mtime_nsec: 0,
            uid: 0,
            gid: 0,
            xattrs: None,
            checksum: None,
        }
    }

    fn stat_of(mode: u32, mtime: i64) -> Stat {
        // SAFETY: `Stat` is a plain C struct of integers; all zeros is a valid value.
        let mut st: Stat = unsafe { std::mem::zeroed() };
        st.st_mode = mode;
        st.st_mtime = mtime;
        st
    }

    #[test]
    fn update_compares_whole_seconds_and_only_regular_files() {
        let u = Rules {
            update: true,
            ..Rules::default()
        };
        let file = EntryKind::File {
            size: 1,
            data_bytes: 1,
        };
        let reg = libc::S_IFREG;
        assert!(skips(u, &entry(file.clone(), 9), Some(&stat_of(reg, 10))));
        assert!(!skips(u, &entry(file.clone(), 10), Some(&stat_of(reg, 10))));
        assert!(!skips(u, &entry(file.clone(), 11), Some(&stat_of(reg, 10))));
        assert!(!skips(u, &entry(file.clone(), 9), None));
        // Another type at the destination is always replaced.
        assert!(!skips(
            u,
            &entry(file, 9),
            Some(&stat_of(libc::S_IFLNK, 10))
        ));
        assert!(!skips(
            u,
            &entry(EntryKind::Dir, 9),
            Some(&stat_of(libc::S_IFDIR, 10))
        ));
    }

    #[test]
    fn existing_and_ignore_existing_split_on_presence() {
        let ex = Rules {
            existing: true,
            ..Rules::default()
        };
        let ign = Rules {
            ignore_existing: true,
            ..Rules::default()
        };
        let dir = entry(EntryKind::Dir, 1);
        assert!(skips(ex, &dir, None));
        assert!(!skips(ex, &dir, Some(&stat_of(libc::S_IFDIR, 1))));
        assert!(!skips(ign, &dir, None));
        assert!(!skips(ign, &dir, Some(&stat_of(libc::S_IFDIR, 1))));
        assert!(skips(ign, &dir, Some(&stat_of(libc::S_IFREG, 1))));
        assert!(skips(
            ign,
            &entry(EntryKind::Fifo, 1),
            Some(&stat_of(libc::S_IFDIR, 1))
        ));
    }
}
