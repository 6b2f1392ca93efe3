//! The receiver's whole data path: a real `haul::receive::receive` into a `Store` in a
//! temp dir, fed over `Conn::pair()` connections (one control, one data at a time) as a
//! local copy wires them (`cmd::run_copy`). The input is what the sender says.
//!
//! Every v2 frame carries a tag keyed by its connection's (random) link key, so raw fuzz
//! bytes would all be refused at the first header. The input is therefore a list of
//! records that this target seals as an honest sender would:
//!
//! ```text
//! flags u8, then records: kind u8 | len u16 LE | payload
//! flags: bit 0 no unit hash fix-up   bits 1-3 Start's checksum, inplace, delete
//!        bits 4-5 block size (4 KiB, 16 KiB, 64 KiB, 1 MiB)
//!        bit 6 the destination holds old files first (see `old_files`)   bit 7 4 streams
//! kind % 8: 0 control message (postcard bytes, MAC'd)   1 data payload (a data unit)
//!           2 End frame (with the payload)   3 raw bytes on the control connection
//!           4 raw bytes on the data connection   5 the data connection closes; the
//!           next data record opens another   6 a new control connection (Start first;
//!           the old one closes)   7 the payload as a control frame on the data connection
//! ```
//!
//! A fixed valid `Start` goes first. Data units carry a keyed BLAKE3 a fuzzer cannot
//! forge, so the target recomputes it for each decompressible unit, as a sender would.
//! Before data goes out, the target waits (briefly) until every `Entries` sent so far was
//! answered, so the data meets the files it names; the first data record hands over the
//! data connection. A drain thread per control connection reads the receiver's replies,
//! which must always verify and decode.
//!
//! Checks: `receive` never panics, its replies are authentic control messages, and it
//! writes nothing beside its destination (case dirs sit three levels below a directory
//! that must hold nothing else, so `..`-style escapes would show). The target runs as
//! whoever runs the fuzzer (in CI: root, so devices are made): a device entry's `rdev` is
//! set to 0 before sealing, so a receiver bug can never point a write at a real disk.
//! A failed transfer leaves nothing running: `receive` stops its store's finishers
//! (`save_progress` joins them) and its other threads end within a tick of the abort, so
//! the target runs in one process for as long as `run.sh` gives it (20,000 inputs run
//! with 3-14 threads and 5-12 descriptors open throughout).
#![no_main]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use haul::codec::unit_hash;
use haul::protocol::{Codec, Control, DataHeader, EntryKind, FrameKind, Rules, SyncOptions};
use haul::protocol::{ReadError, Sealer, DATA_FIXED_LEN};
use haul::receive::{receive, ReceiveOptions};
use haul::session::{frame_reader, sealer};
use haul::store::Store;
use haul::transport::{Conn, Role};
use libfuzzer_sys::fuzz_target;

/// The transfer's block key (data unit hashes, delta piece hashes).
const KEY: [u8; 32] = [0x5a; 32];
/// Block sizes the flags choose from.
const BLOCKS: [u32; 4] = [4096, 16 << 10, 64 << 10, 1 << 20];
/// Longest the target waits for the receiver to answer the Entries sent so far.
const ANSWER_WAIT: Duration = Duration::from_millis(500);
/// Old files' mtime (an Entry with it and the same size is unchanged).
const OLD_MTIME: i64 = 1_600_000_000;

/// `root/x/y/<case>`: the receiver's destinations; `root` and the levels between hold
/// nothing else.
fn cases() -> &'static PathBuf {
    static CASES: OnceLock<PathBuf> = OnceLock::new();
    CASES.get_or_init(|| {
        // libFuzzer's own main runs no Rust runtime setup: ignore SIGPIPE as std would,
        // so a write to a connection the receiver already dropped is an error, not death.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_IGN);
        }
        // Threads of a failed transfer end within a tick, holding their descriptors
        // until then: allow as many as the hard limit does.
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        unsafe {
            if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 {
                lim.rlim_cur = lim.rlim_max;
                libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
            }
        }
        let root = std::env::temp_dir().join(format!("haul-fuzz-receive-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let p = root.join("x").join("y");
        std::fs::create_dir_all(&p).expect("temp dir");
        p
    })
}

/// The only entry `dir` may hold is `name` (`None`: only digit-named case dirs).
fn assert_only(dir: &Path, name: Option<&str>) {
    for e in std::fs::read_dir(dir).expect("temp dir").flatten() {
        let n = e.file_name();
        let ok = match name {
            Some(want) => n == want,
            None => n.as_encoded_bytes().iter().all(u8::is_ascii_digit),
        };
        assert!(
            ok,
            "the receiver wrote {:?} outside its destination",
            e.path()
        );
    }
}

/// What the flag bit 6 puts in the destination before the transfer: a 40000-byte file
/// (three 16 KiB delta pieces), a small one, and a directory with a file (for --delete).
fn old_files(dest: &Path) {
    let big: Vec<u8> = (0..40_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let mtime = SystemTime::UNIX_EPOCH + Duration::from_secs(OLD_MTIME as u64);
    let _ = std::fs::create_dir_all(dest.join("olddir"));
    for (name, bytes) in [
        ("old.bin", &big[..]),
        ("old.txt", b"old text\n"),
        ("olddir/gone", b"x"),
    ] {
        if let Ok(mut f) = std::fs::File::create(dest.join(name)) {
            let _ = f.write_all(bytes);
            let _ = f.set_modified(mtime);
        }
    }
}

/// Sets a data payload's unit hash to the one an honest sender would compute, when its
/// body decompresses to `raw_len` bytes.
fn fix_hash(payload: &mut [u8]) {
    let Ok(h) = DataHeader::parse(payload) else {
        return;
    };
    let raw_len = h.raw_len as usize;
    let raw: Option<Vec<u8>> = match h.codec {
        Codec::Raw => Some(h.body.to_vec()),
        Codec::Lz4 => lz4_flex::block::decompress(h.body, raw_len)
            .ok()
            .filter(|r| r.len() == raw_len),
        Codec::Zstd => zstd::bulk::decompress(h.body, raw_len)
            .ok()
            .filter(|r| r.len() == raw_len),
    };
    if let Some(raw) = raw {
        let hash = unit_hash(&KEY, h.hashed(), &raw);
        payload[12..DATA_FIXED_LEN].copy_from_slice(&hash);
    }
}

/// What the drain thread of one control connection saw.
#[derive(Default)]
struct Replies {
    /// Frames answered (Need, Done, Error).
    count: AtomicUsize,
    /// The receiver closed or dropped the connection.
    closed: AtomicBool,
}

/// Our end of one control connection.
struct ControlConn {
    conn: Conn,
    sealer: Sealer,
    /// Entries messages written on it.
    entries: usize,
    replies: Arc<Replies>,
    drain: JoinHandle<()>,
}

impl ControlConn {
    /// A new control connection, handed to the receiver, with Start written on it.
    fn open(tx: &crossbeam_channel::Sender<(Conn, Role)>, start: &Control) -> Option<ControlConn> {
        let (ours, theirs) = Conn::pair().expect("pair");
        let _ = ours.set_write_timeout(Some(Duration::from_secs(5)));
        let reader = ours.try_clone().expect("clone a socketpair");
        let replies = Arc::new(Replies::default());
        let drain = {
            let replies = Arc::clone(&replies);
            std::thread::spawn(move || drain(reader, &replies))
        };
        let mut c = ControlConn {
            sealer: sealer(&ours),
            conn: ours,
            entries: 0,
            replies,
            drain,
        };
        tx.send((theirs, Role::Control)).ok()?;
        let mut buf = Vec::new();
        start
            .encode(&mut c.sealer, &mut buf)
            .expect("Start encodes");
        let _ = c.conn.write_all(&buf);
        Some(c)
    }

    /// Seals and writes one control message (postcard bytes, maybe not a valid message).
    fn send(&mut self, msg: &[u8]) {
        let mut buf = Vec::new();
        match Control::decode(msg) {
            Ok(Control::Entries(mut v)) => {
                self.entries += 1;
                // Never a device node that could reach a real disk (see the module docs).
                for e in &mut v {
                    if let EntryKind::Device { rdev, .. } = &mut e.kind {
                        *rdev = 0;
                    }
                }
                if Control::Entries(v)
                    .encode(&mut self.sealer, &mut buf)
                    .is_err()
                {
                    return;
                }
            }
            _ => self.sealer.control(msg, &mut buf),
        }
        let _ = self.conn.write_all(&buf);
    }

    /// Waits (briefly) until every Entries written here was answered, or the receiver
    /// closed the connection or returned.
    fn await_answers(&self, receiver: &JoinHandle<()>) {
        let deadline = Instant::now() + ANSWER_WAIT;
        while self.replies.count.load(Ordering::Acquire) < self.entries
            && !self.replies.closed.load(Ordering::Acquire)
            && !receiver.is_finished()
            && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    /// Ends our side: no more writes; the drain ends when the receiver closes its end.
    fn close(mut self) -> JoinHandle<()> {
        let _ = self.conn.shutdown_write();
        self.drain
    }
}

/// Reads the receiver's replies on one control connection until it closes: each must be
/// an authentic, decodable control message.
fn drain(mut conn: Conn, replies: &Replies) {
    let mut reader = frame_reader(&conn);
    let _ = conn.set_read_timeout(Some(Duration::from_secs(30)));
    loop {
        match reader.read_frame(&mut conn) {
            Ok(Some(f)) => {
                assert_eq!(
                    f.kind,
                    FrameKind::Control,
                    "receiver sent a non-control frame"
                );
                if let Err(e) = Control::decode(f.payload) {
                    panic!("receiver sent an undecodable control message: {e}");
                }
                replies.count.fetch_add(1, Ordering::Release);
            }
            Ok(None) | Err(ReadError::Truncated) | Err(ReadError::Io(_)) => break,
            Err(ReadError::Protocol(e)) => panic!("receiver sent a bad frame: {e}"),
        }
    }
    replies.closed.store(true, Ordering::Release);
}

/// Our end of the current data connection.
struct DataConn {
    conn: Conn,
    sealer: Sealer,
}

fuzz_target!(|data: &[u8]| {
    let Some((&flags, mut rest)) = data.split_first() else {
        return;
    };
    let fixup = flags & 1 == 0;
    let start = Control::Start {
        streams: if flags & 0x80 != 0 { 4 } else { 1 },
        block_size: BLOCKS[usize::from(flags >> 4 & 3)],
        options: SyncOptions {
            checksum: flags & 2 != 0,
            inplace: flags & 4 != 0,
            delete: flags & 8 != 0,
            // Bit 0x40 is taken below; dry runs and itemized answers share it.
            dry_run: flags & 0x41 == 0x41,
            items: flags & 0x40 != 0,
            // The bits are all taken: rsync's transfer rules ride on pairs of them.
            rules: Rules {
                update: flags & 0x12 == 0x12,
                existing: flags & 0x24 == 0x24,
                ignore_existing: flags & 0x28 == 0x28,
                size_only: flags & 0x06 == 0x06,
            },
        },
    };

    static N: AtomicU64 = AtomicU64::new(0);
    let cases = cases();
    let dest = cases.join(N.fetch_add(1, Ordering::Relaxed).to_string());
    std::fs::create_dir_all(&dest).expect("case dir");
    if flags & 0x40 != 0 {
        old_files(&dest);
    }
    let store = Store::open(&dest).expect("store");

    let (tx, rx) = crossbeam_channel::unbounded();
    let opts = ReceiveOptions {
        progress: false,
        timeout: Duration::from_millis(100),
        // A fuzzed chain is refused before anything is dialed.
        relay: false,
        outcome_key: Some([7; 32]),
        first: None,
        listing: Default::default(),
    };
    let receiver = std::thread::spawn(move || {
        let r = receive(store, KEY, rx, opts);
        if std::env::var_os("HAUL_FUZZ_DEBUG").is_some() {
            eprintln!("receive -> {:?}", r.as_ref().map(|r| &r.summary));
        }
    });
    let mut drains = Vec::new();
    let mut ctl = ControlConn::open(&tx, &start);
    let mut dat: Option<DataConn> = None;

    while rest.len() >= 3 {
        let kind = rest[0] % 8;
        let len = usize::from(u16::from_le_bytes([rest[1], rest[2]])).min(rest.len() - 3);
        let payload = &rest[3..3 + len];
        rest = &rest[3 + len..];
        match kind {
            0 => {
                if let Some(c) = &mut ctl {
                    c.send(payload);
                }
            }
            3 => {
                if let Some(c) = &mut ctl {
                    let _ = c.conn.write_all(payload);
                }
            }
            5 => {
                if let Some(mut d) = dat.take() {
                    let _ = d.conn.shutdown_write();
                }
            }
            6 => {
                let old = ctl.take();
                ctl = ControlConn::open(&tx, &start);
                if let Some(old) = old {
                    drains.push(old.close());
                }
            }
            _ => {
                // Something for the data connection: first let the receiver answer the
                // manifest so far, so the data meets the files it names.
                if let Some(c) = &ctl {
                    c.await_answers(&receiver);
                }
                if dat.is_none() {
                    let (ours, theirs) = Conn::pair().expect("pair");
                    let _ = ours.set_write_timeout(Some(Duration::from_secs(5)));
                    if tx.send((theirs, Role::Data)).is_err() {
                        continue;
                    }
                    dat = Some(DataConn {
                        sealer: sealer(&ours),
                        conn: ours,
                    });
                }
                let Some(d) = &mut dat else { continue };
                let mut buf = Vec::new();
                match kind {
                    1 | 2 => {
                        let mut p = payload.to_vec();
                        let fk = if kind == 1 {
                            if fixup {
                                fix_hash(&mut p);
                            }
                            FrameKind::Data
                        } else {
                            FrameKind::End
                        };
                        buf.extend_from_slice(&d.sealer.header(fk, p.len()));
                        buf.extend_from_slice(&p);
                    }
                    4 => buf.extend_from_slice(payload),
                    _ => d.sealer.control(payload, &mut buf),
                }
                let _ = d.conn.write_all(&buf);
            }
        }
    }

    // The sender is done: no more connections, then end-of-stream on each.
    drop(tx);
    if let Some(mut d) = dat.take() {
        let _ = d.conn.shutdown_write();
    }
    if let Some(c) = ctl.take() {
        drains.push(c.close());
    }
    receiver.join().expect("receive must not panic");
    for d in drains {
        if let Err(p) = d.join() {
            std::panic::resume_unwind(p);
        }
    }
    let root = cases.parent().and_then(Path::parent).expect("root");
    assert_only(root, Some("x"));
    assert_only(&root.join("x"), Some("y"));
    assert_only(cases, None);
    let _ = std::fs::remove_dir_all(&dest);
});
