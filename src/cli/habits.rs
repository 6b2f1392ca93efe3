//! The rsync options haul accepts for habit's sake (`-avhP`): each names what haul always
//! does, so it is accepted, hidden from `--help`, and ignored.

use std::ffi::OsString;

use clap::{ArgAction, Args};

/// `args` with a lone `-h` (`haul -h`, `haul copy -h`) turned into `--help`, as rsync
/// reads it; with any other argument `-h` stays rsync's `--human-readable`, so that
/// `haul copy -avhP SRC DST` copies instead of printing the help.
pub fn lone_h_is_help(mut args: Vec<OsString>) -> Vec<OsString> {
    let lone = match args.get(1..).unwrap_or_default() {
        [h] => h == "-h",
        [sub, h] => h == "-h" && !sub.to_string_lossy().starts_with('-'),
        _ => false,
    };
    if lone {
        if let Some(last) = args.last_mut() {
            *last = "--help".into();
        }
    }
    args
}

/// rsync options that name what haul always does, accepted so that rsync habits (`-avP`)
/// work: hidden from `--help`, ignored.
#[derive(Debug, Args)]
pub struct RsyncHabits {
    /// -h, --human-readable (sizes are always human-readable). `-h` alone is --help, as in
    /// rsync: [`lone_h_is_help`] turns it into `--help` before clap sees it.
    #[arg(short = 'h', long = "human-readable", global = true, hide = true, action = ArgAction::Count)]
    pub human_readable: u8,
    /// -a, --archive: recursive, links, perms, times, owner, group, devices (always).
    #[arg(short = 'a', long = "archive", global = true, hide = true, action = ArgAction::Count)]
    pub archive: u8,
    /// -r, --recursive (always).
    #[arg(short = 'r', long = "recursive", global = true, hide = true, action = ArgAction::Count)]
    pub recursive: u8,
    /// -l, --links: symlinks as symlinks (always).
    #[arg(short = 'l', long = "links", global = true, hide = true, action = ArgAction::Count)]
    pub links: u8,
    /// -H, --hard-links (always, within the transfer).
    #[arg(short = 'H', long = "hard-links", global = true, hide = true, action = ArgAction::Count)]
    pub hard_links: u8,
    /// -S, --sparse (holes are always found and kept).
    #[arg(short = 'S', long = "sparse", global = true, hide = true, action = ArgAction::Count)]
    pub sparse: u8,
    /// -z (compression is on across a network; --compress chooses).
    #[arg(short = 'z', global = true, hide = true, action = ArgAction::Count)]
    pub z: u8,
    /// -P: --partial --progress.
    #[arg(short = 'P', global = true, hide = true, action = ArgAction::Count)]
    pub p_upper: u8,
    /// --partial (partial files are always kept and resumed).
    #[arg(long = "partial", global = true, hide = true, action = ArgAction::Count)]
    pub partial: u8,
    /// --progress (a bar is drawn whenever stderr is a terminal).
    #[arg(long = "progress", global = true, hide = true, action = ArgAction::Count)]
    pub progress: u8,
    /// -t, --times (always).
    #[arg(short = 't', long = "times", global = true, hide = true, action = ArgAction::Count)]
    pub times: u8,
    /// -p, --perms (always).
    #[arg(short = 'p', long = "perms", global = true, hide = true, action = ArgAction::Count)]
    pub perms: u8,
    /// -o, --owner (always, when the receiver is root).
    #[arg(short = 'o', long = "owner", global = true, hide = true, action = ArgAction::Count)]
    pub owner: u8,
    /// -g, --group (always, when the receiver is root).
    #[arg(short = 'g', long = "group", global = true, hide = true, action = ArgAction::Count)]
    pub group: u8,
    /// -D: --devices --specials (always; devices when the receiver is root).
    #[arg(short = 'D', global = true, hide = true, action = ArgAction::Count)]
    pub d_upper: u8,
    /// -X, --xattrs (always, unless --no-xattrs).
    #[arg(short = 'X', long = "xattrs", global = true, hide = true, action = ArgAction::Count)]
    pub xattrs: u8,
    /// -A, --acls (always, unless --no-xattrs: ACLs travel as extended attributes).
    #[arg(short = 'A', long = "acls", global = true, hide = true, action = ArgAction::Count)]
    pub acls: u8,
    /// --numeric-ids (always: owners travel and are applied as numbers).
    #[arg(long = "numeric-ids", global = true, hide = true, action = ArgAction::Count)]
    pub numeric_ids: u8,
}
