//! One flipped bit on the wire, after the handshake, must never reach a file.
//!
//! A TCP relay on 127.0.0.1 sits between `haul send` and `haul recv` (the sender gets a
//! ticket rewritten to point at it). In each trial it picks one of the transfer's first
//! connections (the control connection or a data connection) and flips one bit at a random
//! position of what the sender writes on it, past the handshake (past the TLS records that
//! carry it, with TLS). Whatever the exit codes, no file may be under its final name with
//! a wrong byte, no file may appear that the source does not have, and the file already in
//! DIR must stay. Runs that end with exit 0 on both sides must be complete. Seeds are fixed,
//! so a failing trial can be run again.

mod support;

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;

use haul::transport::Ticket;
use support::{recv, write_random_file, Haul, Rng};

/// Trials per mode.
const TRIALS: u64 = 50;
/// Trials running at once (each mostly waits for the receiver to notice lost data).
const PARALLEL: u64 = 5;
/// Data streams per transfer: with the control connection, the relay picks among 3.
const STREAMS: u64 = 2;
/// What the dialer writes in the plain handshake: hello (39) and proof (32).
const PLAIN_HANDSHAKE: u64 = 71;
/// TLS application-data records the dialer writes before the first frame: its Finished,
/// the haul hello and the proof.
const TLS_HANDSHAKE_RECORDS: u32 = 3;

/// Where a trial flips its bit: which connection (in accept order) and how far past the
/// handshake (a byte offset and a bit).
#[derive(Clone, Copy, Debug)]
struct Flip {
    trial: u64,
    conn: usize,
    at: u64,
    bit: u8,
}

/// The relay for one trial; `flipped` says whether the flip happened (the stream may end
/// before the chosen position).
struct Relay {
    addr: SocketAddr,
    flipped: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Wakes the accept loop, which sees `stop` and ends.
        let _ = TcpStream::connect(self.addr);
    }
}

fn relay(target: SocketAddr, flip: Flip, tls: bool) -> Relay {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let flipped = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let (flag, halt) = (Arc::clone(&flipped), Arc::clone(&stop));
    thread::spawn(move || {
        for (n, client) in listener.incoming().enumerate() {
            let Ok(client) = client else { return };
            if halt.load(Ordering::Relaxed) {
                return;
            }
            let Ok(server) = TcpStream::connect(target) else {
                return;
            };
            let flip = (n == flip.conn).then_some(flip);
            let flag = Arc::clone(&flag);
            let (c2, s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
            let flag2 = Arc::clone(&flag);
            thread::spawn(move || pump(s2, c2, None, tls, &flag2));
            thread::spawn(move || pump(client, server, flip, tls, &flag));
        }
    });
    Relay {
        addr,
        flipped,
        stop,
    }
}

/// Copies `from` to `to`, flipping `flip`'s bit on the way.
fn pump(mut from: TcpStream, mut to: TcpStream, flip: Option<Flip>, tls: bool, flag: &AtomicBool) {
    let mut buf = vec![0u8; 64 << 10];
    let mut skip = Skip::new(tls);
    while let Ok(n) = from.read(&mut buf) {
        if n == 0 {
            break;
        }
        if let Some(f) = flip {
            // Bytes of this read past the handshake start at `past`.
            let (before, past) = skip.advance(&buf[..n]);
            let first = past - (n - before) as u64;
            if before < n && first <= f.at && f.at < past {
                buf[before + (f.at - first) as usize] ^= 1 << f.bit;
                flag.store(true, Ordering::Relaxed);
            }
        }
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Write);
    let _ = from.shutdown(Shutdown::Read);
}

/// Finds where the handshake ends in the dialer's stream: after 71 bytes in plain, after
/// the third application-data record with TLS.
struct Skip {
    /// Bytes seen so far.
    seen: u64,
    /// Plain: the handshake's length; TLS: where the next record header starts.
    next_record: u64,
    records: u32,
    /// Where the frames start, once known.
    end: Option<u64>,
    /// The current record header's bytes (TLS).
    header: Vec<u8>,
}

impl Skip {
    fn new(tls: bool) -> Skip {
        Skip {
            seen: 0,
            next_record: 0,
            records: 0,
            end: (!tls).then_some(PLAIN_HANDSHAKE),
            header: Vec::new(),
        }
    }

    /// Takes the next read; returns how many of its bytes belong to the handshake and how
    /// many bytes past the handshake the stream has carried after it.
    fn advance(&mut self, chunk: &[u8]) -> (usize, u64) {
        let start = self.seen;
        for (i, &b) in chunk.iter().enumerate() {
            if self.end.is_some() {
                break;
            }
            let pos = start + i as u64;
            if pos < self.next_record {
                continue;
            }
            self.header.push(b);
            if self.header.len() == 5 {
                let len = u64::from(u16::from_be_bytes([self.header[3], self.header[4]]));
                self.next_record = pos + 1 + len;
                if self.header[0] == 23 {
                    self.records += 1;
                    if self.records == TLS_HANDSHAKE_RECORDS {
                        self.end = Some(self.next_record);
                    }
                }
                self.header.clear();
            }
        }
        self.seen += chunk.len() as u64;
        match self.end {
            Some(end) if self.seen > end => {
                let before = end.saturating_sub(start) as usize;
                (before, self.seen - end)
            }
            _ => (chunk.len(), 0),
        }
    }
}

/// The source tree: a large random file, a compressible one, many small ones (so the
/// manifest fills a few KiB of the control stream). About 2.3 MiB.
fn build_source(src: &Path) -> Vec<PathBuf> {
    std::fs::create_dir_all(src.join("d")).unwrap();
    write_random_file(&src.join("big"), 1_300_000, 7);
    let text: Vec<u8> = (0..700_000u32)
        .map(|i| b"page header; row data 0123456789; "[(i % 34) as usize] ^ ((i / 4099) as u8 & 1))
        .collect();
    std::fs::write(src.join("text"), text).unwrap();
    for i in 0..60u64 {
        write_random_file(
            &src.join(format!("d/small-{i:02}")),
            1_000 + i * 97,
            100 + i,
        );
    }
    let mut files = vec![PathBuf::from("big"), PathBuf::from("text")];
    files.extend((0..60).map(|i| PathBuf::from(format!("d/small-{i:02}"))));
    files
}

/// One trial's outcome.
#[derive(Debug)]
struct Outcome {
    flip: Flip,
    flipped: bool,
    send: Option<i32>,
    recv: Option<i32>,
}

/// Runs one transfer through a relay that applies `flip`, then checks the destination.
fn trial(src: &Path, files: &[PathBuf], root: &Path, flip: Flip, tls: bool) -> Outcome {
    let dest = root.join(format!("dest-{tls}-{}", flip.trial));
    let _ = std::fs::remove_dir_all(&dest);
    std::fs::create_dir_all(&dest).unwrap();
    std::fs::write(dest.join("precious"), b"was here before").unwrap();
    let r = recv(&dest, &["--listen", "127.0.0.1:0", "-q"]);
    let mut ticket = Ticket::parse(&r.ticket).expect("ticket");
    let relay = relay(ticket.addrs[0], flip, tls);
    ticket.addrs = vec![relay.addr];
    let streams = STREAMS.to_string();
    let mut args = vec!["-q", "--streams", &streams, "--block-size", "64K"];
    args.extend(["--retries", "8"]);
    if !tls {
        args.push("--no-encrypt");
    }
    let sent = Haul::new().send(&[src], &ticket.encode(), &args);
    let received = r.wait();
    let why = || {
        format!(
            "{flip:?} tls={tls}\n{}\n{}",
            sent.describe(),
            received.describe()
        )
    };

    // Never a wrong byte under a final name, never a file the source does not have.
    let got = dest.join("src");
    for f in files {
        if let Ok(bytes) = std::fs::read(got.join(f)) {
            assert!(
                bytes == std::fs::read(src.join(f)).unwrap(),
                "{f:?} differs: {}",
                why()
            );
        }
    }
    for entry in walk(&got) {
        let name = entry.file_name().unwrap().to_string_lossy().into_owned();
        let rel = entry.strip_prefix(&got).unwrap();
        let known = files.iter().any(|f| f == rel) || rel == Path::new("d");
        assert!(
            known || name.starts_with(".haul-"),
            "unexpected {rel:?}: {}",
            why()
        );
    }
    assert_eq!(
        std::fs::read(dest.join("precious")).ok().as_deref(),
        Some(&b"was here before"[..]),
        "a file in DIR was removed or changed: {}",
        why()
    );
    // Success means complete.
    if sent.code() == Some(0) && received.code() == Some(0) {
        for f in files {
            assert!(got.join(f).is_file(), "exit 0 without {f:?}: {}", why());
        }
    }
    let _ = std::fs::remove_dir_all(&dest);
    Outcome {
        flip,
        flipped: relay.flipped.load(Ordering::Relaxed),
        send: sent.code(),
        recv: received.code(),
    }
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in rd.flatten() {
        let p = e.path();
        if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
            out.extend(walk(&p));
        }
        out.push(p);
    }
    out
}

/// The flips of one mode's trials, from a fixed seed: a third hit the control connection
/// (its first few KiB), the rest a data connection (its first MiB).
fn flips(seed: u64) -> Vec<Flip> {
    let mut rng = Rng::new(seed);
    (0..TRIALS)
        .map(|trial| {
            let conn = rng.range(0, STREAMS) as usize;
            let span: u64 = if conn == 0 { 4 << 10 } else { 1 << 20 };
            Flip {
                trial,
                conn,
                at: rng.range(0, span - 1),
                bit: rng.range(0, 7) as u8,
            }
        })
        .collect()
}

fn run_mode(tls: bool, seed: u64) {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    let files = build_source(&src);
    let todo = Mutex::new(flips(seed));
    let done = Mutex::new(Vec::new());
    thread::scope(|s| {
        for _ in 0..PARALLEL {
            s.spawn(|| loop {
                let Some(flip) = todo.lock().unwrap().pop() else {
                    return;
                };
                let o = trial(&src, &files, tmp.path(), flip, tls);
                done.lock().unwrap().push(o);
            });
        }
    });
    let done = done.into_inner().unwrap();
    let flipped = done.iter().filter(|o| o.flipped).count();
    let ok = done
        .iter()
        .filter(|o| o.send == Some(0) && o.recv == Some(0))
        .count();
    let ok_flipped = done
        .iter()
        .filter(|o| o.flipped && o.send == Some(0) && o.recv == Some(0))
        .count();
    let control = done
        .iter()
        .filter(|o| o.flipped && o.flip.conn == 0)
        .count();
    let mode = if tls { "tls" } else { "no-encrypt" };
    eprintln!(
        "bitflip {mode}: {} trials, {flipped} flipped a bit ({control} on the control \
         connection), {ok} ended with exit 0 on both sides ({ok_flipped} of them flipped), \
         {} failed cleanly, 0 wrong bytes",
        done.len(),
        done.len() - ok
    );
    for o in done
        .iter()
        .filter(|o| o.send != Some(0) || o.recv != Some(0))
    {
        eprintln!(
            "  failed cleanly: {:?} (flipped {}): send exit {:?}, recv exit {:?}",
            o.flip, o.flipped, o.send, o.recv
        );
    }
    assert_eq!(done.len() as u64, TRIALS);
    assert!(
        flipped as u64 * 2 > TRIALS,
        "only {flipped} trials flipped a bit"
    );
}

#[test]
fn one_flipped_bit_never_reaches_a_file_no_encrypt() {
    run_mode(false, 0xb17f_1100);
}

#[test]
fn one_flipped_bit_never_reaches_a_file_tls() {
    run_mode(true, 0xb17f_1200);
}
