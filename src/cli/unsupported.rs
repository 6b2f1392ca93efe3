//! rsync options haul does not have: one line each saying what to use instead, in place of
//! clap's nearest-spelling guess (`--max-size` → "did you mean --size", `--link-dest` →
//! `--links`), which points an rsync user at an option that does something else. The
//! table is the one README's "rsync option → haul" table copies.
//!
//! Also an option that haul has, but not for this command (`haul probe --delete`): the
//! message names the commands that take it. Options haul accepts out of habit and
//! ignores are `habits`; everything else is clap's own message.

use clap::error::{ContextKind, ContextValue, ErrorKind};

/// Where an rsync option that haul lacks is tracked.
const LATER: &str = "not supported yet (issue 39)";

/// rsync's spellings (long and short) → what a haul user does instead. `{LATER}` marks
/// one that may come.
pub const RSYNC_ONLY: &[(&[&str], &str)] = &[
    (&["-I", "--ignore-times"], "use --checksum (-c): compare contents even where size and mtime match"),
    (&["--modify-window"], "{LATER}; haul compares mtimes to the nanosecond the file systems keep"),
    (&["--append", "--append-verify"], "leave it out: haul resumes partial files by itself, verified"),
    (&["--partial-dir", "--delay-updates"], "leave it out: haul keeps its partial files beside the target and resumes them"),
    (&["-T", "--temp-dir"], "{LATER}"),
    (&["-W", "--whole-file", "--no-whole-file"], "leave it out: haul sends changed files whole; --checksum sends a delta of files over one block"),
    (&["-y", "--fuzzy"], "{LATER}"),
    (&["--link-dest", "--copy-dest", "--compare-dest"], "{LATER}"),
    (&["-b", "--backup", "--backup-dir", "--suffix"], "{LATER}"),
    (&["--remove-source-files"], "{LATER}; remove the sources once haul has exited 0"),
    (&["--del", "--delete-before", "--delete-during", "--delete-delay", "--delete-after"], "use --delete (haul chooses when to delete)"),
    (&["--delete-missing-args", "--ignore-missing-args", "--max-delete", "--ignore-errors"], "{LATER}"),
    (&["-f", "--filter", "-F"], "{LATER}; --exclude and --include take rsync's patterns, --exclude-from a file of them"),
    (&["-C", "--cvs-exclude"], "{LATER}; use --exclude PATTERN"),
    (&["--max-size", "--min-size"], "{LATER}; use --exclude PATTERN"),
    (&["-m", "--prune-empty-dirs"], "{LATER}"),
    (&["-R", "--relative", "--no-implied-dirs"], "{LATER}"),
    (&["-d", "--dirs"], "{LATER}; haul always recurses"),
    (&["--mkpath"], "{LATER}"),
    (&["-k", "--copy-dirlinks"], "{LATER}; -L follows every symlink"),
    (&["--safe-links", "--munge-links"], "{LATER}; --copy-unsafe-links sends what such links point to"),
    (&["-E", "--executability"], "leave it out: haul always keeps the mode"),
    (&["--chmod"], "{LATER}"),
    (&["--devices", "--specials"], "leave it out: haul always copies them (-D); --no-devices, --no-specials refuse them"),
    (&["--copy-devices", "--write-devices"], "{LATER}"),
    (&["--no-perms", "--no-times", "--no-links", "--no-hard-links", "--no-sparse", "--no-acls"], "{LATER}; haul always keeps them (--no-xattrs: no ACLs or extended attributes)"),
    (&["-U", "--atimes", "-N", "--crtimes", "--open-noatime"], "{LATER}"),
    (&["-O", "--omit-dir-times", "-J", "--omit-link-times"], "{LATER}"),
    (&["--super", "--fake-super"], "{LATER}; a root receiver keeps owners, devices and all attributes"),
    (&["--usermap", "--groupmap"], "{LATER}; --chown USER:GROUP gives everything one owner"),
    (&["--preallocate"], "{LATER}"),
    (&["--compress-level", "--zl", "--compress-choice", "--zc", "--skip-compress", "--new-compress", "--old-compress"], "use --compress auto|none|lz4|zstd|zstd:LEVEL"),
    // rsync's `--cc` (its alias) is haul's congestion control: `config::transfer` tells a
    // checksum name given to it apart.
    (&["--checksum-choice"], "leave it out: every block is verified with keyed BLAKE3"),
    (&["-B"], "use --block-size SIZE (no short form)"),
    (&["--rsync-path"], "use --remote-haul PATH"),
    (&["-M", "--remote-option"], "{LATER}"),
    (&["-s", "--protect-args", "--secluded-args", "--trust-sender"], "leave it out: haul passes far paths to its far end itself, not through the far shell"),
    (&["--copy-as"], "{LATER}"),
    (&["--contimeout"], "use --retries N (re-dials) and --timeout SECS (silence)"),
    (&["--address", "--port", "--sockopts", "--daemon", "--password-file", "--no-motd"], "haul has no daemon: `haul recv --listen ADDR[:PORT]` waits for one transfer"),
    (&["-4", "--ipv4", "-6", "--ipv6"], "{LATER}; recv --listen ADDR picks the address family"),
    (&["--out-format", "--log-file", "--log-file-format", "--info", "--debug", "--msgs2stderr", "--stderr"], "{LATER}; use -v, -i, --stats or --json"),
    (&["--list-only"], "{LATER}"),
    (&["--write-batch", "--only-write-batch", "--read-batch"], "{LATER}"),
    (&["--protocol"], "leave it out: haul's ends agree on a version themselves"),
    (&["--iconv", "-8", "--8-bit-output"], "{LATER}; haul copies names byte for byte and escapes odd ones in its lines"),
    (&["--blocking-io", "--outbuf", "--early-input"], "leave it out"),
];

/// What haul says instead of clap's message for `e`, if `e` is an option haul lacks (or
/// has elsewhere); `None` leaves clap's.
pub fn explain(e: &clap::Error, cmd: &clap::Command) -> Option<String> {
    if e.kind() != ErrorKind::UnknownArgument {
        return None;
    }
    let Some(ContextValue::String(given)) = e.get(ContextKind::InvalidArg) else {
        return None;
    };
    let name = given.split('=').next().unwrap_or(given);
    if let Some(advice) = advice(name) {
        return Some(format!("rsync's {name}: {advice}"));
    }
    let sub = used_subcommand(e, cmd)?;
    let takers = commands_taking(cmd, name);
    match takers.is_empty() {
        true => None,
        false => Some(format!(
            "{name} does not apply to `haul {sub}` (an option of haul {})",
            takers.join(", ")
        )),
    }
}

/// The advice for rsync's option `name` (`--max-size`, `-O`).
pub fn advice(name: &str) -> Option<String> {
    RSYNC_ONLY
        .iter()
        .find(|(names, _)| names.contains(&name))
        .map(|(_, advice)| advice.replace("{LATER}", LATER))
}

/// The subcommand whose usage clap's error shows (`Usage: haul copy …`).
fn used_subcommand(e: &clap::Error, cmd: &clap::Command) -> Option<String> {
    let usage = match e.get(ContextKind::Usage) {
        Some(ContextValue::StyledStr(s)) => s.to_string(),
        _ => return None,
    };
    let word = usage
        .split_whitespace()
        .skip_while(|w| *w != "haul")
        .nth(1)?;
    cmd.find_subcommand(word).map(|s| s.get_name().to_string())
}

/// The visible commands that take the option spelled `name` (`--delete`, `-c`).
fn commands_taking(cmd: &clap::Command, name: &str) -> Vec<String> {
    let long = name.strip_prefix("--");
    let short = name.strip_prefix('-').filter(|s| s.len() == 1);
    let short = short.and_then(|s| s.chars().next());
    cmd.get_subcommands()
        .filter(|s| !s.is_hide_set())
        .filter(|s| {
            s.get_arguments().any(|a| {
                (long.is_some() && a.get_long() == long)
                    || (short.is_some() && a.get_short() == short)
            })
        })
        .map(|s| s.get_name().to_string())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_spelling_is_rsyncs_once_and_not_haul_s() {
        let cmd = crate::cli::command();
        let mut seen = std::collections::HashSet::new();
        for (names, advice) in RSYNC_ONLY {
            assert!(!advice.is_empty());
            for n in *names {
                assert!(seen.insert(*n), "{n} twice");
                assert!(commands_taking(&cmd, n).is_empty(), "haul has {n}");
            }
        }
    }
}
