//! The validated configuration: built once from the command line, passed down by
//! reference. Every user mistake that parsing alone cannot catch is caught here.

use std::net::{IpAddr, SocketAddr};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::cli::{Cli, CommandArgs, TransferArgs};
use crate::codec::Compression;
use crate::error::{Error, Result};
use crate::plan::walk::Source;
use crate::protocol::{SyncOptions, MAX_BLOCK};
use crate::transport::Ticket;

/// Default block size: large enough to amortise per-unit costs, small enough that a
/// handful of streams share even a modest file.
pub const DEFAULT_BLOCK_SIZE: u64 = 4 << 20;
const MIN_BLOCK_SIZE: u64 = 64 << 10;

/// Default number of data streams: twice the cores (one stream's read waits while
/// another's hash runs), at least 2, at most 8.
pub fn default_streams() -> usize {
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(2);
    (cores * 2).clamp(2, 8)
}

/// Options of one transfer.
#[derive(Clone, Debug)]
pub struct Transfer {
    /// Data streams.
    pub streams: usize,
    /// Compression.
    pub compress: Compression,
    /// Block size.
    pub block_size: u64,
    /// TLS on the wire.
    pub encrypt: bool,
    /// What to do with what the destination already has.
    pub sync: SyncOptions,
}

/// What to run.
#[derive(Debug)]
pub enum Command {
    /// Receive one transfer.
    Recv {
        /// Destination root.
        dir: PathBuf,
        /// Where to listen (None: all addresses, any port).
        listen: Option<SocketAddr>,
        /// Where to also write the ticket.
        ticket_file: Option<PathBuf>,
    },
    /// Send to a ticket.
    Send {
        /// What to send.
        sources: Vec<Source>,
        /// Where to.
        ticket: Box<Ticket>,
        /// How.
        transfer: Transfer,
    },
    /// Local copy.
    Copy {
        /// What to copy.
        sources: Vec<Source>,
        /// The destination root.
        dest: PathBuf,
        /// How.
        transfer: Transfer,
    },
}

/// The whole validated configuration.
#[derive(Debug)]
pub struct Config {
    /// What to run.
    pub command: Command,
    /// No progress bar, no summary.
    pub quiet: bool,
    /// Print the summary as JSON on stdout.
    pub json: bool,
}

impl Config {
    /// Validates the parsed command line.
    pub fn from_cli(cli: Cli) -> Result<Config> {
        let command = match cli.command {
            CommandArgs::Recv {
                dir,
                listen,
                ticket_file,
                streams: _,
            } => Command::Recv {
                dir,
                listen: listen.as_deref().map(parse_listen).transpose()?,
                ticket_file,
            },
            CommandArgs::Send {
                paths,
                to,
                transfer,
                no_encrypt,
            } => Command::Send {
                sources: paths.iter().map(|p| Source::from_arg(p)).collect(),
                ticket: Box::new(Ticket::parse(&to)?),
                transfer: transfer_config(&transfer, !no_encrypt, Compression::None)?,
            },
            CommandArgs::Copy {
                mut paths,
                transfer,
            } => {
                let dst = paths
                    .pop()
                    .ok_or_else(|| Error::Usage("copy needs SRC... DST".into()))?;
                let (sources, dest) = copy_layout(&paths, &dst);
                Command::Copy {
                    sources,
                    dest,
                    transfer: transfer_config(&transfer, false, Compression::None)?,
                }
            }
        };
        Ok(Config {
            command,
            quiet: cli.quiet,
            json: cli.json,
        })
    }
}

fn transfer_config(
    a: &TransferArgs,
    encrypt: bool,
    default_compress: Compression,
) -> Result<Transfer> {
    let streams = a.streams.unwrap_or_else(default_streams);
    if streams == 0 || streams > usize::from(crate::receive::MAX_STREAMS) {
        return Err(Error::Usage(format!(
            "--streams must be between 1 and {}",
            crate::receive::MAX_STREAMS
        )));
    }
    let compress = match &a.compress {
        Some(c) => c.parse().map_err(Error::Usage)?,
        None => default_compress,
    };
    let block_size = match &a.block_size {
        Some(s) => parse_size(s)
            .ok_or_else(|| Error::Usage(format!("invalid --block-size '{s}': use e.g. 4M")))?,
        None => DEFAULT_BLOCK_SIZE,
    };
    if !(MIN_BLOCK_SIZE..=MAX_BLOCK as u64).contains(&block_size) {
        return Err(Error::Usage(
            "--block-size must be between 64K and 64M".into(),
        ));
    }
    Ok(Transfer {
        streams,
        compress,
        block_size,
        encrypt,
        sync: SyncOptions {
            checksum: a.checksum,
            inplace: a.inplace,
            delete: a.delete,
        },
    })
}

/// Parses "4M", "64K", "1MiB", "65536".
pub fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num.parse().ok()?;
    let mult: u64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        _ => return None,
    };
    n.checked_mul(mult)
}

fn parse_listen(s: &str) -> Result<SocketAddr> {
    if let Ok(a) = s.parse::<SocketAddr>() {
        return Ok(a);
    }
    let ip = s.trim_start_matches('[').trim_end_matches(']');
    ip.parse::<IpAddr>()
        .map(|ip| SocketAddr::new(ip, 0))
        .map_err(|_| Error::Usage(format!("invalid --listen '{s}': use ADDR or ADDR:PORT")))
}

/// rsync's rules for `copy SRC... DST`: DST is a directory that receives each source
/// (`src` lands as DST/src, `src/` spills its contents into DST), except that a single
/// non-directory source copied to a DST that is not an existing directory and has no
/// trailing slash takes DST as its new name.
pub fn copy_layout(srcs: &[PathBuf], dst: &Path) -> (Vec<Source>, PathBuf) {
    let dst_bytes = dst.as_os_str().as_bytes();
    if let [only] = srcs {
        let src_is_dir = std::fs::metadata(only).map(|m| m.is_dir()).unwrap_or(false)
            && !std::fs::symlink_metadata(only)
                .map(|m| m.file_type().is_symlink())
                .unwrap_or(false);
        if !src_is_dir && !dst_bytes.ends_with(b"/") && !dst.is_dir() {
            if let Some(name) = dst.file_name() {
                let parent = match dst.parent() {
                    Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
                    _ => PathBuf::from("."),
                };
                let source = Source {
                    path: only.clone(),
                    dest_name: Some(name.as_bytes().to_vec()),
                };
                return (vec![source], parent);
            }
        }
    }
    (
        srcs.iter().map(|p| Source::from_arg(p)).collect(),
        dst.to_path_buf(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4M"), Some(4 << 20));
        assert_eq!(parse_size("64k"), Some(64 << 10));
        assert_eq!(parse_size("1MiB"), Some(1 << 20));
        assert_eq!(parse_size("65536"), Some(65536));
        assert_eq!(parse_size("x"), None);
        assert_eq!(parse_size("4Q"), None);
    }

    #[test]
    fn listen_forms() {
        assert_eq!(
            parse_listen("127.0.0.1:9").unwrap(),
            "127.0.0.1:9".parse().unwrap()
        );
        assert_eq!(
            parse_listen("127.0.0.1").unwrap(),
            "127.0.0.1:0".parse().unwrap()
        );
        assert_eq!(parse_listen("::1").unwrap(), "[::1]:0".parse().unwrap());
        assert!(parse_listen("nope").is_err());
    }

    #[test]
    fn copy_file_to_new_name() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("f");
        std::fs::write(&f, b"x").unwrap();
        let (s, root) = copy_layout(std::slice::from_ref(&f), &d.path().join("g"));
        assert_eq!(root, d.path());
        assert_eq!(s[0].dest_name.as_deref(), Some(&b"g"[..]));
        // Into an existing directory: keeps its name.
        let (s, root) = copy_layout(&[f], d.path());
        assert_eq!(root, d.path());
        assert_eq!(s[0].dest_name.as_deref(), Some(&b"f"[..]));
    }
}
