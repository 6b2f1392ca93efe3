//! What a transfer changes at the destination, one entry at a time: the receiver's account
//! that `-v` (`--verbose`) and `-i` (`--itemize-changes`) print, in rsync's spellings.
//!
//! The receiver is the side that can compare the manifest with the destination, so it
//! builds the [`Item`]s; they travel back to a sender that asked for them in
//! [`super::Control::Items`]. Rendering is here too, without I/O: [`Listing::line`] turns
//! an item into the line rsync would print (`>f.st...... path`, `cd+++++++++ dir/`,
//! `*deleting   path`, or for `-v` just the name). Names are escaped (`\#012`), so a file
//! name cannot forge an output line.
//!
//! Of rsync's `%i` columns haul fills the kind of update, the file type, and `c` (content:
//! a changed symlink target, or `--checksum`), `s` (size), `t` (mtime), `p` (permissions),
//! `o` and `g` (owner and group: only a root receiver applies them), `a` (POSIX ACLs) and
//! `x` (other extended attributes). `u` stays `.`.

use serde::{Deserialize, Serialize};

/// One change at the destination.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Item {
    /// Path relative to the destination root, as in the manifest (empty: the root).
    pub path: Vec<u8>,
    /// What the entry is.
    pub kind: ItemKind,
    /// What changed.
    pub change: Change,
    /// A symlink's target or a hardlink's first name (empty otherwise).
    pub target: Vec<u8>,
}

/// The kinds of entry an item names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ItemKind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link.
    Symlink,
    /// A second name of a file of this transfer.
    Hardlink,
    /// A FIFO (or another special file).
    Special,
    /// A device.
    Device,
}

/// What changed about one entry (rsync's `%i` columns).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Change {
    /// Did not exist (or was of another kind) and is created.
    pub new: bool,
    /// A regular file whose data is sent.
    pub sent: bool,
    /// Content differs: a symlink's target, or a file compared with `--checksum`.
    pub content: bool,
    /// Size differs.
    pub size: bool,
    /// Modification time differs.
    pub time: bool,
    /// Permission bits differ.
    pub perms: bool,
    /// Owner differs (and is applied).
    pub owner: bool,
    /// Group differs (and is applied).
    pub group: bool,
    /// POSIX ACLs differ (and are applied).
    pub acls: bool,
    /// Other extended attributes differ (and are applied).
    pub xattrs: bool,
    /// Removed by `--delete`.
    pub deleted: bool,
}

impl Change {
    /// Whether anything at all changes.
    pub fn any(&self) -> bool {
        self.new
            || self.sent
            || self.content
            || self.size
            || self.time
            || self.perms
            || self.owner
            || self.group
            || self.acls
            || self.xattrs
            || self.deleted
    }
}

/// What to print per item: nothing, the names (`-v`) or rsync's `%i` strings (`-i`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Listing {
    /// `-v`: the names of entries created, sent or deleted.
    pub verbose: bool,
    /// `-i`: the change string of every entry that changes (wins over `verbose`).
    pub itemize: bool,
    /// The direction column of a sent file: `>` when the printing side receives (local
    /// copy, pull, recv), `<` when it sends to another host (push, send).
    pub outgoing: bool,
    /// Print on stderr (stdout carries a ticket, a stream, `--json` or the far end's
    /// instruction lines).
    pub stderr: bool,
}

impl Listing {
    /// Whether anything is printed per item.
    pub fn is_on(&self) -> bool {
        self.verbose || self.itemize
    }

    /// The line rsync would print for `item`, or `None` when this listing shows nothing
    /// for it (`-v` does not name entries whose attributes alone change).
    pub fn line(&self, item: &Item) -> Option<String> {
        if self.itemize {
            return Some(format!("{} {}", self.code(item), name(item)));
        }
        if !self.verbose {
            return None;
        }
        let c = &item.change;
        if c.deleted {
            return Some(format!("deleting {}", name(item)));
        }
        let local = item.kind != ItemKind::File && c.content;
        (c.new || c.sent || local).then(|| name(item))
    }

    /// rsync's 11-character `%i` string.
    fn code(&self, item: &Item) -> String {
        let c = &item.change;
        if c.deleted {
            return "*deleting  ".into();
        }
        let y = match item.kind {
            ItemKind::Hardlink => 'h',
            ItemKind::File if c.sent && self.outgoing => '<',
            ItemKind::File if c.sent => '>',
            ItemKind::File => '.',
            _ if c.new || c.content => 'c',
            _ => '.',
        };
        let x = match item.kind {
            ItemKind::File | ItemKind::Hardlink => 'f',
            ItemKind::Dir => 'd',
            ItemKind::Symlink => 'L',
            ItemKind::Special => 'S',
            ItemKind::Device => 'D',
        };
        if c.new {
            return format!("{y}{x}+++++++++");
        }
        let flag = |on: bool, ch: char| if on { ch } else { '.' };
        format!(
            "{y}{x}{}{}{}{}{}{}.{}{}",
            flag(c.content, 'c'),
            flag(c.size, 's'),
            flag(c.time, 't'),
            flag(c.perms, 'p'),
            flag(c.owner, 'o'),
            flag(c.group, 'g'),
            flag(c.acls, 'a'),
            flag(c.xattrs, 'x'),
        )
    }
}

/// The entry's name as rsync shows it: `./` for the root, a trailing `/` on directories,
/// ` -> target` after a symlink, ` => first` after a hardlink; escaped.
fn name(item: &Item) -> String {
    let mut s = if item.path.is_empty() {
        ".".to_string()
    } else {
        crate::progress::escape_bytes(&item.path)
    };
    match item.kind {
        ItemKind::Dir => s.push('/'),
        ItemKind::Symlink if !item.change.deleted => {
            s.push_str(" -> ");
            s.push_str(&crate::progress::escape_bytes(&item.target));
        }
        ItemKind::Hardlink if !item.change.deleted => {
            s.push_str(" => ");
            s.push_str(&crate::progress::escape_bytes(&item.target));
        }
        _ => {}
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(path: &str, kind: ItemKind, change: Change) -> Item {
        Item {
            path: path.as_bytes().to_vec(),
            kind,
            change,
            target: b"a".to_vec(),
        }
    }

    const I: Listing = Listing {
        verbose: false,
        itemize: true,
        outgoing: false,
        stderr: false,
    };
    const V: Listing = Listing {
        verbose: true,
        itemize: false,
        outgoing: false,
        stderr: false,
    };

    #[test]
    fn itemize_strings_are_rsyncs() {
        let new = Change {
            new: true,
            sent: true,
            ..Change::default()
        };
        let cases = [
            (item("f", ItemKind::File, new), ">f+++++++++ f"),
            (
                item(
                    "f",
                    ItemKind::File,
                    Change {
                        sent: true,
                        size: true,
                        time: true,
                        ..Change::default()
                    },
                ),
                ">f.st...... f",
            ),
            (
                item(
                    "f",
                    ItemKind::File,
                    Change {
                        perms: true,
                        ..Change::default()
                    },
                ),
                ".f...p..... f",
            ),
            (
                item(
                    "d",
                    ItemKind::Dir,
                    Change {
                        new: true,
                        ..Change::default()
                    },
                ),
                "cd+++++++++ d/",
            ),
            (
                item(
                    "",
                    ItemKind::Dir,
                    Change {
                        time: true,
                        ..Change::default()
                    },
                ),
                ".d..t...... ./",
            ),
            (
                item(
                    "l",
                    ItemKind::Symlink,
                    Change {
                        new: true,
                        ..Change::default()
                    },
                ),
                "cL+++++++++ l -> a",
            ),
            (
                item(
                    "l",
                    ItemKind::Symlink,
                    Change {
                        content: true,
                        ..Change::default()
                    },
                ),
                "cLc........ l -> a",
            ),
            (
                item(
                    "x/",
                    ItemKind::File,
                    Change {
                        deleted: true,
                        ..Change::default()
                    },
                ),
                "*deleting   x/",
            ),
            (item("b", ItemKind::Hardlink, new), "hf+++++++++ b => a"),
            (
                item(
                    "f",
                    ItemKind::File,
                    Change {
                        acls: true,
                        xattrs: true,
                        ..Change::default()
                    },
                ),
                ".f.......ax f",
            ),
        ];
        for (it, want) in cases {
            assert_eq!(I.line(&it).unwrap(), want);
        }
        let out = Listing {
            outgoing: true,
            ..I
        };
        assert_eq!(
            out.line(&item("f", ItemKind::File, new)).unwrap(),
            "<f+++++++++ f"
        );
    }

    #[test]
    fn verbose_names_what_is_made_sent_or_deleted() {
        let perms = Change {
            perms: true,
            ..Change::default()
        };
        assert_eq!(V.line(&item("f", ItemKind::File, perms)), None);
        let sent = Change {
            sent: true,
            ..Change::default()
        };
        assert_eq!(V.line(&item("f", ItemKind::File, sent)).unwrap(), "f");
        let new = Change {
            new: true,
            ..Change::default()
        };
        assert_eq!(V.line(&item("d", ItemKind::Dir, new)).unwrap(), "d/");
        let gone = Change {
            deleted: true,
            ..Change::default()
        };
        assert_eq!(
            V.line(&item("d", ItemKind::Dir, gone)).unwrap(),
            "deleting d/"
        );
        assert_eq!(
            Listing::default().line(&item("f", ItemKind::File, sent)),
            None
        );
    }

    #[test]
    fn names_are_escaped() {
        let sent = Change {
            sent: true,
            ..Change::default()
        };
        let it = Item {
            path: b"evil\nhaul: sent 999 files\xff".to_vec(),
            kind: ItemKind::File,
            change: sent,
            target: vec![],
        };
        assert_eq!(V.line(&it).unwrap(), "evil\\#012haul: sent 999 files\\#377");
    }
}
