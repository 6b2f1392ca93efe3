//! What the local `haul` and the far end (`haul serve`, started over ssh) say to each
//! other on the ssh channel: text lines on the far end's stdin and stdout.
//!
//! The far end's stdout carries nothing but these lines:
//!
//! ```text
//! haul-serve SERVE_VERSION PROTOCOL_VERSION [blake3-of-own-binary]   greeting, first line
//! haul-msg BASE32(postcard(Reply))                                   Ready, then Done
//! ```
//!
//! and the local side writes `haul-msg BASE32(postcard(Request))` lines to its stdin.
//! Base32 keeps the lines free of anything a terminal or shell could misread, and postcard
//! gives a fixed encoding that never allocates beyond its input. Paths travel as raw bytes,
//! so names that are not UTF-8 survive. The ticket and the paths go through here, never
//! through a command line, so neither appears in a process listing.
//!
//! Calling order: the far end greets; the local side sends one `Request::Receive`,
//! `Request::Send`, `Request::ReceiveStream` or `Request::SendStream`; the far end
//! answers `Ready` (or `Done` with an error); a file sender's far end then waits for
//! `Request::Go` (a stream sender starts at once); at the end the far end sends `Done`
//! and exits with its code. End of input on the far end's stdin at any point means
//! "abort".

use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use crate::plan::select::Selection;
use crate::protocol::{Accept, Chain, Listing, Replica, SyncOptions};
use crate::transport::PROTOCOL_VERSION;

/// Version of this line protocol; bumped whenever `Request` or `Reply` change shape.
/// 15: `Stats` carries `transferred_size` (`--stats`' "Total transferred file size");
/// `Send` and `SendStream` carry `congestion` (`--cc` for a pull's far sender); `Send`'s
/// `SyncOptions` carry rsync's transfer rules (`rules`).
/// 14: the `Send` selection's `--files-from` list holds its paths by base (the part
/// before a `/./`) and says whether `-r` was given.
/// 13: `Receive`'s `Accept` says `xattrs` (the receiver's `--no-xattrs`).
/// 12: `Go`'s chain carries a nonce field and `Done`'s replicas a proof field (the far
/// sender checks the proofs; what it reports is its verdict).
/// 11: `Receive` and `ReceiveStream` say `relay` (whether the far end may pass the
/// transfer on to a chain's next receiver; a receiver refuses a chain otherwise).
/// 10: `Stats` also carries the totals of `--stats` (entries, regular files, directories,
/// total size, matched data, dry run), so that a remote-to-remote copy prints them.
/// 9: `Done` carries the far end's counts (`Stats`: what a push's `--json` report says),
/// so that a remote-to-remote copy prints the same report.
/// 8: `Probe` says `everywhere`, `ProbeSource` says `listen` (a remote-to-remote probe);
/// `Go` carries a fan-out's chain and first receiver's label, `Done` the replicas.
/// 7: `ProbeSource`, `SourceProbed` (a far source's probe). 6: `Request::ReceiveStream`
/// says `everywhere` (a stream's fan-out); `Probe`, `Probed`.
pub const SERVE_VERSION: u16 = 15;
/// Every message line starts with this.
const MSG_PREFIX: &str = "haul-msg ";
/// Greeting lines start with this.
const GREETING_PREFIX: &str = "haul-serve ";
/// Longest line either side accepts (a request with many long paths still fits).
pub const MAX_LINE: usize = 16 << 20;

/// Local → far end.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Request {
    /// Be the receiver: listen, write into `dest`.
    Receive {
        /// Destination path on the far host.
        dest: Vec<u8>,
        /// Whether the transfer is one source that is not a directory (then `dest` may
        /// name the file itself: rsync's rule, decided where `dest` can be looked at).
        single_file: bool,
        /// Advertise this address in the ticket instead of the host's own ones.
        advertise: Option<IpAddr>,
        /// Listen on every address: the dialer is another far host (remote to remote),
        /// which may reach this one by another address than the local side's ssh did.
        #[serde(default)]
        everywhere: bool,
        /// What to keep of the sender's metadata.
        #[serde(default)]
        accept: Accept,
        /// `--dry-run`: open the destination without creating it.
        #[serde(default)]
        dry_run: bool,
        /// `--keep-cache`: leave written pages in the page cache.
        keep_cache: bool,
        /// Pass the transfer on to the receivers a chain fan-out names (`recv --relay`):
        /// set for every destination of `copy --also`.
        relay: bool,
    },
    /// Be the sender of `paths`.
    Send {
        /// Source paths on the far host (`dir/` means the contents, as locally).
        paths: Vec<Vec<u8>>,
        /// Data streams.
        streams: u16,
        /// Compression, as `--compress` spells it.
        compress: String,
        /// Block size in bytes.
        block_size: u64,
        /// What the receiver does with what it already has (`--checksum`, `--inplace`,
        /// `--delete`).
        sync: SyncOptions,
        /// Listen for the receiver's connections (pull); `false`: dial the ticket that
        /// `Go` brings (remote to remote).
        listen: bool,
        /// Advertise this address in the ticket instead of the host's own ones.
        advertise: Option<IpAddr>,
        /// What the walk takes: filter rules, the --files-from list (read on the local
        /// host), symlinks followed, -x.
        select: Selection,
        /// Bandwidth cap, bytes per second on the wire (`--limit`).
        limit: Option<u64>,
        /// What this far sender prints (on its stderr) per change the receiver reports
        /// (remote to remote, `-v`/`-i`).
        #[serde(default)]
        listing: Listing,
        /// `--keep-cache`: leave what is read in the page cache.
        keep_cache: bool,
        /// `--cc`: the congestion control of the data connections (None: BBR where
        /// offered); a name the far kernel lacks fails there (exit 2).
        congestion: Option<String>,
    },
    /// Receive one stream into the file `dest`, or into the standard input of `command`
    /// (run with `sh -c`; its standard output goes to our standard error).
    ReceiveStream {
        /// The file (raw bytes; empty with `command`).
        dest: Vec<u8>,
        /// The command.
        command: Option<String>,
        /// Most stream bytes held in memory.
        window: u64,
        /// Advertise this address in the ticket instead of our own.
        advertise: Option<IpAddr>,
        /// `--keep-cache`: leave a file's written pages in the page cache.
        keep_cache: bool,
        /// Listen on every address: a further receiver of a fan-out (`copy --also`),
        /// which the receiver before it dials directly.
        everywhere: bool,
        /// Pass the stream on to the receivers a chain fan-out names (`recv --relay`):
        /// set for every destination of `copy --also`.
        relay: bool,
    },
    /// Send one stream: the file `path`, or the standard output of `command`; listen for
    /// the local receiver's connections.
    SendStream {
        /// The file (raw bytes; empty with `command`).
        path: Vec<u8>,
        /// The command.
        command: Option<String>,
        /// Data streams.
        streams: u16,
        /// Compression, as `--compress` spells it.
        compress: String,
        /// Block size.
        block_size: u64,
        /// Most stream bytes held in memory.
        window: u64,
        /// Advertise this address in the ticket instead of our own.
        advertise: Option<IpAddr>,
        /// Bandwidth cap, bytes per second on the wire (`--limit`).
        limit: Option<u64>,
        /// `--keep-cache`: leave what is read from a file in the page cache.
        keep_cache: bool,
        /// `--cc`, as in `Send`.
        congestion: Option<String>,
    },
    /// `haul probe SRC... host:DST`: measure the durable write rate and the cost per file
    /// in `dest` (or the nearest existing directory above it; nothing stays), then listen
    /// for `streams` data connections and count the bytes they carry until they end.
    Probe {
        /// The destination path (raw bytes).
        dest: Vec<u8>,
        /// Data connections the local side opens.
        streams: u16,
        /// Advertise this address in the ticket instead of our own.
        advertise: Option<IpAddr>,
        /// Listen on every address: the far source dials (remote to remote).
        everywhere: bool,
    },
    /// `haul probe host:SRC... DST`: walk and sample `paths` here as a local probe does,
    /// measure each codec on the sample, answer `SourceProbed`, then `Ready` with a
    /// ticket, and write incompressible blocks on each of the `streams` data connections
    /// the local side opens, for a few seconds (the network in the direction data would
    /// flow; the local side counts). Remote to remote (`listen` false): `Ready` without a
    /// ticket, then wait for `Go` with the far destination's ticket and write the blocks
    /// on `streams` connections dialed to it (it counts).
    ProbeSource {
        /// Source paths on the far host (raw bytes).
        paths: Vec<Vec<u8>>,
        /// Data connections.
        streams: u16,
        /// Advertise this address in the ticket instead of our own.
        advertise: Option<IpAddr>,
        /// Listen for the local side's connections; `false`: dial the ticket `Go` brings.
        listen: bool,
    },
    /// Sender only: start.
    Go {
        /// The new name of the single source at the destination, if rsync's rule renames it.
        rename: Option<Vec<u8>>,
        /// The receiver's ticket, when this far end dials (remote to remote).
        ticket: Option<String>,
        /// TLS on the connections this far end dials.
        encrypt: bool,
        /// A chain fan-out (`copy host:SRC DST --also …`): the receivers after the first,
        /// which the first passes everything on to.
        chain: Option<Chain>,
        /// How messages name the first receiver (a fan-out's replica report).
        label: String,
    },
}

/// Far end → local.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Reply {
    /// Set up and waiting.
    Ready {
        /// The ticket to dial, when this far end listens.
        ticket: Option<String>,
        /// The port this far end listens on, reachable at 127.0.0.1 on its own host (for
        /// connections carried through ssh when the direct route is blocked).
        port: Option<u16>,
        /// Sender: whether the sources are one non-directory.
        single_file: bool,
        /// Receiver: the name the single source takes at the destination, if renamed.
        rename: Option<Vec<u8>>,
    },
    /// What a `Probe` measured here (before its `Done`).
    Probed {
        /// Durable write rate in bytes per second, if it could be measured.
        write_rate: Option<u64>,
        /// Microseconds each file adds (create, write 4 KiB, fdatasync, close).
        file_micros: Option<u64>,
        /// Bytes that arrived on the data connections.
        received: u64,
        /// Microseconds from the first byte to the last.
        micros: u64,
    },
    /// What a `ProbeSource` measured here (before its `Ready`).
    SourceProbed(SourceReport),
    /// Finished; its `code` is the far end's exit code.
    Done(Done),
}

/// The far end's final word. (A newtype variant of a struct encodes as the struct variant
/// with the same fields did: one `Done` type on both sides, no wire change.)
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Done {
    /// Exit code (0: everything arrived).
    pub code: i32,
    /// One line for the user when `code` is not 0.
    pub message: String,
    /// Files moved (for the summary line).
    pub files: u64,
    /// Bytes of file data moved.
    pub bytes: u64,
    /// Entries removed by `--delete` (for the summary line).
    #[serde(default)]
    pub deleted: u64,
    /// A fan-out's sender: what became of each receiver (the sender's report); also
    /// when `code` says the sender skipped files it could not read.
    pub replicas: Vec<Replica>,
    /// The rest of the far end's counts (all 0 when it failed before transferring).
    pub stats: Stats,
}

/// The counts of a far end's run beyond `Done`'s `files`, `bytes` and `deleted`: the rest
/// of what `--json` reports (a remote-to-remote copy prints the far sender's).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stats {
    /// Regular files already up to date at the destination.
    pub files_unchanged: u64,
    /// Source bytes read and sent (a sender).
    pub bytes_read: u64,
    /// Bytes of frames on the wire (before TLS).
    pub bytes_wire: u64,
    /// Bytes not sent because the destination already had them.
    pub bytes_skipped: u64,
    /// Files that could not be read (a sender), or that the sender could not read (a
    /// receiver).
    pub failed_files: u64,
    /// Files that kept changing while read.
    pub changed_files: u64,
    /// Connections re-established during the run.
    pub reconnects: u64,
    /// Manifest entries (`--stats`' number of files).
    pub entries: u64,
    /// Of which regular files.
    pub regular: u64,
    /// Of which directories.
    pub dirs: u64,
    /// Lengths of all regular files, holes and hardlinks included (`--stats`, as rsync).
    pub total_size: u64,
    /// The lengths of the files sent, holes included (`--stats`, as rsync).
    pub transferred_size: u64,
    /// Bytes of files sent that the destination already had (delta pieces, resumed ranges).
    pub matched: u64,
    /// Whether it was a dry run.
    pub dry_run: bool,
}

impl Stats {
    /// The counts of `--json`'s `report` and of `--stats` that `Done` does not carry
    /// itself: the run's report, its summary and its counters.
    pub fn of(
        r: &crate::progress::Report,
        s: &crate::protocol::Summary,
        c: &crate::progress::Counters,
    ) -> Stats {
        let load = |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
        Stats {
            files_unchanged: r.files_unchanged,
            bytes_read: r.bytes_read,
            bytes_wire: r.bytes_wire,
            bytes_skipped: r.bytes_skipped,
            failed_files: r.failed_files,
            changed_files: r.changed_files,
            reconnects: r.reconnects,
            entries: load(&c.entries),
            regular: load(&c.total_files) + load(&c.links),
            dirs: load(&c.dirs),
            total_size: load(&c.file_size),
            transferred_size: s.transferred_size,
            matched: s.matched,
            dry_run: s.dry_run,
        }
    }
}

/// A far source's measurements (`probe::Sources` and the codecs' rates, in integers).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceReport {
    /// Regular files.
    pub files: u64,
    /// Their data bytes.
    pub bytes: u64,
    /// Whether the walk finished in its time.
    pub complete: bool,
    /// Sample blocks read.
    pub blocks: u32,
    /// Their read rate, bytes per second.
    pub read_rate: Option<u64>,
    /// Whether they were read with `O_DIRECT`.
    pub direct: bool,
    /// Thousandths of the sample's pages cached before.
    pub cached_permille: u16,
    /// Small files (read whole).
    pub small_files: u64,
    /// Their data bytes.
    pub small_bytes: u64,
    /// Nanoseconds per small file read whole.
    pub small_read_nanos: Option<u64>,
    /// Microseconds the walk took.
    pub walk_micros: u64,
    /// Each codec: as `--compress` spells it, raw bytes per second, raw ÷ sent × 1000.
    pub codecs: Vec<(String, u64, u64)>,
}

/// The first line of `haul serve`: `haul-serve 1 1` or `haul-serve 1 1 HASH`.
pub fn greeting(self_hash: Option<&str>) -> String {
    match self_hash {
        Some(h) => format!("{GREETING_PREFIX}{SERVE_VERSION} {PROTOCOL_VERSION} {h}"),
        None => format!("{GREETING_PREFIX}{SERVE_VERSION} {PROTOCOL_VERSION}"),
    }
}

/// A parsed greeting.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Greeting {
    /// The far end's [`SERVE_VERSION`].
    pub serve: u16,
    /// The far end's transport protocol version.
    pub protocol: u16,
    /// BLAKE3 of the far end's own executable, when it was asked to say.
    pub hash: Option<String>,
}

impl Greeting {
    /// Whether the far end speaks exactly our versions.
    pub fn compatible(&self) -> bool {
        self.serve == SERVE_VERSION && self.protocol == PROTOCOL_VERSION
    }
}

/// Parses a greeting line; `None` if it is not one.
pub fn parse_greeting(line: &str) -> Option<Greeting> {
    let rest = line.trim_end().strip_prefix(GREETING_PREFIX)?;
    let mut words = rest.split(' ');
    let serve = words.next()?.parse().ok()?;
    let protocol = words.next()?.parse().ok()?;
    let hash = words.next().map(str::to_string);
    if words.next().is_some() {
        return None;
    }
    Some(Greeting {
        serve,
        protocol,
        hash,
    })
}

/// One message as a line (no newline).
pub fn encode<T: Serialize>(msg: &T) -> String {
    // postcard cannot fail on these types (no maps with non-string keys, no I/O).
    let bin = postcard::to_allocvec(msg).unwrap_or_default();
    format!("{MSG_PREFIX}{}", data_encoding::BASE32_NOPAD.encode(&bin))
}

/// Decodes a message line; `Err` says what is wrong with it.
pub fn decode<T: for<'a> Deserialize<'a>>(line: &str) -> Result<T, String> {
    let body = line
        .trim_end()
        .strip_prefix(MSG_PREFIX)
        .ok_or_else(|| format!("unexpected line {:?}", shorten(line)))?;
    let bin = data_encoding::BASE32_NOPAD
        .decode(body.as_bytes())
        .map_err(|e| format!("malformed message: {e}"))?;
    postcard::from_bytes(&bin).map_err(|e| format!("malformed message: {e}"))
}

/// Whether `line` is a message line (as opposed to noise from a login script).
pub fn is_message(line: &str) -> bool {
    line.starts_with(MSG_PREFIX)
}

/// At most 100 characters of `s`, for messages about unexpected output.
pub fn shorten(s: &str) -> String {
    let s = s.trim_end();
    match s.char_indices().nth(100) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

#[cfg(test)]
#[path = "wire_tests.rs"]
mod tests;
