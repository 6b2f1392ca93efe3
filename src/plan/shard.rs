//! Shard files: one share of a plan (`haul plan SRC... --shards N`), the list of entries
//! one scheduler task moves with `haul copy --shard FILE DST`. This module is the file
//! format (encode, decode) and the walk's view of one shard ([`ShardList`]); the plan's
//! walk and balancing live in `balance`, the files are written and checked by `cmd`.
//!
//! The format is text, one record a line, so a person can read and `grep` it:
//!
//! ```text
//! haul-shard 1
//! plan 5f0c…(32 hex)            the plan's random id: shards of two plans never mix
//! shard 3 of 8
//! links keep                    keep | unsafe | all: the plan's -L/--copy-unsafe-links
//! total 10234 52428800          entries and bytes of the whole plan
//! source /abs/path/data/        one line per SRC, absolute, trailing slash kept
//! entries 1279 6553600          this shard's entries and bytes
//! f 4096 0 dir/name             kind, size, source index, path inside that source
//! end 9a1b…(64 hex)             BLAKE3 of every byte above this line
//! ```
//!
//! Kinds: `d` directory, `f` regular file, `h` another link of a file listed in this
//! shard, `l` symlink, `p` FIFO, `c`/`b` devices. The path is relative to its source
//! (`.`: the source itself). Names are escaped as haul's messages escape them: control
//! bytes, bytes that are not UTF-8 and `\` itself become `\#ooo` (octal), so a record is
//! one line whatever the name holds, and decoding is exact.
//!
//! Not here: the walk (the plan and `copy --shard` share `walk`), deciding which shard
//! gets what (`balance`), files on disk (`cmd`).

use std::fmt::Write as _;

use crate::protocol::{PathError, SafeRelPath};

use super::select::{Links, ShardList};

/// The first line of every shard file; the number is the format's version.
pub const MAGIC: &str = "haul-shard 1";
/// Largest shard file read (a bound on what a corrupt or hostile file can make us
/// allocate): about 20 million records.
pub const MAX_FILE: u64 = 2 << 30;
/// Most sources in one plan.
pub const MAX_SOURCES: usize = 4096;
/// Most shards in one plan.
pub const MAX_SHARDS: u32 = 65_536;

/// What one record lists.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// A directory (its own mode and times).
    Dir,
    /// A regular file.
    File,
    /// Another name of a multiply-linked file listed in the same shard.
    Hardlink,
    /// A symlink.
    Symlink,
    /// A FIFO.
    Fifo,
    /// A character device.
    Char,
    /// A block device.
    Block,
}

impl Kind {
    /// The record's letter.
    pub fn letter(self) -> char {
        match self {
            Kind::Dir => 'd',
            Kind::File => 'f',
            Kind::Hardlink => 'h',
            Kind::Symlink => 'l',
            Kind::Fifo => 'p',
            Kind::Char => 'c',
            Kind::Block => 'b',
        }
    }

    fn from_letter(s: &str) -> Option<Kind> {
        Some(match s {
            "d" => Kind::Dir,
            "f" => Kind::File,
            "h" => Kind::Hardlink,
            "l" => Kind::Symlink,
            "p" => Kind::Fifo,
            "c" => Kind::Char,
            "b" => Kind::Block,
            _ => return None,
        })
    }
}

/// One listed entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// What it is.
    pub kind: Kind,
    /// Its size in bytes (regular files and their links; 0 otherwise).
    pub size: u64,
    /// Which source of the plan it is in.
    pub source: u32,
    /// Its path inside that source (empty: the source itself).
    pub path: SafeRelPath,
}

/// Everything in a shard file but its records.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    /// The plan's id (random, hex).
    pub plan: String,
    /// This shard's index, `0..count`.
    pub index: u32,
    /// How many shards the plan has.
    pub count: u32,
    /// Which symlinks the plan's walk followed.
    pub links: Links,
    /// Entries in the whole plan.
    pub total_entries: u64,
    /// Bytes in the whole plan.
    pub total_bytes: u64,
    /// The plan's sources, absolute, as given otherwise (`dir/` keeps its slash).
    pub sources: Vec<Vec<u8>>,
    /// Entries in this shard.
    pub entries: u64,
    /// Bytes in this shard.
    pub bytes: u64,
}

impl Header {
    /// What in this header, read from the file of shard `index`, disagrees with `first`
    /// (shard 0's): every shard of a plan repeats the plan-wide fields, and a check that
    /// reads several shards takes them from shard 0. `None`: it belongs to that plan.
    pub fn mismatch(&self, first: &Header, index: u32) -> Option<&'static str> {
        if self.plan != first.plan || self.count != first.count {
            return Some("plan id or shard count");
        }
        if self.index != index {
            return Some("shard index");
        }
        if self.links != first.links {
            return Some("symlink rule (links)");
        }
        if (self.total_entries, self.total_bytes) != (first.total_entries, first.total_bytes) {
            return Some("plan totals");
        }
        if self.sources != first.sources {
            return Some("sources");
        }
        None
    }
}

/// A decoded shard file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardFile {
    /// Its header.
    pub header: Header,
    /// Its records, in the plan's walk order.
    pub records: Vec<Record>,
}

/// Why a shard file was refused; `line` counts from 1.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    /// Not a shard file, or of another version.
    #[error("not a haul shard file (its first line is not `{MAGIC}`)")]
    Magic,
    /// A line that does not read as what belongs there.
    #[error("line {line}: {what}")]
    Line {
        /// Where.
        line: usize,
        /// What was wrong.
        what: String,
    },
    /// The file ends before its `end` line: cut short.
    #[error("it is cut short (no `end` line)")]
    Truncated,
    /// The BLAKE3 in the `end` line does not match the content: damaged, or edited
    /// without updating it (the checksum has no key: it is no defence against tampering).
    #[error("its checksum does not match its content (damaged or edited)")]
    Checksum,
}

/// Serialises a shard file; `end` carries BLAKE3 of everything before it.
pub fn encode(header: &Header, records: &[Record]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut w = Writer::new(&mut out, header);
    for r in records {
        w.record(r);
    }
    // Writing into a Vec cannot fail.
    let _ = w.finish();
    out
}

/// Writes a shard file a record at a time (a plan writes millions): the header at
/// creation, then [`Writer::record`]s, then [`Writer::finish`]. Writes go to `out`, which
/// should be buffered; the first error is kept and returned by `finish`.
pub struct Writer<W: std::io::Write> {
    out: W,
    sum: blake3::Hasher,
    error: Option<std::io::Error>,
}

impl<W: std::io::Write> Writer<W> {
    /// Starts a file with `h`.
    pub fn new(out: W, h: &Header) -> Writer<W> {
        let mut s = String::new();
        let links = match h.links {
            Links::Keep => "keep",
            Links::CopyUnsafe => "unsafe",
            Links::CopyAll => "all",
        };
        let _ = writeln!(
            s,
            "{MAGIC}\nplan {}\nshard {} of {}",
            h.plan, h.index, h.count
        );
        let _ = writeln!(s, "links {links}");
        let _ = writeln!(s, "total {} {}", h.total_entries, h.total_bytes);
        for src in &h.sources {
            let _ = writeln!(s, "source {}", escape(src));
        }
        let _ = writeln!(s, "entries {} {}", h.entries, h.bytes);
        let mut w = Writer {
            out,
            sum: blake3::Hasher::new(),
            error: None,
        };
        w.line(s.as_bytes());
        w
    }

    /// Appends one record.
    pub fn record(&mut self, r: &Record) {
        let path = match r.path.as_bytes() {
            b"" => ".".to_string(),
            p => escape(p),
        };
        let line = format!("{} {} {} {path}\n", r.kind.letter(), r.size, r.source);
        self.line(line.as_bytes());
    }

    fn line(&mut self, b: &[u8]) {
        if self.error.is_none() {
            self.sum.update(b);
            if let Err(e) = self.out.write_all(b) {
                self.error = Some(e);
            }
        }
    }

    /// Writes the `end` line; the writer, or the first write error.
    pub fn finish(mut self) -> std::io::Result<W> {
        let end = format!("end {}\n", self.sum.finalize().to_hex());
        self.line(end.as_bytes());
        match self.error.take() {
            Some(e) => Err(e),
            None => Ok(self.out),
        }
    }
}

/// Parses a shard file, checking its checksum, its counts and every path.
pub fn decode(bytes: &[u8]) -> Result<ShardFile, FormatError> {
    let body_end = match bytes.strip_suffix(b"\n") {
        Some(b) => b.iter().rposition(|&c| c == b'\n').map_or(0, |i| i + 1),
        None => return Err(FormatError::Truncated),
    };
    let (body, last) = bytes.split_at(body_end);
    let mut lines = Lines { rest: body, no: 0 };
    if lines.next_line()? != Some(MAGIC) {
        return Err(FormatError::Magic);
    }
    let sum = match std::str::from_utf8(last)
        .ok()
        .and_then(|l| l.strip_prefix("end "))
    {
        Some(s) => s.trim_end_matches('\n'),
        None => return Err(FormatError::Truncated),
    };
    if sum != blake3::hash(body).to_hex().as_str() {
        return Err(FormatError::Checksum);
    }
    let plan = lines.field("plan")?;
    if plan.len() != 32 || !plan.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(lines.bad("the plan id is not 32 hex digits"));
    }
    let shard = lines.field("shard")?;
    let (index, count) = match shard.split_once(" of ") {
        Some((i, n)) => (lines.num::<u32>(i)?, lines.num::<u32>(n)?),
        None => return Err(lines.bad("expected `shard I of N`")),
    };
    if count == 0 || count > MAX_SHARDS || index >= count {
        return Err(lines.bad("shard index out of range"));
    }
    let links = match lines.field("links")? {
        "keep" => Links::Keep,
        "unsafe" => Links::CopyUnsafe,
        "all" => Links::CopyAll,
        _ => return Err(lines.bad("links must be keep, unsafe or all")),
    };
    let (total_entries, total_bytes) = lines.pair("total")?;
    let mut sources = Vec::new();
    let (entries, bytes) = loop {
        let line = lines.next_line()?.ok_or(FormatError::Truncated)?;
        if let Some(s) = line.strip_prefix("source ") {
            if sources.len() == MAX_SOURCES {
                return Err(lines.bad("too many sources"));
            }
            let src = unescape(s).ok_or_else(|| lines.bad("bad escape in a source"))?;
            if !src.starts_with(b"/") || src.contains(&0) {
                return Err(lines.bad("a source must be an absolute path"));
            }
            sources.push(src);
        } else if let Some(rest) = line.strip_prefix("entries ") {
            break lines.two(rest)?;
        } else {
            return Err(lines.bad("expected `source PATH` or `entries N BYTES`"));
        }
    };
    if sources.is_empty() {
        return Err(lines.bad("no source"));
    }
    let mut records = Vec::new();
    let mut sum_bytes: u64 = 0;
    while let Some(line) = lines.next_line()? {
        let r = lines.record(line, sources.len())?;
        sum_bytes = sum_bytes.saturating_add(r.size);
        records.push(r);
    }
    if records.len() as u64 != entries || sum_bytes != bytes {
        return Err(lines.bad("the records do not add up to the `entries` line"));
    }
    if entries > total_entries || bytes > total_bytes {
        return Err(lines.bad("this shard holds more than the whole plan"));
    }
    Ok(ShardFile {
        header: Header {
            plan: plan.to_string(),
            index,
            count,
            links,
            total_entries,
            total_bytes,
            sources,
            entries,
            bytes,
        },
        records,
    })
}

/// The lines of a shard file's body, counted for messages.
struct Lines<'a> {
    rest: &'a [u8],
    no: usize,
}

impl<'a> Lines<'a> {
    fn next_line(&mut self) -> Result<Option<&'a str>, FormatError> {
        if self.rest.is_empty() {
            return Ok(None);
        }
        self.no += 1;
        let (line, rest) = match self.rest.iter().position(|&b| b == b'\n') {
            Some(i) => (&self.rest[..i], &self.rest[i + 1..]),
            None => (self.rest, &b""[..]),
        };
        self.rest = rest;
        std::str::from_utf8(line)
            .map(Some)
            .map_err(|_| self.bad("not UTF-8 (names are escaped)"))
    }

    fn bad(&self, what: &str) -> FormatError {
        FormatError::Line {
            line: self.no,
            what: what.to_string(),
        }
    }

    /// The rest of the next line, which must start with `name `.
    fn field(&mut self, name: &str) -> Result<&'a str, FormatError> {
        let line = self.next_line()?.ok_or(FormatError::Truncated)?;
        match line.strip_prefix(name).and_then(|l| l.strip_prefix(' ')) {
            Some(v) => Ok(v),
            None => Err(self.bad(&format!("expected `{name} …`"))),
        }
    }

    fn num<T: std::str::FromStr>(&self, s: &str) -> Result<T, FormatError> {
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
            return Err(self.bad("expected a number"));
        }
        s.parse().map_err(|_| self.bad("number out of range"))
    }

    fn two(&self, s: &str) -> Result<(u64, u64), FormatError> {
        match s.split_once(' ') {
            Some((a, b)) => Ok((self.num(a)?, self.num(b)?)),
            None => Err(self.bad("expected two numbers")),
        }
    }

    fn pair(&mut self, name: &str) -> Result<(u64, u64), FormatError> {
        let v = self.field(name)?;
        self.two(v)
    }

    fn record(&self, line: &str, sources: usize) -> Result<Record, FormatError> {
        let mut it = line.splitn(4, ' ');
        let (Some(k), Some(size), Some(src), Some(path)) =
            (it.next(), it.next(), it.next(), it.next())
        else {
            return Err(self.bad("expected `KIND SIZE SOURCE PATH`"));
        };
        let kind = Kind::from_letter(k).ok_or_else(|| self.bad("unknown kind"))?;
        let size: u64 = self.num(size)?;
        if size > 0 && !matches!(kind, Kind::File | Kind::Hardlink) {
            return Err(self.bad("only files have a size"));
        }
        let source: u32 = self.num(src)?;
        if source as usize >= sources {
            return Err(self.bad("no such source"));
        }
        let raw = match path {
            "." => Vec::new(),
            p => unescape(p).ok_or_else(|| self.bad("bad escape in a path"))?,
        };
        let path = SafeRelPath::parse(&raw)
            .map_err(|e: PathError| self.bad(&format!("unsafe path ({e})")))?;
        Ok(Record {
            kind,
            size,
            source,
            path,
        })
    }
}

/// `\#ooo` for control bytes, `\`, and bytes that are not UTF-8; the rest as it is.
pub fn escape(b: &[u8]) -> String {
    let mut out = String::with_capacity(b.len());
    for chunk in b.utf8_chunks() {
        for c in chunk.valid().chars() {
            if c.is_control() || c == '\\' {
                let mut buf = [0; 4];
                for x in c.encode_utf8(&mut buf).bytes() {
                    let _ = write!(out, "\\#{x:03o}");
                }
            } else {
                out.push(c);
            }
        }
        for x in chunk.invalid() {
            let _ = write!(out, "\\#{x:03o}");
        }
    }
    out
}

/// The bytes [`escape`] wrote; `None` for a `\` not followed by `#` and three octal
/// digits (at most `\#377`).
pub fn unescape(s: &str) -> Option<Vec<u8>> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'\\' {
            out.push(b[i]);
            i += 1;
            continue;
        }
        let esc = b.get(i + 1..i + 5)?;
        if esc[0] != b'#' || !esc[1..].iter().all(|d| (b'0'..=b'7').contains(d)) {
            return None;
        }
        let v = esc[1..]
            .iter()
            .fold(0u32, |v, d| v * 8 + u32::from(d - b'0'));
        out.push(u8::try_from(v).ok()?);
        i += 5;
    }
    Some(out)
}

impl ShardFile {
    /// The walk's view of this shard.
    pub fn list(&self) -> ShardList {
        ShardList::new(
            self.header.sources.len(),
            self.records
                .iter()
                .map(|r| (r.source as usize, r.path.as_bytes().to_vec())),
        )
    }
}

#[cfg(test)]
#[path = "shard_tests.rs"]
mod tests;
