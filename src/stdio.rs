//! What a pipe transfer's standard input or output is, and making a pipe there carry more
//! per system call.
//!
//! A pipe holds 64 KiB by default: a producer such as `cat` or `pg_basebackup` then
//! wakes haul (and haul the consumer) every 64 KiB, a context switch and a short read
//! each time. Widening the pipe to [`PIPE_BYTES`] lets each side move a megabyte at a
//! time. Widening is advice: a pipe that cannot grow (the per-user pipe quota, an old
//! kernel) keeps its size, and nothing else changes.

use std::io::Write;
use std::os::fd::AsFd;

use rustix::fs::{fstat, FileType};

/// The pipe size haul asks for (Linux's default `/proc/sys/fs/pipe-max-size` for
/// unprivileged users).
pub const PIPE_BYTES: usize = 1 << 20;

/// Writes `text` to stdout and flushes it. A reader that stopped early (`haul man | head
/// -1`) is no failure: the rest is dropped quietly, as `ls | head` drops it (haul ignores
/// SIGPIPE, so the write fails instead of killing it). Any other failure is one warning.
pub fn print(text: &str) {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            eprintln!("haul: warning: writing to stdout: {e}")
        }
        _ => {}
    }
}

/// [`print`] of `line` and a newline: `println!` that does not panic on a closed stdout.
pub fn println(line: &str) {
    print(&format!("{line}\n"));
}

/// What kind of file a descriptor is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A regular file (`< FILE`, `> FILE`).
    Regular,
    /// A pipe or FIFO.
    Pipe,
    /// Anything else: a terminal, a socket, a device.
    Other,
}

/// What `fd` is; `Other` when `fstat` fails.
pub fn kind(fd: impl AsFd) -> Kind {
    match fstat(fd) {
        Ok(st) => match FileType::from_raw_mode(st.st_mode) {
            FileType::RegularFile => Kind::Regular,
            FileType::Fifo => Kind::Pipe,
            _ => Kind::Other,
        },
        Err(_) => Kind::Other,
    }
}

/// Asks for a [`PIPE_BYTES`] buffer on `fd` when it is a pipe smaller than that; errors
/// are ignored (see the module comment).
pub fn widen_pipe(fd: impl AsFd) {
    let fd = fd.as_fd();
    if kind(fd) != Kind::Pipe {
        return;
    }
    if let Ok(now) = rustix::pipe::fcntl_getpipe_size(fd) {
        if now < PIPE_BYTES {
            let _ = rustix::pipe::fcntl_setpipe_size(fd, PIPE_BYTES);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_and_widening() {
        let (r, w) = rustix::pipe::pipe().unwrap();
        assert_eq!(kind(&r), Kind::Pipe);
        widen_pipe(&w);
        // The quota may refuse; when it does not, the pipe is at least as big as asked.
        let size = rustix::pipe::fcntl_getpipe_size(&r).unwrap();
        assert!(size >= 64 << 10);
        let f = tempfile::tempfile().unwrap();
        assert_eq!(kind(&f), Kind::Regular);
        widen_pipe(&f); // not a pipe: nothing happens, no error
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        assert_eq!(kind(&a), Kind::Other);
    }
}
