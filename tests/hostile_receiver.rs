//! A hostile (or merely strange) receiver, built from the library's own protocol and
//! transport types, answers a real `haul send` process. The sender must never crash or
//! hang, whatever the receiver asks for, and must never read anything but the files it
//! walked. The fake receiver also controls timing: it holds its answer to the manifest
//! while the test swaps a source file, which makes a check-then-use race deterministic.

mod support;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use haul::protocol::{Control, FrameKind, Summary, Want, WantKind};
use haul::session::{frame_reader, Channel};
use haul::transport::{Conn, Listener, Role};
use support::hostile::wait_exit;

/// How long the sender may take before the test calls it hung.
const DEADLINE: Duration = Duration::from_secs(40);

struct FakeReceiver {
    control: Channel,
    /// Every data payload any data stream carried.
    data: Arc<Mutex<Vec<u8>>>,
    stop: Arc<AtomicBool>,
}

/// Starts `haul send PATH` against a fake receiver; returns the sender and the receiver's
/// control connection, after Start.
fn start(path: &Path, extra: &[&str]) -> (Child, FakeReceiver) {
    let listener = Listener::bind(Some("127.0.0.1:0".parse().unwrap())).expect("bind");
    let ticket = listener.ticket().encode();
    let (handle, accepted) = listener.spawn_acceptor();
    let child = Command::new(env!("CARGO_BIN_EXE_haul"))
        .args(["send", "-q", "--retries", "1", "--streams", "2"])
        .args(extra)
        .arg(path)
        .arg("--to")
        .arg(&ticket)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn haul send");
    let data = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let (ctx, crx) = crossbeam_channel::bounded(1);
    {
        let (data, stop) = (Arc::clone(&data), Arc::clone(&stop));
        std::thread::spawn(move || {
            let _handle = handle;
            while !stop.load(Ordering::Relaxed) {
                let Ok(a) = accepted.recv_timeout(Duration::from_millis(100)) else {
                    continue;
                };
                match a.role {
                    Role::Control => {
                        let _ = ctx.try_send(a.conn);
                    }
                    Role::Data => {
                        let data = Arc::clone(&data);
                        std::thread::spawn(move || drain(a.conn, &data));
                    }
                    // A sender never opens probe connections.
                    Role::Probe | Role::ProbeData => {}
                }
            }
        });
    }
    let mut control = Channel::new(
        crx.recv_timeout(Duration::from_secs(20))
            .expect("the sender opened no control connection"),
    );
    let start = control.read(Some(Duration::from_secs(20)));
    assert!(matches!(start, Ok(Control::Start { .. })), "{start:?}");
    (
        child,
        FakeReceiver {
            control,
            data,
            stop,
        },
    )
}

/// Keeps every data frame's payload.
fn drain(mut conn: Conn, data: &Mutex<Vec<u8>>) {
    let mut reader = frame_reader(&conn);
    while let Ok(Some(f)) = reader.read_frame(&mut conn) {
        if f.kind == FrameKind::End {
            return;
        }
        if let Ok(mut d) = data.lock() {
            d.extend_from_slice(f.payload);
        }
    }
}

impl FakeReceiver {
    /// The next message that is not the sender's `Keepalive` (it says one every second
    /// while it works between requests).
    fn next(&mut self) -> Option<Control> {
        loop {
            match self.control.read(Some(Duration::from_secs(20))) {
                Ok(Control::Keepalive) => {}
                m => return m.ok(),
            }
        }
    }

    /// The id of the first regular file the sender lists. Batches before it (the walk may
    /// send the directory alone first) are answered with "nothing needed".
    fn first_file(&mut self) -> u64 {
        loop {
            let m = self.next().expect("Entries");
            if let Some(id) = first_file_id(&m) {
                return id;
            }
            self.control
                .write(&Control::Need(Vec::new()))
                .expect("answer a batch");
        }
    }

    /// Answers like a receiver that wants `first` for the first batch, then nothing, and
    /// confirms Finish; returns when the sender closes.
    fn serve(&mut self, mut first: Option<Vec<Want>>) {
        while let Some(m) = self.next() {
            let reply = match m {
                Control::Entries(_) => Control::Need(first.take().unwrap_or_default()),
                Control::Finish { .. } => Control::Done(Summary::default()),
                _ => continue,
            };
            if self.control.write(&reply).is_err() {
                return;
            }
        }
    }
}

impl Drop for FakeReceiver {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Waits for the sender to exit; panics when it hangs. Returns its code and stderr.
fn wait(child: Child) -> (i32, String) {
    wait_within(child, DEADLINE)
}

/// [`wait`], for a sender that may take up to `deadline`.
fn wait_within(mut child: Child, deadline: Duration) -> (i32, String) {
    wait_exit(&mut child, "haul send", deadline)
}

/// The first file entry's id in an Entries batch.
fn first_file_id(m: &Control) -> Option<u64> {
    match m {
        Control::Entries(es) => es
            .iter()
            .find(|e| matches!(e.kind, haul::protocol::EntryKind::File { .. }))
            .map(|e| e.id),
        other => panic!("expected Entries, got {}", other.name()),
    }
}

/// Regression (issue 36, 2): a receiver that authenticated and then answered nothing kept
/// `haul send f --no-encrypt` waiting until it was killed. A control stream silent for
/// 30 s while an answer is awaited is taken for lost (a busy receiver says `Keepalive`
/// every second): the sender re-dials (`--retries 1`: once), asks again, and when that
/// is silent too ends with exit 5 saying so.
#[test]
fn a_receiver_silent_after_the_handshake_ends_the_sender_with_exit_5() {
    let d = tempfile::tempdir().unwrap();
    let f = d.path().join("f");
    std::fs::write(&f, b"bytes for nobody").unwrap();
    let (child, r) = start(&f, &["--no-encrypt"]);
    let (code, err) = wait_within(child, Duration::from_secs(240));
    drop(r);
    assert_eq!(code, 5, "{err}");
    assert!(err.contains("said nothing for 30 s"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

/// `--timeout SECS` of send (as rsync's): a run where nothing moves for that long, no data
/// sent and no word from the receiver, ends with exit 5 at once (no re-dial).
#[test]
fn send_timeout_ends_a_run_where_nothing_moves() {
    let d = tempfile::tempdir().unwrap();
    let f = d.path().join("f");
    std::fs::write(&f, b"bytes for nobody").unwrap();
    let (child, r) = start(&f, &["--timeout", "3"]);
    let (code, err) = wait(child);
    drop(r);
    assert_eq!(code, 5, "{err}");
    assert!(err.contains("nothing moved for 3 s (--timeout)"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
}

#[test]
fn delta_with_piece_size_zero_is_refused_not_a_crash_or_hang() {
    let d = tempfile::tempdir().unwrap();
    let f = d.path().join("f");
    std::fs::write(&f, vec![7u8; 3 << 20]).unwrap();
    let (child, mut r) = start(&f, &["--block-size", "1M"]);
    let id = r.first_file();
    let want = Want {
        id,
        what: WantKind::Delta {
            chunk: 0,
            hashes: vec![[0u8; 16]; 4],
        },
    };
    let _ = r.control.write(&Control::Need(vec![want]));
    let reader = std::thread::spawn(move || r.serve(None));
    let (code, err) = wait(child);
    assert_ne!(code, 0, "{err}");
    assert!(!err.contains("panicked"), "the sender panicked:\n{err}");
    assert!(err.contains("delta piece size"), "{err}");
    let _ = reader.join();
}

#[test]
fn source_swapped_for_a_fifo_after_the_walk_does_not_hang_the_sender() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("src");
    std::fs::create_dir(&src).unwrap();
    let f = src.join("f");
    std::fs::write(&f, b"walked content").unwrap();
    let (child, mut r) = start(&src, &[]);
    let id = r.first_file();
    // Between the walk and the read: the file becomes a FIFO nobody writes to.
    std::fs::remove_file(&f).unwrap();
    rustix::fs::mknodat(
        rustix::fs::CWD,
        &f,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o644),
        0,
    )
    .unwrap();
    let want = Want {
        id,
        what: WantKind::All,
    };
    let _ = r.control.write(&Control::Need(vec![want]));
    let reader = std::thread::spawn(move || r.serve(None));
    let (_code, err) = wait(child);
    assert!(!err.contains("panicked"), "{err}");
    let _ = reader.join();
}

#[test]
fn source_swapped_for_a_symlink_after_the_walk_never_sends_the_target() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("src");
    std::fs::create_dir(&src).unwrap();
    let f = src.join("f");
    std::fs::write(&f, b"public bytes, walked").unwrap();
    // Same size as the walked file, so only its identity can tell them apart.
    let secret = d.path().join("secret");
    std::fs::write(&secret, b"SECRET-SECRET-SECRET").unwrap();
    let (child, mut r) = start(&src, &["--compress", "none"]);
    let id = r.first_file();
    std::fs::remove_file(&f).unwrap();
    std::os::unix::fs::symlink(&secret, &f).unwrap();
    let want = Want {
        id,
        what: WantKind::All,
    };
    let _ = r.control.write(&Control::Need(vec![want]));
    let data = Arc::clone(&r.data);
    let reader = std::thread::spawn(move || r.serve(None));
    let (_code, err) = wait(child);
    let _ = reader.join();
    let seen = data.lock().unwrap().clone();
    assert!(
        !seen.windows(6).any(|w| w == b"SECRET"),
        "the symlink's target was sent; sender said:\n{err}"
    );
}
