//! Pipe mode's configuration: which commands carry one stream instead of files, where it
//! comes from and goes to, and its memory bound. Pure data, like the rest of `config`.

use std::path::{Path, PathBuf};

use super::location::{parse_location, Location, RemotePath};
use super::size::parse_size;
use crate::error::{Error, Result};
use crate::receive::pipe::PipeTo;
use crate::send::pipe::{is_dash, PipeFrom};

/// Default memory for stream blocks per side (`--buffer`).
pub const DEFAULT_PIPE_BUFFER: u64 = 64 << 20;
/// Largest `--buffer`.
pub const MAX_PIPE_BUFFER: u64 = 256 << 20;

/// Options of one stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pipe {
    /// Most stream bytes held in memory on this side.
    pub window: u64,
    /// The expected length, for percent and ETA.
    pub size: Option<u64>,
}

/// A stream copy: where from and where to, on this host or another.
#[derive(Clone, Debug)]
pub enum PipeCopy {
    /// Both ends here (verified in-process; mostly for tests and symmetry).
    Local {
        /// Source.
        from: PipeFrom,
        /// Destination.
        to: PipeTo,
    },
    /// A local stream to a far file or command.
    Push {
        /// Source, here.
        from: PipeFrom,
        /// The far host, and the file there (empty with `to_command`).
        dest: RemotePath,
        /// The command there.
        to_command: Option<String>,
        /// A chain fan-out (`--also`): further far files or commands, in chain order.
        also: Vec<RemotePath>,
    },
    /// A far file or command's output to a local stream.
    Pull {
        /// The far host, and the file there (empty with `from_command`).
        source: RemotePath,
        /// The command there.
        from_command: Option<String>,
        /// Destination, here.
        to: PipeTo,
    },
}

/// `--buffer` (default 64M, at most 256M), which must hold two blocks of `block`.
pub fn parse_buffer(s: Option<&str>, block: u64) -> Result<u64> {
    let n = match s {
        Some(s) => parse_size(s)
            .ok_or_else(|| Error::Usage(format!("invalid --buffer '{s}': use e.g. 64M")))?,
        None => DEFAULT_PIPE_BUFFER,
    };
    if n > MAX_PIPE_BUFFER {
        return Err(Error::Usage("--buffer must be at most 256M".into()));
    }
    if n < 2 * block {
        return Err(Error::Usage(format!(
            "--buffer must hold at least two blocks ({} bytes with this --block-size)",
            2 * block
        )));
    }
    Ok(n)
}

/// The stream options of `send` or `copy`.
pub fn pipe_options(size: Option<&str>, buffer: Option<&str>, block: u64) -> Result<Pipe> {
    let size = size
        .map(|s| {
            parse_size(s).ok_or_else(|| Error::Usage(format!("invalid --size '{s}': use e.g. 10G")))
        })
        .transpose()?;
    Ok(Pipe {
        window: parse_buffer(buffer, block)?,
        size,
    })
}

/// Where `recv` writes a stream, or `None` for files into a directory.
pub fn recv_target(
    dir: Option<PathBuf>,
    stream: bool,
    to_command: Option<String>,
) -> Result<(Option<PipeTo>, PathBuf)> {
    match (dir, to_command) {
        (None, Some(c)) => Ok((Some(command_to(c, false)?), PathBuf::new())),
        (Some(d), None) if is_dash(&d) => Ok((Some(PipeTo::Stdout), d)),
        (Some(d), None) if stream => Ok((Some(PipeTo::File(d.clone())), d)),
        (Some(d), None) => Ok((None, d)),
        (Some(_), Some(_)) => Err(Error::Usage(
            "recv takes a destination or --to-command, not both".into(),
        )),
        (None, None) => Err(Error::Usage("recv needs a destination".into())),
    }
}

/// `--force` and a stream bound for a terminal. Binary data there garbles the terminal
/// and is lost, so it is refused unless forced, as zstd and gzip refuse; `--force`
/// anywhere else is refused too: it would do nothing.
pub fn check_force(to: Option<&PipeTo>, force: bool) -> Result<()> {
    use std::io::IsTerminal;
    match (to, force) {
        (Some(PipeTo::Stdout), false) if std::io::stdout().is_terminal() => Err(Error::Usage(
            "standard output is a terminal: the stream's data would be written there; \
             redirect it (> FILE, | COMMAND), or add --force"
                .into(),
        )),
        (Some(PipeTo::Stdout), _) | (_, false) => Ok(()),
        (_, true) => Err(Error::Usage(
            "--force applies to a stream written to standard output (`-`) on a terminal; \
             rsync's --force (replace a directory in the way) is what haul's --delete does"
                .into(),
        )),
    }
}

/// What `send` sends as a stream, or `None` for files.
pub fn send_source(paths: &[PathBuf], from_command: Option<String>) -> Result<Option<PipeFrom>> {
    if let Some(c) = from_command {
        return Ok(Some(command_from(c)?));
    }
    match paths {
        [p] if is_dash(p) => Ok(Some(PipeFrom::Stdin)),
        _ if paths.iter().any(|p| is_dash(p)) => Err(Error::Usage(
            "`-` (standard input as a stream) must be the only path".into(),
        )),
        _ => Ok(None),
    }
}

fn command_from(c: String) -> Result<PipeFrom> {
    check_command(&c)?;
    Ok(PipeFrom::Command(c))
}

fn command_to(c: String, stdout_to_stderr: bool) -> Result<PipeTo> {
    check_command(&c)?;
    Ok(PipeTo::Command {
        command: c,
        stdout_to_stderr,
    })
}

fn check_command(c: &str) -> Result<()> {
    if c.trim().is_empty() || c.contains('\0') {
        return Err(Error::Usage("a command must not be empty".into()));
    }
    Ok(())
}

/// `copy` with a stream end (`-`, --from-command, --to-command): the stream copy it
/// means, or `None` when it copies files.
pub fn copy_pipe(
    paths: &[PathBuf],
    from_command: Option<String>,
    to_command: Option<String>,
) -> Result<Option<PipeCopy>> {
    let any_dash = paths.iter().any(|p| is_dash(p));
    if from_command.is_none() && to_command.is_none() && !any_dash {
        return Ok(None);
    }
    let usage = |m: &str| Err(Error::Usage(format!("copy: {m}")));
    let loc = |p: &Path| parse_location(p.as_os_str()).map_err(|e| Error::Usage(e.0));
    // SRC: `-`, a file, `host:FILE`, or (with --from-command) `host:` or nothing.
    let (src, dst) = match (paths, &from_command) {
        ([dst], Some(_)) => (None, dst),
        ([src, dst], _) => (Some(src), dst),
        _ => return usage("a stream copy takes one SRC (or --from-command) and one DST"),
    };
    let src = src.map(|p| loc(p)).transpose()?;
    let dst = if is_dash(dst) { None } else { Some(loc(dst)?) };
    let from_here = |src: &Option<Location>| -> Result<Option<PipeFrom>> {
        Ok(match (src, &from_command) {
            (None, Some(c)) => Some(command_from(c.clone())?),
            (Some(Location::Local(p)), None) if is_dash(p) => Some(PipeFrom::Stdin),
            (Some(Location::Local(p)), None) => Some(PipeFrom::File(p.clone())),
            (Some(Location::Local(_)), Some(_)) => {
                return Err(Error::Usage(
                    "copy: with --from-command, SRC is `host:` or left out".into(),
                ))
            }
            _ => None,
        })
    };
    match (src, dst) {
        // To a far file or command.
        (src, Some(Location::Remote(dest))) => {
            let Some(from) = from_here(&src)? else {
                return usage("a stream goes from here to a host, or from a host to here");
            };
            if to_command.is_some() != dest.path.is_empty() {
                return usage(
                    "give the far destination as host:FILE, or as host: with --to-command",
                );
            }
            if let Some(c) = &to_command {
                check_command(c)?;
            }
            Ok(Some(PipeCopy::Push {
                from,
                dest,
                to_command,
                also: Vec::new(),
            }))
        }
        // From a far file or command to here.
        (Some(Location::Remote(source)), dst) => {
            if from_command.is_some() != source.path.is_empty() {
                return usage("give the far source as host:FILE, or as host: with --from-command");
            }
            if let Some(c) = &from_command {
                check_command(c)?;
            }
            let to = local_to(dst, to_command)?;
            Ok(Some(PipeCopy::Pull {
                source,
                from_command,
                to,
            }))
        }
        // Here to here.
        (src, dst) => {
            let Some(from) = from_here(&src)? else {
                return usage("no stream source");
            };
            Ok(Some(PipeCopy::Local {
                from,
                to: local_to(dst, to_command)?,
            }))
        }
    }
}

/// A local stream destination: stdout (`-`), a file, or a command (DST left as `-`).
fn local_to(dst: Option<Location>, to_command: Option<String>) -> Result<PipeTo> {
    match (dst, to_command) {
        (None, None) => Ok(PipeTo::Stdout),
        (None, Some(c)) => command_to(c, false),
        (Some(Location::Local(p)), None) => Ok(PipeTo::File(p)),
        _ => Err(Error::Usage(
            "copy: with --to-command here, give DST as `-`".into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(v: &[&str]) -> Vec<PathBuf> {
        v.iter().map(PathBuf::from).collect()
    }

    #[test]
    fn copy_forms() {
        assert!(copy_pipe(&p(&["/a", "/b"]), None, None).unwrap().is_none());
        let c = copy_pipe(&p(&["-", "db2:/x.xb"]), None, None).unwrap();
        assert!(
            matches!(c, Some(PipeCopy::Push { from: PipeFrom::Stdin, ref dest, to_command: None, .. }) if dest.path == b"/x.xb")
        );
        let c = copy_pipe(&p(&["-", "db2:"]), None, Some("mbstream -x".into())).unwrap();
        assert!(matches!(
            c,
            Some(PipeCopy::Push {
                to_command: Some(_),
                ..
            })
        ));
        let c = copy_pipe(&p(&["db1:/x", "-"]), None, None).unwrap();
        assert!(matches!(
            c,
            Some(PipeCopy::Pull {
                to: PipeTo::Stdout,
                ..
            })
        ));
        let c = copy_pipe(
            &p(&["db1:", "-"]),
            Some("pg_basebackup -D - -Ft".into()),
            None,
        );
        assert!(matches!(
            c,
            Ok(Some(PipeCopy::Pull {
                from_command: Some(_),
                ..
            }))
        ));
        let c = copy_pipe(&p(&["db2:/f"]), Some("tar c /x".into()), None).unwrap();
        assert!(matches!(
            c,
            Some(PipeCopy::Push {
                from: PipeFrom::Command(_),
                ..
            })
        ));
        let c = copy_pipe(&p(&["-", "/tmp/f"]), None, None).unwrap();
        assert!(matches!(
            c,
            Some(PipeCopy::Local {
                to: PipeTo::File(_),
                ..
            })
        ));
    }

    #[test]
    fn copy_refuses_unclear_stream_forms() {
        for (paths, from, to) in [
            (&["-", "db2:"][..], None, None),
            (&["-", "db2:/f"], None, Some("x")),
            (&["db1:", "-"], None, None),
            (&["-", "a", "db2:/f"], None, None),
            (&["/x", "-"], Some("c"), None),
        ] {
            let r = copy_pipe(&p(paths), from.map(String::from), to.map(String::from));
            assert!(r.is_err(), "{paths:?} {from:?} {to:?}: {r:?}");
        }
    }

    #[test]
    fn buffers() {
        assert_eq!(parse_buffer(None, 4 << 20).unwrap(), 64 << 20);
        assert!(parse_buffer(Some("512M"), 4 << 20).is_err());
        assert!(parse_buffer(Some("4M"), 4 << 20).is_err());
        assert_eq!(parse_buffer(Some("8M"), 4 << 20).unwrap(), 8 << 20);
    }
}
