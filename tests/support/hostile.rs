//! What the hostile-peer tests (`hostile_*.rs`) share: a real `haul recv` whose ticket
//! their forged conversations dial, a bounded wait for a process to exit, a look at
//! whether the receiver closed a data connection, and a manifest entry to forge.

use std::ffi::OsStr;
use std::io::{self, BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use haul::protocol::{Entry, EntryKind};
use haul::transport::{Conn, Ticket};

use super::process::haul_bin;

/// A `haul recv` that printed its ticket; its stderr is still to be read.
pub struct Listening {
    /// The process.
    pub child: Child,
    /// The ticket from its first stdout line.
    pub ticket: Ticket,
}

/// `haul recv --listen 127.0.0.1:0 -q ARGS`, its ticket read.
pub fn start_recv<S: AsRef<OsStr>>(args: &[S]) -> Listening {
    let mut child = Command::new(haul_bin())
        .args(["recv", "--listen", "127.0.0.1:0", "-q"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn haul recv");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("read ticket");
    let ticket = Ticket::parse(line.trim()).expect("valid ticket");
    Listening { child, ticket }
}

/// Waits up to `within` for `child` (named `what` in the panic) to exit: its exit code
/// and stderr. One that does not is killed, and the test fails with its stderr.
pub fn wait_exit(child: &mut Child, what: &str, within: Duration) -> (i32, String) {
    let deadline = Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            return (status.code().unwrap_or(-1), stderr_of(child));
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            let err = stderr_of(child);
            panic!("{what} did not exit within {within:?}; its stderr:\n{err}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn stderr_of(child: &mut Child) -> String {
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut err);
    }
    err
}

/// Whether the receiver has closed `c`: end of input, or an error other than our read
/// timeout (it never sends anything on a data connection).
pub fn is_closed(c: &mut Conn) -> bool {
    let mut b = [0u8; 1];
    match c.read(&mut b) {
        Ok(n) => {
            assert_eq!(n, 0, "the receiver sent bytes on a data connection");
            true
        }
        Err(e) => !matches!(
            e.kind(),
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
        ),
    }
}

/// A manifest entry of `kind` at `path`: mode 0644, a fixed mtime, owned by root.
pub fn entry(id: u64, path: &[u8], kind: EntryKind) -> Entry {
    Entry {
        id,
        path: path.to_vec(),
        kind,
        mode: 0o644,
        mtime_sec: 1_600_000_000,
        mtime_nsec: 0,
        uid: 0,
        gid: 0,
        xattrs: None,
        checksum: None,
    }
}
