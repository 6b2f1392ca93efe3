//! The receiver's whole data path: a real `haul::receive::receive` into a `Store` in a
//! temp dir, fed by one control and one data connection made with `Conn::pair()` (as a
//! local copy wires them, see `cmd::run_copy`). The input is the sender's bytes.
//!
//! Input layout: `a: u16 LE, d: u16 LE`, then `a` bytes for the control stream (after a
//! fixed valid `Start`), `d` bytes for the data stream, and the rest for the control
//! stream after the data was delivered (say, `Finish`). Before the data connection is
//! handed over, the target waits (briefly) until every `Entries` in the first control part
//! was answered, so the data meets the files it names. Data units carry a keyed BLAKE3 a
//! fuzzer cannot forge, so the target recomputes it for each decompressible unit (a
//! `fixup` flag in the top bit of `a` turns that off).
#![no_main]

use std::io::{Read, Write};
use std::net::Shutdown;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use haul::codec::unit_hash;
use haul::protocol::{
    decode_frame, Codec, Control, DataHeader, FrameKind, SyncOptions, FRAME_HEADER_LEN,
};
use haul::receive::{receive, ReceiveOptions};
use haul::store::Store;
use haul::transport::{Conn, Role};
use libfuzzer_sys::fuzz_target;

const KEY: [u8; 32] = [0x5a; 32];
/// Block size in the fixed Start (the smallest the receiver accepts).
const BLOCK: u32 = 4096;

fn base() -> &'static PathBuf {
    static BASE: OnceLock<PathBuf> = OnceLock::new();
    BASE.get_or_init(|| {
        // libFuzzer's own main runs no Rust runtime setup: ignore SIGPIPE as std would,
        // so a write to a connection the receiver already dropped is an error, not death.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_IGN);
        }
        let p = std::env::temp_dir().join(format!("haul-fuzz-receive-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).expect("temp dir");
        p
    })
}

fn unix(c: Conn) -> UnixStream {
    match c {
        Conn::Unix(s) => s,
        _ => unreachable!("Conn::pair is a socketpair"),
    }
}

/// Sets each decompressible data unit's hash to the right keyed hash.
fn fixup(mut data: Vec<u8>) -> Vec<u8> {
    let mut pos = 0;
    while let Ok(Some((f, used))) = decode_frame(&data[pos..]) {
        let mut hash = None;
        if f.kind == FrameKind::Data {
            if let Ok(h) = DataHeader::parse(f.payload) {
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
                hash = raw.map(|r| unit_hash(&KEY, &r));
            }
        }
        if let Some(hash) = hash {
            let at = pos + FRAME_HEADER_LEN + 12;
            data[at..at + 32].copy_from_slice(&hash);
        }
        pos += used;
    }
    data
}

/// How many Entries messages a control part holds (each gets one answer).
fn count_entries(mut b: &[u8]) -> usize {
    let mut n = 0;
    while let Ok(Some((f, used))) = decode_frame(b) {
        if f.kind != FrameKind::Control {
            break;
        }
        match Control::decode(f.payload) {
            Ok(Control::Entries(_)) => n += 1,
            Ok(_) => {}
            Err(_) => break,
        }
        b = &b[used..];
    }
    n
}

fn write_quietly(s: &mut UnixStream, b: &[u8]) {
    let _ = s.write_all(b);
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 4 {
        return;
    }
    let base = base();
    let a_raw = u16::from_le_bytes([data[0], data[1]]);
    let no_fixup = a_raw & 0x8000 != 0;
    let rest = &data[4..];
    let a = usize::from(a_raw & 0x7fff).min(rest.len());
    let (ctl1, rest) = rest.split_at(a);
    let d = usize::from(u16::from_le_bytes([data[2], data[3]])).min(rest.len());
    let (dat, ctl2) = rest.split_at(d);
    let dat = if no_fixup {
        dat.to_vec()
    } else {
        fixup(dat.to_vec())
    };

    static N: AtomicU64 = AtomicU64::new(0);
    let dir = base.join(N.fetch_add(1, Ordering::Relaxed).to_string());
    let store = Store::open(&dir).expect("store");

    let (ctl_ours, ctl_theirs) = Conn::pair().expect("pair");
    let (dat_ours, dat_theirs) = Conn::pair().expect("pair");
    let mut ctl = unix(ctl_ours);
    let mut dat_s = unix(dat_ours);
    let (tx, rx) = crossbeam_channel::unbounded();
    let _ = tx.send((ctl_theirs, Role::Control));

    let opts = ReceiveOptions {
        progress: false,
        timeout: Duration::from_millis(100),
    };
    let receiver = std::thread::spawn(move || receive(store, KEY, rx, opts));

    // Drain the receiver's answers, counting frames, so it never blocks on a full socket.
    let replies = Arc::new(AtomicUsize::new(0));
    let closed = Arc::new(AtomicUsize::new(0));
    let drain = {
        let mut r = ctl.try_clone().expect("clone");
        let (replies, closed) = (Arc::clone(&replies), Arc::clone(&closed));
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let mut chunk = [0u8; 4096];
            loop {
                match r.read(&mut chunk) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                }
                while let Ok(Some((_, used))) = decode_frame(&buf) {
                    buf.drain(..used);
                    replies.fetch_add(1, Ordering::Release);
                }
            }
            closed.store(1, Ordering::Release);
        })
    };

    let mut start = Vec::new();
    Control::Start {
        streams: 1,
        block_size: BLOCK,
        options: SyncOptions::default(),
    }
    .encode(&mut start)
    .expect("Start encodes");
    write_quietly(&mut ctl, &start);
    write_quietly(&mut ctl, ctl1);
    let want = count_entries(ctl1);
    let deadline = Instant::now() + Duration::from_millis(500);
    while replies.load(Ordering::Acquire) < want
        && closed.load(Ordering::Acquire) == 0
        && !receiver.is_finished()
        && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_micros(200));
    }
    let _ = tx.send((dat_theirs, Role::Data));
    write_quietly(&mut dat_s, &dat);
    let _ = dat_s.shutdown(Shutdown::Write);
    write_quietly(&mut ctl, ctl2);
    let _ = ctl.shutdown(Shutdown::Write);
    drop(tx);
    let result = receiver.join().expect("receive must not panic");
    let _ = ctl.shutdown(Shutdown::Both);
    let _ = drain.join();
    if std::env::var_os("HAUL_FUZZ_DEBUG").is_some() {
        eprintln!("receive -> {:?}", result.as_ref().map(|r| &r.summary));
    }
    drop(result);
    // Nothing may land beside the destination: its parent holds only the cases' dirs.
    for e in std::fs::read_dir(base).expect("base dir").flatten() {
        let name = e.file_name();
        assert!(
            name.as_encoded_bytes().iter().all(u8::is_ascii_digit),
            "the receiver wrote {name:?} outside its destination"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
});
