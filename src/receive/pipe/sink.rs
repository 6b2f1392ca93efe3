//! Where a pipe transfer's bytes go: standard output, a file (made durable and put in
//! place only when the whole stream arrived and verified), or a command haul starts
//! (whose exit status decides the transfer's).
//!
//! A file (`--stream FILE`, `> FILE`; not `>> FILE` or `--keep-cache`) gets its blocks'
//! aligned bodies written `O_DIRECT` from where they lie (`store::direct`;
//! `codec::aligned_start`, `FrameReader::align_payloads`); `> FILE` only through a
//! description of haul's own, reopened by `/proc/self/fd/1` and checked by device and
//! inode, never fd 1's, which the shell shares. It is `fdatasync`ed every 64 MiB by a
//! thread of its own (`syncer`; an error fails the stream), so the final `fsync` commits
//! only the last chunk, and (but `>> FILE`) reserved 64 MiB ahead (`fallocate`, size
//! kept), so ext4 skips its delayed allocation per page.

use std::fs::File;
use std::io::{self, Write};
use std::os::fd::AsFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};

use crate::error::{Error, Result};
use crate::pagecache;
use crate::progress::escape;
use crate::stdio;
use crate::store::direct::{self, Bounce, Refused};

use super::syncer::{sync_data, Syncer, SYNC_CHUNK};

/// Where the stream goes (plain data: `config` holds one).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PipeTo {
    /// Standard output.
    Stdout,
    /// A file, replaced atomically once the stream is complete and durable.
    File(PathBuf),
    /// The standard input of `sh -c COMMAND`, which must exit 0. Its standard output is
    /// ours, or our standard error when ours carries something else (`haul serve`).
    Command {
        /// The command line.
        command: String,
        /// Send its standard output to our standard error.
        stdout_to_stderr: bool,
    },
}

enum Kind {
    /// Standard output; `regular` when it is a regular file (`> FILE`), whose pages are
    /// then handled as a file destination's are, and which is made durable at the end.
    Stdout { file: File, regular: bool },
    File {
        file: File,
        tmp: PathBuf,
        dest: PathBuf,
    },
    Command {
        child: Child,
        stdin: Option<ChildStdin>,
    },
}

/// The open destination of one pipe transfer.
pub struct Output {
    kind: Kind,
    what: String,
    written: u64,
    /// Where the stream's first byte went in the file written (0 but for `>> FILE` or a
    /// standard output already written to).
    base: u64,
    /// A file's written pages are dropped once written back (not `--keep-cache`): up to
    /// `dropped` they are, up to `started` their writeback was started.
    keep_cache: bool,
    dropped: u64,
    started: u64,
    /// A file's blocks are reserved (`fallocate`) up to here, ahead of the writes; `None`
    /// when not a file, appended to (`>> FILE`: others may append too, and the end is
    /// theirs to free), or once the file system refused (the writes then allocate).
    reserved: Option<u64>,
    /// A file written (not appended to, not `--keep-cache`): its aligned middle goes
    /// straight to the device (`O_DIRECT`), as file mode writes a large file.
    direct: Option<Direct>,
    /// A file: `fdatasync`ed every [`SYNC_CHUNK`] by a thread of its own, so the final
    /// `fsync` has little left to commit.
    syncer: Option<Syncer>,
}

/// Writing a file destination with `O_DIRECT` (see `store::direct`): each block's aligned
/// body is copied into an aligned buffer and written directly, bypassing the page cache;
/// the unaligned ends (the stream's last bytes, or every block's when the stream starts
/// at an unaligned offset) go through the page cache and are dropped as before. A file
/// system that refuses `O_DIRECT` is written buffered from its first refusal on.
struct Direct {
    /// Standard output's file opened again, a description of haul's own, for the direct
    /// writes: the description of fd 1 is the shell's too (`> FILE`), and `O_DIRECT` set
    /// on it, even for one write, would stay set for the next writer if haul were killed
    /// mid-write (whose unaligned writes would then fail). `None` for a file haul created.
    own: Option<File>,
    refused: Refused,
    bounce: Bounce,
    /// The direct write itself (a test makes it refuse as a file system would).
    write: fn(&File, &[u8], u64, &mut Bounce) -> io::Result<()>,
}

impl Direct {
    fn new(own: Option<File>) -> Direct {
        Direct {
            own,
            refused: Refused::default(),
            bounce: Bounce::default(),
            write: direct::write_direct,
        }
    }
}

/// A file destination starts writeback every this many bytes and drops the previous
/// chunk's pages (waiting for its writeback, which had one chunk's time to finish).
const DROP_CHUNK: u64 = 8 << 20;

/// A file destination reserves its blocks this far ahead of the writes (see
/// [`Output::reserve`]); what is beyond the stream's end when it finishes is freed.
const RESERVE_CHUNK: u64 = 64 << 20;

impl Output {
    /// Opens `to`: checks a file's directory can take it, starts a command. Done before
    /// the ticket is printed, so a destination that cannot work fails at once. A file's
    /// written pages leave the page cache once written back, unless `keep_cache`.
    pub fn open(to: &PipeTo, keep_cache: bool) -> Result<Output> {
        let (kind, what) = match to {
            PipeTo::Stdout => {
                let fd = io::stdout()
                    .as_fd()
                    .try_clone_to_owned()
                    .map_err(|e| Error::io("opening standard output", e))?;
                (stdout_kind(File::from(fd)), "standard output".to_string())
            }
            PipeTo::File(dest) => {
                let (file, tmp) = temp_beside(dest)?;
                let what = escape(&dest.display().to_string());
                (
                    Kind::File {
                        file,
                        tmp,
                        dest: dest.clone(),
                    },
                    what,
                )
            }
            PipeTo::Command {
                command,
                stdout_to_stderr,
            } => {
                let what = format!("`{}`", escape(command));
                let mut cmd = Command::new("sh");
                cmd.arg("-c").arg(command).stdin(Stdio::piped());
                if *stdout_to_stderr {
                    let err = io::stderr()
                        .as_fd()
                        .try_clone_to_owned()
                        .map_err(|e| Error::io("duplicating standard error", e))?;
                    cmd.stdout(Stdio::from(err));
                }
                let mut child = cmd.spawn().map_err(|e| Error::Destination {
                    path: PathBuf::from(&what),
                    source: e,
                    hint: "",
                })?;
                let stdin = child.stdin.take();
                if let Some(s) = &stdin {
                    stdio::widen_pipe(s);
                }
                (Kind::Command { child, stdin }, what)
            }
        };
        let mut out = Output::from_kind(kind, keep_cache);
        out.what = what;
        Ok(out)
    }

    fn from_kind(kind: Kind, keep_cache: bool) -> Output {
        let (base, reserved) = match &kind {
            Kind::Stdout {
                file,
                regular: true,
            } => match start_offset(file) {
                (at, false) => (at, Some(at)),
                (at, true) => (at, None),
            },
            Kind::File { .. } => (0, Some(0)),
            _ => (0, None),
        };
        // Not appended to (a write at an offset would append anyway, and the end of the
        // file is others' too): the same files that get their blocks reserved.
        // Standard output only through a description of its own (see [`Direct::own`]),
        // else buffered.
        let direct = match &kind {
            _ if keep_cache || reserved.is_none() => None,
            Kind::Stdout { file, .. } => own_description(file).map(|own| Direct::new(Some(own))),
            _ => Some(Direct::new(None)),
        };
        let syncer = regular_file(&kind).and_then(|f| Syncer::start(f, SYNC_CHUNK, sync_data));
        Output {
            kind,
            what: String::new(),
            written: 0,
            base,
            keep_cache,
            dropped: 0,
            started: 0,
            reserved,
            direct,
            syncer,
        }
    }

    /// What the destination is, for messages.
    pub fn what(&self) -> &str {
        &self.what
    }

    /// Writes the next bytes of the stream.
    pub(super) fn write_all(&mut self, mut b: &[u8]) -> Result<()> {
        self.reserve(b.len() as u64);
        if self.direct.is_some() {
            return self.write_direct(b);
        }
        let mut r = Ok(());
        while !b.is_empty() {
            let n = match &mut self.kind {
                Kind::Stdout { file, .. } => file.write(b),
                Kind::File { file, .. } => file.write(b),
                Kind::Command { stdin: Some(s), .. } => s.write(b),
                Kind::Command { stdin: None, .. } => Err(io::ErrorKind::BrokenPipe.into()),
            };
            match n {
                Ok(0) => r = Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    self.written += n as u64;
                    b = &b[n..];
                    continue;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => r = Err(e),
            }
            break;
        }
        match r {
            Ok(()) => {
                self.wrote();
                self.drop_written();
                Ok(())
            }
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => {
                // Say how the consumer ended if it did.
                let how = match &mut self.kind {
                    Kind::Command { child, .. } => match child.try_wait() {
                        Ok(Some(st)) => format!(" (it {})", crate::send::pipe::describe_status(st)),
                        _ => String::new(),
                    },
                    _ => String::new(),
                };
                Err(self.fail(io::Error::other(format!(
                    "the consumer closed its input after {} bytes{how}; the stream was not \
                     delivered whole",
                    self.written
                ))))
            }
            Err(e) => Err(self.fail(e)),
        }
    }

    /// A file written directly where aligned: at the file's offset, which is then moved
    /// past the bytes written (standard output's offset may be shared with the shell).
    fn write_direct(&mut self, b: &[u8]) -> Result<()> {
        let at = self.base + self.written;
        let (Some(file), Some(d)) = (regular_file(&self.kind), self.direct.as_mut()) else {
            return Err(self.fail(io::Error::other("not a file")));
        };
        let write = d.write;
        let bounce = &mut d.bounce;
        let target = d.own.as_ref().unwrap_or(file);
        let straight = |piece: &[u8], to: u64| write(target, piece, to, bounce);
        let buffered = |piece: &[u8], to: u64| file.write_all_at(piece, to);
        let r = direct::write_parts(0, b, at, &d.refused, straight, &buffered).and_then(|()| {
            let end = at + b.len() as u64;
            rustix::fs::seek(file, rustix::fs::SeekFrom::Start(end))
                .map(drop)
                .map_err(io::Error::from)
        });
        if let Err(e) = r {
            return Err(self.fail(e));
        }
        self.written += b.len() as u64;
        self.wrote();
        // What went buffered (the ends; everything once refused) leaves the page cache.
        self.drop_written();
        Ok(())
    }

    /// Tells the syncing thread how far the file was written.
    fn wrote(&self) {
        if let Some(s) = &self.syncer {
            s.wrote(self.written);
        }
    }

    /// A file: starts writeback of what was written since the last call and drops the
    /// chunk before it, once a chunk's worth has accumulated.
    fn drop_written(&mut self) {
        let Some(file) = self.written_file() else {
            return;
        };
        if self.keep_cache || self.written - self.started < DROP_CHUNK {
            return;
        }
        let (from, to, base) = (self.started, self.written, self.base);
        pagecache::sync_range(file, base + from, to - from, libc::SYNC_FILE_RANGE_WRITE);
        pagecache::drop_written(file, base + self.dropped, from - self.dropped);
        (self.dropped, self.started) = (from, to);
    }

    /// A file: reserves its blocks [`RESERVE_CHUNK`] at a time ahead of the next `len`
    /// bytes (`fallocate`, keeping the size). Written into reserved blocks, a file system
    /// with delayed allocation (ext4) skips its per-page reservation and the allocation
    /// at writeback, as for a file mode destination reserved whole (measured:
    /// bench/RESULTS.md, *Choices inside one transfer*). Advice: a file system that
    /// refuses (no space, no support) just allocates as the writes go.
    fn reserve(&mut self, len: u64) {
        let at = self.base + self.written;
        let Some(from) = self.reserved.filter(|r| at + len > *r) else {
            return;
        };
        let Some(file) = self.written_file() else {
            self.reserved = None;
            return;
        };
        let to = at + len + RESERVE_CHUNK;
        let keep = rustix::fs::FallocateFlags::KEEP_SIZE;
        let done = rustix::fs::fallocate(file, keep, from, to - from).is_ok();
        self.reserved = done.then_some(to);
    }

    /// Frees the blocks reserved beyond the file's end (truncating to its own size does
    /// that; the content is untouched). Advice, as the reservation was.
    fn free_reserved(&self) {
        if self.base + self.written >= self.reserved.unwrap_or(0) {
            return;
        }
        if let Some(file) = self.written_file() {
            if let Ok(m) = file.metadata() {
                let _ = file.set_len(m.len());
            }
        }
    }

    /// The regular file the stream is written into, if it is one.
    fn written_file(&self) -> Option<&File> {
        regular_file(&self.kind)
    }

    /// The stream is complete and verified: make it durable (a file: fsync, rename into
    /// place, fsync the directory) or wait for the command, which must exit 0.
    pub(super) fn finish(mut self) -> Result<()> {
        let what = self.what.clone();
        let fail = |e: io::Error| Error::Destination {
            path: PathBuf::from(&what),
            source: e,
            hint: "",
        };
        self.free_reserved();
        // The syncs made along the way must have worked: an error they met is reported
        // to them, not again to the `fsync` below (see `syncer`).
        if let Some(s) = self.syncer.as_mut() {
            s.stop().map_err(fail)?;
        }
        match &mut self.kind {
            Kind::Stdout { file, regular } => {
                file.flush().map_err(fail)?;
                if *regular {
                    // `> FILE`: durable before exit 0, as a file destination is.
                    file.sync_all().map_err(fail)?;
                    if !self.keep_cache {
                        let from = self.base + self.dropped;
                        pagecache::drop_written(file, from, self.written - self.dropped);
                    }
                }
                Ok(())
            }
            Kind::File { file, tmp, dest } => {
                file.sync_all().map_err(fail)?;
                if !self.keep_cache {
                    pagecache::drop_all(file);
                }
                std::fs::rename(&*tmp, &*dest).map_err(fail)?;
                // Renamed: nothing left to remove.
                *tmp = PathBuf::new();
                File::open(parent_of(dest))
                    .and_then(|d| d.sync_all())
                    .map_err(fail)
            }
            Kind::Command { child, stdin } => {
                drop(stdin.take());
                let status = child.wait().map_err(fail)?;
                if status.success() {
                    Ok(())
                } else {
                    Err(fail(io::Error::other(crate::send::pipe::describe_status(
                        status,
                    ))))
                }
            }
        }
    }

    fn fail(&self, e: io::Error) -> Error {
        Error::Destination {
            path: PathBuf::from(&self.what),
            source: e,
            hint: "",
        }
    }
}

impl Drop for Output {
    /// Unfinished (the transfer failed): a file's temporary copy is removed, never put in
    /// place; a command is stopped rather than fed a truncated stream's end.
    fn drop(&mut self) {
        if matches!(self.kind, Kind::Stdout { regular: true, .. }) {
            self.free_reserved();
        }
        match &mut self.kind {
            Kind::Stdout { .. } => {}
            Kind::File { tmp, .. } => {
                if !tmp.as_os_str().is_empty() {
                    let _ = std::fs::remove_file(&*tmp);
                }
            }
            Kind::Command { child, stdin } => {
                if stdin.take().is_some() {
                    let _ = child.kill();
                }
                let _ = child.wait();
            }
        }
    }
}

/// The regular file a destination writes, if it is one.
fn regular_file(kind: &Kind) -> Option<&File> {
    match kind {
        Kind::File { file, .. } => Some(file),
        Kind::Stdout {
            file,
            regular: true,
        } => Some(file),
        _ => None,
    }
}

/// Standard output as a destination: a regular file's pages are dropped once written
/// back and it is fsynced at the end; a pipe is widened.
fn stdout_kind(file: File) -> Kind {
    let regular = stdio::kind(&file) == stdio::Kind::Regular;
    stdio::widen_pipe(&file);
    Kind::Stdout { file, regular }
}

/// `file` (standard output) opened again through `/proc/self/fd`: a new open file
/// description of the very file (the magic link names the open file, not a path to look
/// up; checked by device and inode), shared with no one. `None` where that fails (no
/// `/proc`, or a file this user may not open for writing by itself).
fn own_description(file: &File) -> Option<File> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::MetadataExt;
    let own = std::fs::OpenOptions::new()
        .write(true)
        .open(format!("/proc/self/fd/{}", file.as_raw_fd()))
        .ok()?;
    let (a, b) = (file.metadata().ok()?, own.metadata().ok()?);
    (a.dev() == b.dev() && a.ino() == b.ino()).then_some(own)
}

/// Where the next write to `file` lands: its end when it was opened to append (`>>`), else
/// its offset (0 when unknown: then the pages dropped may be the wrong ones, advice only);
/// and whether it was opened to append.
fn start_offset(file: &File) -> (u64, bool) {
    let append =
        rustix::fs::fcntl_getfl(file).is_ok_and(|f| f.contains(rustix::fs::OFlags::APPEND));
    if append {
        return (file.metadata().map_or(0, |m| m.len()), true);
    }
    let at = rustix::fs::seek(file, rustix::fs::SeekFrom::Current(0)).unwrap_or(0);
    (at, false)
}

fn parent_of(p: &Path) -> &Path {
    match p.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

/// A new file beside `dest` with a name no one can guess, created exclusively and
/// without following links (a planted symlink cannot redirect it).
fn temp_beside(dest: &Path) -> Result<(File, PathBuf)> {
    let fail = |e: io::Error, hint: &'static str| Error::Destination {
        path: dest.to_path_buf(),
        source: e,
        hint,
    };
    if dest.is_dir() {
        let e = format!(
            "is a directory; a stream is written into one file: name it (e.g. {})",
            crate::progress::shown_path(&dest.join("stream"))
        );
        return Err(fail(io::Error::other(e), ""));
    }
    let name = dest
        .file_name()
        .ok_or_else(|| fail(io::Error::other("not a file name"), ""))?;
    for _ in 0..16 {
        let mut r = [0u8; 8];
        getrandom::fill(&mut r).map_err(|e| fail(io::Error::other(e.to_string()), ""))?;
        let hex: String = r.iter().map(|b| format!("{b:02x}")).collect();
        let tmp = parent_of(dest).join(format!(".{}.{hex}.haul-tmp", name.to_string_lossy()));
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o666)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&tmp)
        {
            Ok(f) => return Ok((f, tmp)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(fail(e, "")),
        }
    }
    Err(fail(io::Error::other("no free temporary name"), ""))
}

#[cfg(test)]
#[path = "sink_tests.rs"]
mod tests;
