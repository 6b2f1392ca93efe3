//! Typed errors of the library, one variant per cause the user can act on.
//!
//! Only `main` turns these into exit codes and printed lines (see [`Error::exit_code`]).
//! The library never prints an error itself; it returns one.

use std::io;
use std::path::PathBuf;

use crate::protocol::ProtocolError;

mod transport;

pub use transport::TransportError;

/// Exit codes, documented in README.md. Keep them stable: scripts depend on them.
pub mod exit {
    /// Everything arrived and is durable at the destination.
    pub const OK: i32 = 0;
    /// An error that fits no other class (a bug, an unexpected system error).
    pub const OTHER: i32 = 1;
    /// Bad command line, bad ticket syntax.
    pub const USAGE: i32 = 2;
    /// A source path is missing or unreadable; nothing was sent.
    pub const SOURCE: i32 = 3;
    /// The destination cannot be written (permissions, read-only, disk full).
    pub const DESTINATION: i32 = 4;
    /// The peer could not be reached or vanished mid-transfer.
    pub const NETWORK: i32 = 5;
    /// The peer refused our credentials, or presented the wrong certificate.
    pub const AUTH: i32 = 6;
    /// The peer speaks another protocol version.
    pub const VERSION: i32 = 7;
    /// Data failed verification (hash mismatch) or the peer broke the protocol.
    pub const INTEGRITY: i32 = 8;
    /// Some source files could not be read; the rest arrived (like rsync's 23).
    pub const PARTIAL: i32 = 23;
    /// Some source files kept changing while being read and were not sent; the rest
    /// arrived (like rsync's 24).
    pub const CHANGED: i32 = 24;
    /// `plan --check`: entries of the plan are missing or differ at the destination,
    /// or the shard lists overlap.
    pub const INCOMPLETE: i32 = 25;

    /// Each code and what it means, for the manual page (README.md's table says the same).
    pub const MEANINGS: [(i32, &str); 12] = [
        (OK, "everything arrived and is durable"),
        (OTHER, "an unexpected error (a bug or an unusual system error)"),
        (USAGE, "bad command line or malformed ticket"),
        (SOURCE, "a source path is missing or unreadable (nothing was sent), or a stream's --from-command failed"),
        (DESTINATION, "the destination cannot be written (permissions, read-only file system, disk full), or a stream's consumer failed or stopped reading"),
        (NETWORK, "network: cannot connect, the peer vanished or went silent mid-transfer, or a --timeout ran out"),
        (AUTH, "authentication: wrong or stale ticket (secret or certificate mismatch)"),
        (VERSION, "the peer runs an incompatible protocol version"),
        (INTEGRITY, "data failed verification (a block, or a stream's whole BLAKE3), or the peer broke the protocol"),
        (PARTIAL, "partial: some source files could not be read and were not sent; the rest arrived"),
        (CHANGED, "some source files kept changing while being read and were not sent; the rest arrived"),
        (INCOMPLETE, "plan --check: entries of the plan are missing or differ at the destination, or listed twice"),
    ];
}

/// Everything that can make a transfer fail.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Invalid combination of options, found after parsing.
    #[error("{0}")]
    Usage(String),
    /// A source given on the command line does not exist or cannot be read.
    #[error("cannot read source {path}: {source}")]
    Source {
        /// The path as the user gave it.
        path: PathBuf,
        /// The system's reason.
        source: io::Error,
    },
    /// The destination cannot be created or written.
    #[error("cannot write destination {path}: {source}{hint}")]
    Destination {
        /// Path relative to the destination root (or the root itself).
        path: PathBuf,
        /// The system's reason.
        source: io::Error,
        /// A hint for the user, e.g. ": free some space and re-run".
        hint: &'static str,
    },
    /// A block's BLAKE3 hash did not match its data.
    #[error("block of {file} at offset {offset} failed verification (corrupted in transit?)")]
    BlockHashMismatch {
        /// The file the block belongs to, relative to the destination.
        file: String,
        /// The block's byte offset.
        offset: u64,
    },
    /// Too many frames failed verification in one transfer: someone on the path keeps
    /// altering the data, or the peer is not an honest haul.
    #[error("{count} frames failed verification (the last: {last}); the connection is being tampered with or corrupted in transit")]
    Tampered {
        /// How many failed.
        count: u32,
        /// What the last failure was.
        last: String,
    },
    /// The peer reported an error of its own.
    #[error("{side}: {message}")]
    Remote {
        /// "receiver" or "sender".
        side: &'static str,
        /// What the peer said.
        message: String,
        /// The exit code class the peer assigned.
        code: i32,
    },
    /// A far end started over ssh (or ssh itself) failed; carries the far end's exit code.
    #[error("{host}: {message}")]
    Host {
        /// The host, as the user named it.
        host: String,
        /// What went wrong there, one line.
        message: String,
        /// The exit-code class.
        code: i32,
    },
    /// The peer sent something the protocol does not allow.
    #[error("protocol error from peer: {0}")]
    Protocol(#[from] ProtocolError),
    /// Connecting, TLS, authentication or the stream itself failed.
    #[error(transparent)]
    Transport(#[from] TransportError),
    /// Some source files were unreadable and skipped; the rest arrived.
    #[error("{count} source file(s) could not be read and were not sent (first: {first})")]
    Partial {
        /// How many files were skipped.
        count: u64,
        /// The first skipped file and why.
        first: String,
    },
    /// Some source files kept changing while being read; the rest arrived.
    #[error("{count} source file(s) kept changing while being read and were not sent (first: {first}); copying a live database's files is not a consistent backup")]
    Changed {
        /// How many files.
        count: u64,
        /// The first of them.
        first: String,
    },
    /// `plan --check` found the destination short of the plan.
    #[error("{count} {} of the plan missing or different at the destination: {first}", if *count == 1 { "entry" } else { "entries" })]
    Incomplete {
        /// How many.
        count: u64,
        /// The first few, with what is wrong, escaped.
        first: String,
    },
    /// A wait reached its `--timeout` (docs/design.md, *Liveness*): no sender came, or
    /// nothing moved; says which, and what to do (exit 5).
    #[error("{0}")]
    TimedOut(String),
    /// Already reported to the user (on the far end of a remote copy: in its final line);
    /// only the exit code is left.
    #[error("exit status {code}")]
    Reported {
        /// The exit code.
        code: i32,
    },
    /// A step of a Galera state transfer (`haul sst`) failed: a program it ran (the
    /// transfer, mariadb-backup) or what it needs from the server; with that step's exit
    /// status where it has one.
    #[error("sst: {message}")]
    StateTransfer {
        /// What failed, where, what to do.
        message: String,
        /// The exit-code class (the step's own when it was haul).
        code: i32,
    },
    /// A request to an object store failed, or what it returned failed verification:
    /// which object, what happened, what to do; with the exit-code class (access denied
    /// is AUTH, a missing bucket SOURCE or DESTINATION, a changed object INTEGRITY).
    #[error("{message}")]
    Object {
        /// What failed, where, what to do.
        message: String,
        /// The exit-code class.
        code: i32,
    },
    /// An I/O error on our own side that fits nowhere else.
    #[error("{context}: {source}")]
    Io {
        /// What we were doing.
        context: String,
        /// The system's reason.
        source: io::Error,
    },
}

impl Error {
    /// The documented exit code for this error.
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::Usage(_) => exit::USAGE,
            Error::Source { .. } => exit::SOURCE,
            Error::Destination { .. } => exit::DESTINATION,
            Error::BlockHashMismatch { .. } | Error::Tampered { .. } | Error::Protocol(_) => {
                exit::INTEGRITY
            }
            Error::Remote { code, .. }
            | Error::Host { code, .. }
            | Error::Reported { code }
            | Error::StateTransfer { code, .. }
            | Error::Object { code, .. } => *code,
            Error::Transport(t) => t.exit_code(),
            Error::TimedOut(_) => exit::NETWORK,
            Error::Partial { .. } => exit::PARTIAL,
            Error::Changed { .. } => exit::CHANGED,
            Error::Incomplete { .. } => exit::INCOMPLETE,
            Error::Io { .. } => exit::OTHER,
        }
    }

    /// Wraps an I/O error with what we were doing.
    pub fn io(context: impl Into<String>, source: io::Error) -> Error {
        Error::Io {
            context: context.into(),
            source,
        }
    }

    /// A destination write error, with a hint chosen from the errno.
    pub fn destination(path: impl Into<PathBuf>, source: io::Error) -> Error {
        let hint = match source.raw_os_error() {
            Some(libc::ENOSPC) | Some(libc::EDQUOT) => ": free some space and re-run",
            Some(libc::EROFS) => ": the file system is mounted read-only",
            Some(libc::EACCES) | Some(libc::EPERM) => {
                ": check permissions on the destination (or run as its owner)"
            }
            _ => "",
        };
        Error::Destination {
            path: path.into(),
            source,
            hint,
        }
    }
}

/// Result with the library's error.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Runs a worker thread's body `f`, turning a panic in it into an error naming `what`, so
/// the thread still reports to whoever waits for it (a dead worker that reports nothing
/// leaves its peers waiting for work it held or for a count it never gives back).
///
/// `AssertUnwindSafe`: after a panic nothing of `f`'s state is used again; the caller only
/// hands the error on, which ends the transfer.
pub fn unless_panicked<T>(what: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
        .unwrap_or_else(|_| Err(Error::io(what, io::Error::other("panicked"))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_in_a_worker_becomes_an_error_naming_it() {
        let r: Result<u8> = unless_panicked("stream thread", || panic!("a bug"));
        let e = r.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains("stream thread") && e.contains("panicked"), "{e}");
        assert_eq!(unless_panicked("x", || Ok(7)).ok(), Some(7));
        let failed: Result<()> = unless_panicked("x", || Err(Error::Usage("no".into())));
        assert!(matches!(failed, Err(Error::Usage(_))));
    }
}
