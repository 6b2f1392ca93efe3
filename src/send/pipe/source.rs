//! Where a pipe transfer's bytes come from: standard input, a file, or a command haul
//! starts itself. With a command, its exit status is known, so a producer that dies
//! mid-stream fails the transfer on both sides instead of ending the stream early (on
//! standard input, end of input is all haul can see: it means the end of the stream).

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::Duration;

use crate::error::{Error, Result};
use crate::pagecache;
use crate::progress::escape;
use crate::stdio;

/// Where the stream comes from (plain data: `config` holds one).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PipeFrom {
    /// Standard input, to its end.
    Stdin,
    /// A file (or anything that reads like one), to its end.
    File(PathBuf),
    /// The standard output of `sh -c COMMAND`, which must exit 0.
    Command(String),
}

enum Reader {
    Plain(File),
    Child(ChildStdout),
}

/// The open source of one pipe transfer: what reads it (moved to the reading thread).
pub(super) struct Input {
    reader: Reader,
    what: String,
    /// A file's page-cache residency (not `--keep-cache`), and where the next read starts.
    cache: Option<(pagecache::Reader<'static>, u64)>,
    /// A pipe: how long to let the producer fill it before reading (see [`Nap`]).
    nap: Option<Nap>,
}

/// The command producing the stream, if any: its exit status decides whether the end of
/// its output is the end of the stream. Dropped unfinished, it kills the command.
pub(super) struct Producer {
    child: Option<(Child, String)>,
}

impl Input {
    /// Opens `from` (starts the command); a file's pages that the reads bring into the
    /// page cache are dropped again unless `keep_cache`.
    pub(super) fn open(from: &PipeFrom, keep_cache: bool) -> Result<(Input, Producer)> {
        let none = Producer { child: None };
        match from {
            PipeFrom::Stdin => {
                let fd = io::stdin()
                    .as_fd()
                    .try_clone_to_owned()
                    .map_err(|e| Error::io("reading standard input", e))?;
                let f = File::from(fd);
                stdio::widen_pipe(&f);
                // `< FILE`: its pages are handled as a named file's are, from where it
                // is read now.
                let mut cache =
                    (!keep_cache && stdio::kind(&f) == stdio::Kind::Regular).then(|| {
                        let at = rustix::fs::seek(&f, rustix::fs::SeekFrom::Current(0));
                        (pagecache::Reader::new(false), at.unwrap_or(0))
                    });
                if let Some((c, _)) = &mut cache {
                    c.open(&f, 0);
                }
                let nap = Nap::for_pipe(&f);
                let input = Input {
                    reader: Reader::Plain(f),
                    what: "standard input".into(),
                    cache,
                    nap,
                };
                Ok((input, none))
            }
            PipeFrom::File(p) => {
                let f = File::open(p).map_err(|e| Error::Source {
                    path: p.clone(),
                    source: e,
                })?;
                let mut cache = (!keep_cache).then(|| (pagecache::Reader::new(false), 0));
                if let Some((c, _)) = &mut cache {
                    c.open(&f, 0);
                }
                let nap = Nap::for_pipe(&f);
                let input = Input {
                    reader: Reader::Plain(f),
                    what: escape(&p.display().to_string()),
                    cache,
                    nap,
                };
                Ok((input, none))
            }
            PipeFrom::Command(cmd) => {
                let what = format!("`{}`", escape(cmd));
                let fail = |e| Error::Source {
                    path: PathBuf::from(&what),
                    source: e,
                };
                let mut child = Command::new("sh")
                    .arg("-c")
                    .arg(cmd)
                    .stdout(Stdio::piped())
                    .spawn()
                    .map_err(fail)?;
                let Some(out) = child.stdout.take() else {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(fail(io::Error::other("no standard output")));
                };
                stdio::widen_pipe(&out);
                let nap = Nap::for_pipe(&out);
                let input = Input {
                    reader: Reader::Child(out),
                    what: what.clone(),
                    cache: None,
                    nap,
                };
                Ok((
                    input,
                    Producer {
                        child: Some((child, what)),
                    },
                ))
            }
        }
    }

    /// Reads until `buf` is full or the input ends; returns how much was read.
    pub(super) fn fill(&mut self, buf: &mut [u8]) -> Result<usize> {
        if let (Some((c, pos)), Reader::Plain(f)) = (&mut self.cache, &self.reader) {
            // The file's size, for the lookahead, is where the file ends now.
            let size = f.metadata().map_or(0, |m| m.len());
            c.before(f, *pos, buf.len() as u64, size);
        }
        let r = self.fill_from(buf);
        if let (Some((c, pos)), Reader::Plain(f)) = (&mut self.cache, &self.reader) {
            c.after(f);
            *pos += *r.as_ref().unwrap_or(&0) as u64;
        }
        r
    }

    fn fill_from(&mut self, buf: &mut [u8]) -> Result<usize> {
        let mut n = 0;
        while n < buf.len() {
            if let Some(nap) = &mut self.nap {
                match &self.reader {
                    Reader::Plain(f) => nap.settle(f, buf.len() - n),
                    Reader::Child(c) => nap.settle(c, buf.len() - n),
                }
            }
            let r = match &mut self.reader {
                Reader::Plain(f) => f.read(&mut buf[n..]),
                Reader::Child(c) => c.read(&mut buf[n..]),
            };
            match r {
                Ok(0) => break,
                Ok(k) => n += k,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    return Err(Error::Source {
                        path: PathBuf::from(&self.what),
                        source: e,
                    })
                }
            }
        }
        Ok(n)
    }
}

/// Reading a pipe in pipe-sized gulps rather than write-sized sips.
///
/// A reader that blocks on an empty pipe is woken by each write that lands in it: behind
/// `cat` that is every 128 KiB, a sleep, a wakeup (an inter-processor interrupt, which a
/// virtual machine pays dearly for) and a short read each time, and the producer is
/// preempted by the reader it woke. A writer into a pipe that is not empty wakes no one,
/// so the reader lets the pipe fill before it reads: when less than half a pipe (or
/// what the block still lacks) is waiting, it sleeps a while first, then reads whatever
/// is there (blocking as before if nothing is, so an idle producer costs nothing). The
/// sleep adapts to the producer: halved when the pipe was full on waking (the producer
/// had to wait), doubled, up to [`Nap::MAX`], when it was less than a quarter full.
#[derive(Debug)]
struct Nap {
    /// The pipe's capacity.
    pipe: usize,
    nap: Duration,
}

impl Nap {
    const MIN: Duration = Duration::from_micros(25);
    const START: Duration = Duration::from_micros(200);
    const MAX: Duration = Duration::from_millis(2);

    /// For a pipe (None for anything else, or one whose fill level cannot be read).
    fn for_pipe(fd: impl AsFd) -> Option<Nap> {
        let fd = fd.as_fd();
        if stdio::kind(fd) != stdio::Kind::Pipe || rustix::io::ioctl_fionread(fd).is_err() {
            return None;
        }
        let pipe = rustix::pipe::fcntl_getpipe_size(fd).ok()?;
        Some(Nap {
            pipe,
            nap: Nap::START,
        })
    }

    /// Before reading up to `want` bytes: lets the producer fill the pipe first when
    /// little is waiting in it.
    fn settle(&mut self, fd: impl AsFd, want: usize) {
        let fd = fd.as_fd();
        let goal = want.min(self.pipe / 2) as u64;
        if rustix::io::ioctl_fionread(fd).map_or(true, |n| n >= goal) {
            return;
        }
        std::thread::sleep(self.nap);
        let Ok(now) = rustix::io::ioctl_fionread(fd) else {
            return;
        };
        self.nap = self.adapt(now as usize);
    }

    /// The next sleep, given that `waiting` bytes were in the pipe after this one.
    fn adapt(&self, waiting: usize) -> Duration {
        if waiting >= self.pipe {
            (self.nap / 2).max(Nap::MIN)
        } else if waiting < self.pipe / 4 {
            (self.nap * 2).min(Nap::MAX)
        } else {
            self.nap
        }
    }
}

impl Input {
    /// What the input is, for messages.
    pub(super) fn what(&self) -> &str {
        &self.what
    }
}

impl Producer {
    /// After the end of its output: whether the producer succeeded (a command must exit 0).
    pub(super) fn finish(&mut self) -> Result<()> {
        let Some((mut child, what)) = self.child.take() else {
            return Ok(());
        };
        let status = child.wait().map_err(|e| Error::Source {
            path: PathBuf::from(&what),
            source: e,
        })?;
        if status.success() {
            return Ok(());
        }
        Err(Error::Source {
            path: PathBuf::from(what),
            source: io::Error::other(describe_status(status)),
        })
    }
}

impl Drop for Producer {
    /// A transfer that failed stops its producer rather than leave it blocked on a full
    /// pipe (its output then ends, which ends the reading thread too).
    fn drop(&mut self) {
        if let Some((child, _)) = &mut self.child {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// "exited with status 3" or "was killed by signal 9".
pub fn describe_status(status: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => format!("exited with status {c}"),
        (None, Some(s)) => format!("was killed by signal {s}"),
        _ => "failed".into(),
    }
}

/// Whether `p` names standard input or output on the command line.
pub fn is_dash(p: &Path) -> bool {
    p.as_os_str() == "-"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_that_fails_after_writing_fails_the_input() {
        let (mut i, mut p) =
            Input::open(&PipeFrom::Command("printf abc; exit 3".into()), false).unwrap();
        let mut buf = [0u8; 16];
        assert_eq!(i.fill(&mut buf).unwrap(), 3);
        assert_eq!(&buf[..3], b"abc");
        assert_eq!(i.fill(&mut buf).unwrap(), 0);
        let e = p.finish().unwrap_err().to_string();
        assert!(e.contains("exited with status 3"), "{e}");
    }

    #[test]
    fn a_command_that_succeeds_is_read_to_its_end() {
        let (mut i, mut p) =
            Input::open(&PipeFrom::Command("head -c 100000 /dev/zero".into()), false).unwrap();
        let mut buf = vec![1u8; 65536];
        let mut total = 0;
        loop {
            let n = i.fill(&mut buf).unwrap();
            total += n;
            if n < buf.len() {
                break;
            }
        }
        assert_eq!(total, 100000);
        p.finish().unwrap();
    }

    #[test]
    fn a_pipe_written_in_pieces_with_pauses_is_read_whole_and_in_order() {
        // Pieces smaller than half a pipe, with pauses: every read first lets the pipe
        // fill (Nap), and must still return every byte, in order, and the end.
        let cmd = "for i in 1 2 3 4 5 6; do head -c 70000 /dev/zero | tr '\\0' \"$i\"; \
                   sleep 0.01; done";
        let (mut i, mut p) = Input::open(&PipeFrom::Command(cmd.into()), false).unwrap();
        assert!(i.nap.is_some(), "a command's output is a pipe");
        let mut buf = vec![0u8; 4 << 20];
        assert_eq!(i.fill(&mut buf).unwrap(), 6 * 70000);
        for (k, chunk) in buf[..6 * 70000].chunks(70000).enumerate() {
            assert!(chunk.iter().all(|&b| b == b'1' + k as u8), "piece {k}");
        }
        assert_eq!(i.fill(&mut buf).unwrap(), 0);
        p.finish().unwrap();
    }

    #[test]
    fn the_nap_shortens_when_the_producer_waited_and_grows_when_it_is_slow() {
        let n = Nap {
            pipe: 1 << 20,
            nap: Nap::START,
        };
        assert_eq!(
            n.adapt(1 << 20),
            Nap::START / 2,
            "full: the producer waited"
        );
        assert_eq!(n.adapt(600 << 10), Nap::START, "between a quarter and full");
        assert_eq!(n.adapt(100 << 10), Nap::START * 2, "under a quarter");
        let fast = Nap { nap: Nap::MIN, ..n };
        assert_eq!(fast.adapt(1 << 20), Nap::MIN);
        let slow = Nap { nap: Nap::MAX, ..n };
        assert_eq!(slow.adapt(0), Nap::MAX);
        // Only pipes get one.
        let f = tempfile::tempfile().unwrap();
        assert!(Nap::for_pipe(&f).is_none());
        let (r, _w) = rustix::pipe::pipe().unwrap();
        assert!(Nap::for_pipe(&r).is_some());
    }

    #[test]
    fn a_missing_file_is_a_source_error() {
        let e = Input::open(&PipeFrom::File("/nonexistent/x".into()), false)
            .err()
            .unwrap();
        assert_eq!(e.exit_code(), crate::error::exit::SOURCE);
    }
}
