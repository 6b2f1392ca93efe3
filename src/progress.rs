//! Progress display and the final summary line, fed by atomic counters that the workers
//! bump. No transfer logic lives here.

use std::time::Instant;

mod bar;
mod counters;
mod json;

pub use bar::{set_asked, Printer, Progress};
pub use counters::{human, Counters};

pub use json::{failure_json, json_string, with_outcome, ReplicaState, Report};

/// Prints a warning line on stderr, its control characters escaped ([`escape`]).
pub fn warn(msg: &str) {
    let line = format!("haul: warning: {}", escape(msg));
    bar::above_bar(|| eprintln!("{line}"));
}

/// The line printed when a run fails: the error's text with its control characters escaped
/// ([`escape`]), whatever a peer's message or a far host put in it. (Names in our own
/// messages are escaped already; escaping does not touch a `\#ooo` twice.)
pub fn error_line(e: &dyn std::fmt::Display) -> String {
    format!("haul: error: {}", escape(&e.to_string()))
}

/// `s` with control characters written as rsync writes them (`\#012` for a newline), so
/// a file name cannot forge or break an output line.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if c.is_control() {
            out.push_str(&format!("\\#{:03o}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    out
}

/// Raw name bytes as [`escape`] writes them; bytes that are not UTF-8 become `\#ooo`.
pub fn escape_bytes(b: &[u8]) -> String {
    let mut out = String::with_capacity(b.len());
    for chunk in b.utf8_chunks() {
        out.push_str(&escape(chunk.valid()));
        for x in chunk.invalid() {
            out.push_str(&format!("\\#{x:03o}"));
        }
    }
    out
}

/// Characters of a path a message shows at most: a path can be far longer than a line.
const SHOWN_PATH: usize = 160;

/// `path` for a message: escaped as [`escape_bytes`] does and, when longer than a line
/// can hold, its start and end around a `…`.
pub fn shown_path(path: &std::path::Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let s = escape_bytes(path.as_os_str().as_bytes());
    let n = s.chars().count();
    if n <= SHOWN_PATH {
        return s;
    }
    let head: String = s.chars().take(SHOWN_PATH / 3).collect();
    let tail: String = s.chars().skip(n - (SHOWN_PATH - SHOWN_PATH / 3)).collect();
    format!("{head}…{tail}")
}

/// ", compression ratio 1.36" when compression saved something worth saying (2%).
fn ratio_note(bytes: u64, wire: u64) -> String {
    if wire > 0 && bytes > wire + wire / 50 {
        format!(", compression ratio {:.2}", bytes as f64 / wire as f64)
    } else {
        String::new()
    }
}

/// The one-line summary printed at the end: files, bytes, time, rate, wire bytes (`None`:
/// a copy on this host, where nothing goes on a wire).
pub fn summary_line(
    verb: &str,
    files: u64,
    bytes: u64,
    wire: Option<u64>,
    started: Instant,
) -> String {
    let secs = started.elapsed().as_secs_f64().max(1e-3);
    format!(
        "haul: {verb} {}, {} in {secs:.1} s ({}/s){}",
        count(files, "file", "files"),
        human(bytes),
        human((bytes as f64 / secs) as u64),
        wire_note(bytes, wire)
    )
}

/// "1 file", "2 files": `n` and the noun that goes with it.
pub fn count(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// ", 1.00 MiB on the wire" and the compression ratio, or nothing on this host.
fn wire_note(bytes: u64, wire: Option<u64>) -> String {
    match wire {
        Some(w) => format!(", {} on the wire{}", human(w), ratio_note(bytes, w)),
        None => String::new(),
    }
}

/// What the summary line adds after the bytes: bytes the destination already had, files
/// an earlier run had begun (`resumed`: how many, and their bytes kept) and entries
/// `--delete` removed (empty when all are 0).
pub fn summary_tail(skipped: u64, resumed: (u64, u64), deleted: u64) -> String {
    let mut s = String::new();
    if skipped > 0 {
        s.push_str(&format!(", {} skipped: already there", human(skipped)));
    }
    if resumed.0 > 0 {
        s.push_str(&format!(
            ", resumed {} of an earlier run ({} of it kept)",
            count(resumed.0, "file", "files"),
            human(resumed.1)
        ));
    }
    if deleted > 0 {
        s.push_str(&format!(", deleted {deleted}"));
    }
    s
}

/// The summary of a dry run: what a real run would do.
pub fn dry_run_line(files: u64, unchanged: u64, deleted: u64) -> String {
    format!(
        "haul: dry run: would send {} ({unchanged} up to date) and delete {deleted}; \
         nothing was changed",
        count(files, "file", "files")
    )
}

/// The totals `--stats` prints (rsync's names, where the meaning is the same).
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Stats {
    /// Entries in the manifest.
    pub entries: u64,
    /// Of which regular files.
    pub regular: u64,
    /// Of which directories.
    pub dirs: u64,
    /// Regular files sent (new or changed); `--json`'s `files`.
    pub transferred: u64,
    /// Entries deleted; `--json`'s `deleted`.
    pub deleted: u64,
    /// Lengths of all regular files, holes and every hardlink included (as rsync).
    pub total_size: u64,
    /// The lengths of the files sent, holes included (rsync's "Total transferred file
    /// size").
    pub transferred_size: u64,
    /// Bytes sent as data and written; `--json`'s `bytes_written`.
    pub literal: u64,
    /// Bytes of files sent that the destination already had (delta pieces, resumed ranges).
    pub matched: u64,
    /// Bytes of unchanged files and matched data; `--json`'s `bytes_skipped`.
    pub skipped: u64,
    /// Bytes of data frames on the wire; `--json`'s `bytes_wire`.
    pub wire: u64,
    /// Whether it was a dry run.
    pub dry_run: bool,
}

impl Stats {
    /// rsync-like lines, one total each.
    pub fn text(&self) -> String {
        let n = thousands;
        let speedup = self.total_size as f64 / (self.wire.max(1)) as f64;
        let mut s = format!(
            "Number of files: {} (reg: {}, dir: {}, other: {})\n\
             Number of regular files transferred: {}\n\
             Number of deleted files: {}\n\
             Total file size: {} bytes\n\
             Total transferred file size: {} bytes\n\
             Literal data: {} bytes\n\
             Matched data: {} bytes\n\
             Skipped (already there): {} bytes\n\
             Total bytes on the wire: {}\n\
             total size is {}  speedup is {speedup:.2}",
            n(self.entries),
            n(self.regular),
            n(self.dirs),
            n(self.entries.saturating_sub(self.regular + self.dirs)),
            n(self.transferred),
            n(self.deleted),
            n(self.total_size),
            n(self.transferred_size),
            n(self.literal),
            n(self.matched),
            n(self.skipped),
            n(self.wire),
            n(self.total_size),
        );
        if self.dry_run {
            s.push_str(" (DRY RUN)");
        }
        s
    }
}

/// `n` with `,` between groups of three digits, as rsync writes totals.
fn thousands(n: u64) -> String {
    let d = n.to_string();
    let mut out = String::new();
    for (i, c) in d.chars().enumerate() {
        if i > 0 && (d.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The one-line summary of a stream: bytes, time, rate, wire bytes (`None`: on this host).
pub fn stream_line(verb: &str, bytes: u64, wire: Option<u64>, started: Instant) -> String {
    let secs = started.elapsed().as_secs_f64().max(1e-3);
    format!(
        "haul: {verb} a stream of {} in {secs:.1} s ({}/s){}",
        human(bytes),
        human((bytes as f64 / secs) as u64),
        wire_note(bytes, wire)
    )
}

/// `-v` (when `verbose`): which congestion control the data connections used, and why.
pub fn say_congestion(cc: Option<&(String, String)>, verbose: bool) {
    if let (Some((name, why)), true) = (cc, verbose) {
        eprintln!("haul: data connections use congestion control {name} ({why})");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_a_peer_wrote_is_printed_escaped() {
        // Before: `haul: error: {e}` printed the receiver's message as it came, so the far
        // side could clear the sender's terminal or set its title.
        let e = crate::Error::Remote {
            side: "receiver",
            message: "disk full\x1b[2J\x1b]0;owned\x07 at d/\\#012x".into(),
            code: 1,
        };
        assert_eq!(
            error_line(&e),
            "haul: error: receiver: disk full\\#033[2J\\#033]0;owned\\#007 at d/\\#012x"
        );
    }

    #[test]
    fn long_paths_are_shown_shortened_and_escaped() {
        let long = format!("/a\n{}/end", "x".repeat(5000));
        let shown = shown_path(std::path::Path::new(&long));
        assert_eq!(shown.chars().count(), SHOWN_PATH + 1);
        assert!(shown.starts_with("/a\\#012xx"), "{shown}");
        assert!(shown.ends_with("xx/end") && shown.contains('…'), "{shown}");
        assert_eq!(shown_path(std::path::Path::new("/short")), "/short");
    }

    #[test]
    fn control_characters_are_escaped() {
        assert_eq!(escape("a\nb\tc"), "a\\#012b\\#011c");
        assert_eq!(escape("plain é"), "plain é");
    }

    #[test]
    fn bytes_that_are_not_utf8_are_escaped() {
        assert_eq!(escape_bytes(b"a\xffb\n"), "a\\#377b\\#012");
    }

    #[test]
    fn stats_group_digits() {
        assert_eq!(thousands(1234567), "1,234,567");
        assert_eq!(thousands(12), "12");
        let t = Stats {
            entries: 3,
            regular: 2,
            dirs: 1,
            literal: 1000,
            ..Stats::default()
        }
        .text();
        assert!(
            t.contains("Number of files: 3 (reg: 2, dir: 1, other: 0)"),
            "{t}"
        );
        assert!(t.contains("Literal data: 1,000 bytes"), "{t}");
    }

    #[test]
    fn summaries_count_in_the_singular_and_leave_out_the_wire_on_this_host() {
        // Before: "haul: sent 1 files, …, 13.40 MiB on the wire" for a copy on this host.
        let now = Instant::now();
        let local = summary_line("sent", 1, 2048, None, now);
        assert!(
            local.starts_with("haul: sent 1 file, 2.00 KiB in "),
            "{local}"
        );
        assert!(!local.contains("wire"), "{local}");
        let far = summary_line("sent", 2, 4096, Some(1024), now);
        assert!(far.starts_with("haul: sent 2 files, "), "{far}");
        assert!(
            far.ends_with(", 1.00 KiB on the wire, compression ratio 4.00"),
            "{far}"
        );
        assert!(!stream_line("sent", 5, None, now).contains("wire"));
        assert!(dry_run_line(1, 0, 0).contains("would send 1 file ("));
        // Before: a resumed re-run said only "16.00 MiB skipped: already there".
        assert_eq!(
            summary_tail(16 << 20, (1, 16 << 20), 0),
            ", 16.00 MiB skipped: already there, resumed 1 file of an earlier run \
             (16.00 MiB of it kept)"
        );
    }

    #[test]
    fn human_units() {
        assert_eq!(human(5), "5 B");
        assert_eq!(human(1536), "1.50 KiB");
        assert_eq!(human(3 << 30), "3.00 GiB");
    }
}
