//! A sender whose source stops answering (a hung network file system: a `stat` that never
//! returns) ends the run instead of waiting with it (docs/design.md, *Liveness*): tried
//! with the real binary on a real file system that hangs on command, a FUSE file system
//! served by this test, whose lookup of one name blocks until the test lets it go.
//!
//! No timing thresholds: each wait the test makes is bounded by [`HUNG`], far beyond the
//! bound under test (a hang fails the test, it is never measured).

mod support;

use std::ffi::OsStr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant, UNIX_EPOCH};

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, INodeNo, LockOwner, OpenFlags, ReplyAttr,
    ReplyData, ReplyDirectory, ReplyEntry, Request,
};
use support::*;

/// Far beyond the bounds under test (the sender's `--timeout 3`, the receiver's 10).
const HUNG: Duration = Duration::from_secs(90);

/// What the file `a` holds.
const A: &[u8] = b"arrives before the hang\n";

/// A gate the test opens: the file system's lookup of `hang` waits on it.
#[derive(Default)]
struct Gate {
    open: Mutex<bool>,
    opened: Condvar,
    /// A lookup of `hang` came (the walk reached the hang).
    reached: AtomicBool,
}

impl Gate {
    fn wait(&self) {
        self.reached.store(true, Ordering::SeqCst);
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        while !*open {
            open = self.opened.wait(open).unwrap_or_else(|e| e.into_inner());
        }
    }

    fn release(&self) {
        *self.open.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.opened.notify_all();
    }
}

/// A directory of two files: `a`, and `hang`, whose lookup (the walk's `stat`) blocks
/// until the gate opens.
struct Hanging(Arc<Gate>);

const TTL: Duration = Duration::from_secs(60);

fn attr(ino: u64) -> FileAttr {
    let (kind, perm, size) = match ino {
        1 => (FileType::Directory, 0o755, 0),
        _ => (FileType::RegularFile, 0o644, A.len() as u64),
    };
    FileAttr {
        ino: INodeNo(ino),
        size,
        blocks: size.div_ceil(512),
        atime: UNIX_EPOCH,
        mtime: UNIX_EPOCH,
        ctime: UNIX_EPOCH,
        crtime: UNIX_EPOCH,
        kind,
        perm,
        nlink: if ino == 1 { 2 } else { 1 },
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: 4096,
        flags: 0,
    }
}

impl Filesystem for Hanging {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let ino = match (u64::from(parent), name.to_str()) {
            (1, Some("a")) => 2,
            (1, Some("hang")) => {
                self.0.wait();
                3
            }
            _ => return reply.error(Errno::ENOENT),
        };
        reply.entry(&TTL, &attr(ino), fuser::Generation(0));
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match u64::from(ino) {
            n @ 1..=3 => reply.attr(&TTL, &attr(n)),
            _ => reply.error(Errno::ENOENT),
        }
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let from = (offset as usize).min(A.len());
        let to = (from + size as usize).min(A.len());
        reply.data(&A[from..to]);
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        if u64::from(ino) != 1 {
            return reply.error(Errno::ENOTDIR);
        }
        let names = [
            (1, FileType::Directory, "."),
            (1, FileType::Directory, ".."),
            (2, FileType::RegularFile, "a"),
            (3, FileType::RegularFile, "hang"),
        ];
        for (i, (ino, kind, name)) in names.into_iter().enumerate().skip(offset as usize) {
            if reply.add(INodeNo(ino), (i + 1) as u64, kind, name) {
                break;
            }
        }
        reply.ok();
    }
}

/// Mounts [`Hanging`] at `at`; `None` (the test is skipped, saying `SKIPPED` as the other
/// tests do) where this machine has no FUSE for us (no `/dev/fuse`, not root) — except
/// under CI, where a test that cannot run fails rather than passing unseen.
fn mount(at: &Path, gate: &Arc<Gate>) -> Option<fuser::BackgroundSession> {
    if !Path::new("/dev/fuse").exists() || !is_root() {
        let why = "needs /dev/fuse and root to mount a FUSE file system";
        assert!(std::env::var_os("CI").is_none(), "{why} (under CI)");
        eprintln!("SKIPPED: {why}");
        return None;
    }
    let mut cfg = fuser::Config::default();
    cfg.mount_options = vec![
        fuser::MountOption::FSName("haul-hang".into()),
        fuser::MountOption::RO,
    ];
    // More than one thread: only the lookup of `hang` hangs, `a` can still be read.
    cfg.n_threads = Some(4);
    let session = fuser::spawn_mount(Hanging(Arc::clone(gate)), at, &cfg)
        .unwrap_or_else(|e| panic!("mounting a FUSE file system at {}: {e}", at.display()));
    Some(session)
}

/// Whether `p` exits within `bound`.
fn exits_within(p: &Running, bound: Duration) -> bool {
    let until = Instant::now() + bound;
    while !p.has_exited() {
        if Instant::now() > until {
            return false;
        }
        thread::sleep(Duration::from_millis(20));
    }
    true
}

/// Regression (issue 36): a sender whose walk waited on a hung file system said
/// `Keepalive` every second while it waited, so neither end ever gave up (the stall limit
/// was looked at only where the sender waited on its work queue or an answer). Now the
/// walk counts its steps, the keepalive speaks only while something moves, and a walk that
/// does not move for `--timeout` ends the sender (exit 5, naming the source) and, told
/// so, the receiver.
#[test]
fn a_walk_waiting_on_a_hung_file_system_ends_both_ends_within_the_timeout() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    std::fs::create_dir(&src).unwrap();
    let gate = Arc::new(Gate::default());
    let Some(session) = mount(&src, &gate) else {
        return;
    };
    let dest = tmp.path().join("dest");
    let waiting = recv(&dest, &["--timeout", "10"]);
    let sender = Haul::new().spawn_send(&[&src], &waiting.ticket, &["--timeout", "3"]);
    let received_ended = exits_within(&waiting.proc, HUNG);
    let reached = gate.reached.load(Ordering::SeqCst);
    // The sender's walk may be stuck in the kernel until the file system answers: it
    // can end only after that, whatever it decided before.
    gate.release();
    let sent_ended = exits_within(&sender, HUNG);
    let (got, sent) = (waiting.kill(), sender.kill());
    let all = format!("{}\n{}", sent.describe(), got.describe());
    if let Err(e) = session.umount_and_join() {
        eprintln!("unmounting {}: {e}", src.display());
    }
    assert!(reached, "the walk never reached the hanging name: {all}");
    assert!(
        received_ended,
        "hung: the receiver still waited {HUNG:?} on a sender whose walk hung\n{all}"
    );
    assert!(sent_ended, "hung: the sender did not end\n{all}");
    sent.assert_code(5);
    assert!(
        sent.stderr.contains(&format!(
            "reading {}: no progress for 3 s (--timeout)",
            src.display()
        )),
        "{all}"
    );
    got.assert_code(5);
    assert!(got.stderr.contains("no progress for 3 s"), "{all}");
}
