//! The pipe receiver's whole path: a real `haul::receive::pipe::receive_pipe` writing one
//! stream into a file in a temp dir, fed over `Conn::pair()` connections. The input is
//! what the sender says, sealed by this target as an honest sender would (frames carry
//! tags keyed per connection that raw fuzz bytes cannot forge):
//!
//! ```text
//! flags u8, then records: kind u8 | len u16 LE | payload
//! flags: bits 0-1 block size (4 KiB, 16 KiB, 64 KiB, 64 KiB)   bit 2 no fix-ups
//!        bits 3-4 streams (1, 2, 4, 8)   bits 5-6 window in blocks (2, 3, 4, 8)
//! kind % 8: 0 control message (postcard bytes, MAC'd)   1 data payload (a data unit)
//!           2 End frame   3 raw bytes on the control connection   4 raw bytes on the
//!           data connection   5 the data connection closes; the next data record opens
//!           another   6 a new control connection (StreamStart first)   7 the next block
//!           of an honest stream: payload[0] codec (raw, lz4, zstd), payload[1..3] length
//!           (at most one block), payload[3..] repeated to fill it
//! ```
//!
//! An empty control message (kind 0) is the honest `StreamEnd` of the kind-7 blocks so far.
//! Kind-7 blocks wait (briefly) for the credit the receiver's `StreamAck`s give.
//! Fix-ups (unless flag bit 2): a data unit's hash is recomputed as a sender would (over
//! its BLAKE3 chaining value at its offset) when its body decompresses and fits a subtree
//! there, and a `StreamEnd`'s digest becomes the BLAKE3 of the blocks sent so far when
//! they cover `0..len` without a gap; otherwise a fuzzer could never reach the end.
//!
//! Checks: `receive_pipe` never panics; its replies are authentic control messages; on
//! success the file holds exactly `bytes` bytes whose BLAKE3 is the reported digest (the
//! digest merged from chaining values is the real one); it writes nothing beside its
//! destination directory.
#![no_main]

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::thread::JoinHandle;
use std::time::Duration;

use haul::codec::tree::{block_cv, fits, stream_unit_hash};
use haul::protocol::{encode_data_header, hashed_parts, set_hash, Segment};
use haul::protocol::{Codec, Control, DataHeader, FrameKind, ReadError, Sealer, DATA_FIXED_LEN};
use haul::receive::pipe::{receive_pipe, Output, PipeRecvOptions, PipeTo};
use haul::session::{frame_reader, sealer};
use haul::transport::{Conn, Role};
use libfuzzer_sys::fuzz_target;

/// The transfer's block key.
const KEY: [u8; 32] = [0x3c; 32];
/// Block sizes the flags choose from (powers of two, as the receiver demands).
const BLOCKS: [u32; 4] = [4096, 16 << 10, 64 << 10, 64 << 10];
const STREAMS: [u16; 4] = [1, 2, 4, 8];
const WINDOW_BLOCKS: [u64; 4] = [2, 3, 4, 8];

/// `root/x/<case>`: the receivers' destinations; `root` holds nothing else.
fn cases() -> &'static PathBuf {
    static CASES: OnceLock<PathBuf> = OnceLock::new();
    CASES.get_or_init(|| {
        // libFuzzer's own main runs no Rust runtime setup: ignore SIGPIPE as std would.
        // SAFETY: setting a signal's disposition to SIG_IGN at start-up, before any
        // other thread exists; no safe std API does this.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_IGN);
        }
        let root = std::env::temp_dir().join(format!("haul-fuzz-pipe-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let p = root.join("x");
        std::fs::create_dir_all(&p).expect("temp dir");
        p
    })
}

/// The raw bytes of a data unit whose body decompresses to `raw_len` bytes.
fn raw_of(h: &DataHeader<'_>) -> Option<Vec<u8>> {
    let raw_len = h.raw_len as usize;
    match h.codec {
        Codec::Raw => Some(h.body.to_vec()).filter(|r| r.len() == raw_len),
        Codec::Lz4 => lz4_flex::block::decompress(h.body, raw_len)
            .ok()
            .filter(|r| r.len() == raw_len),
        Codec::Zstd => zstd::bulk::decompress(h.body, raw_len)
            .ok()
            .filter(|r| r.len() == raw_len),
    }
}

/// Sets a data payload's unit hash to an honest sender's, when it can; returns the block
/// (offset, raw bytes) it stands for.
fn fix_hash(payload: &mut [u8]) -> Option<(u64, Vec<u8>)> {
    let h = DataHeader::parse(payload).ok()?;
    let seg = h.segments().next()?;
    let raw = raw_of(&h)?;
    if !fits(seg.offset, raw.len()) {
        return None;
    }
    let hash = stream_unit_hash(&KEY, h.hashed(), &block_cv(seg.offset, &raw));
    payload[12..DATA_FIXED_LEN].copy_from_slice(&hash);
    Some((seg.offset, raw))
}

/// The BLAKE3 of the blocks sent, when they cover `0..len` exactly and without a gap.
fn digest_of(sent: &BTreeMap<u64, Vec<u8>>, len: u64) -> Option<[u8; 32]> {
    let mut h = blake3::Hasher::new();
    let mut at = 0u64;
    while at < len {
        let b = sent.get(&at)?;
        h.update(b);
        at += b.len() as u64;
    }
    (at == len).then(|| *h.finalize().as_bytes())
}

/// An honest next block: codec, length and a pattern from `payload`.
fn honest_block(payload: &[u8], offset: u64, block: u32) -> Option<(Vec<u8>, Vec<u8>)> {
    if offset % u64::from(block) != 0 {
        // A short block ended the honest stream.
        return None;
    }
    let (&codec, rest) = payload.split_first()?;
    let len =
        usize::from(u16::from_le_bytes([*rest.first()?, *rest.get(1)?])).clamp(1, block as usize);
    let pattern = rest.get(2..).filter(|p| !p.is_empty()).unwrap_or(b"\0");
    let raw: Vec<u8> = pattern.iter().copied().cycle().take(len).collect();
    let (codec, body) = match codec % 3 {
        1 => (Codec::Lz4, lz4_flex::block::compress(&raw)),
        2 => (Codec::Zstd, zstd::bulk::compress(&raw, 1).ok()?),
        _ => (Codec::Raw, raw.clone()),
    };
    let seg = [Segment {
        file: 0,
        offset,
        len: raw.len() as u32,
        keep: false,
    }];
    let mut p = Vec::new();
    encode_data_header(&mut p, codec, raw.len() as u32, &seg);
    let hash = stream_unit_hash(&KEY, hashed_parts(&p), &block_cv(offset, &raw));
    set_hash(&mut p, &hash);
    p.extend_from_slice(&body);
    Some((p, raw))
}

/// Our end of a control connection and the thread reading the receiver's replies.
struct ControlConn {
    conn: Conn,
    sealer: Sealer,
    drain: JoinHandle<()>,
}

/// The most the receiver said it handed to its consumer (`StreamAck.written`), on any
/// control connection: an honest sender's credit.
static WRITTEN: AtomicU64 = AtomicU64::new(0);

impl ControlConn {
    fn open(tx: &crossbeam_channel::Sender<(Conn, Role)>, start: &Control) -> Option<ControlConn> {
        let (ours, theirs) = Conn::pair().expect("pair");
        let _ = ours.set_write_timeout(Some(Duration::from_secs(5)));
        let reader = ours.try_clone().expect("clone a socketpair");
        let drain = std::thread::spawn(move || drain(reader));
        let mut c = ControlConn {
            sealer: sealer(&ours),
            conn: ours,
            drain,
        };
        tx.send((theirs, Role::Control)).ok()?;
        c.send_msg(start);
        Some(c)
    }

    fn send_msg(&mut self, msg: &Control) {
        let mut buf = Vec::new();
        if msg.encode(&mut self.sealer, &mut buf).is_ok() {
            let _ = self.conn.write_all(&buf);
        }
    }

    fn close(mut self) -> JoinHandle<()> {
        let _ = self.conn.shutdown_write();
        self.drain
    }
}

/// Reads the receiver's replies until it closes: each must be an authentic, decodable
/// control message.
fn drain(mut conn: Conn) {
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
                match Control::decode(f.payload) {
                    Ok(Control::StreamAck { written, .. }) => {
                        WRITTEN.fetch_max(written, Ordering::AcqRel);
                    }
                    Ok(_) => {}
                    Err(e) => panic!("receiver sent an undecodable control message: {e}"),
                }
            }
            Ok(None) | Err(ReadError::Truncated) | Err(ReadError::Io(_)) => break,
            Err(ReadError::Protocol(e)) => panic!("receiver sent a bad frame: {e}"),
        }
    }
}

/// The only entries `dir` may hold are named by `ok`.
fn assert_only(dir: &Path, ok: impl Fn(&str) -> bool) {
    for e in std::fs::read_dir(dir).expect("temp dir").flatten() {
        let n = e.file_name();
        assert!(
            ok(&n.to_string_lossy()),
            "the receiver wrote {:?} outside its destination",
            e.path()
        );
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&flags, mut rest)) = data.split_first() else {
        return;
    };
    let block = BLOCKS[usize::from(flags & 3)];
    let fixup = flags & 4 == 0;
    let window = u64::from(block) * WINDOW_BLOCKS[usize::from(flags >> 5 & 3)];
    let start = Control::StreamStart {
        streams: STREAMS[usize::from(flags >> 3 & 3)],
        block_size: block,
        window,
        chain: Default::default(),
    };

    static N: AtomicU64 = AtomicU64::new(0);
    let cases = cases();
    let dir = cases.join(N.fetch_add(1, Ordering::Relaxed).to_string());
    std::fs::create_dir_all(&dir).expect("case dir");
    let dest = dir.join("out");
    let out = Output::open(&PipeTo::File(dest.clone()), true).expect("output");

    let (tx, rx) = crossbeam_channel::unbounded();
    let opts = PipeRecvOptions {
        window,
        progress: false,
        timeout: Duration::from_millis(100),
        relay: false,
        outcome_key: Some([7; 32]),
        first: None,
    };
    let receiver = std::thread::spawn(move || receive_pipe(out, KEY, rx, opts));
    let mut drains = Vec::new();
    WRITTEN.store(0, Ordering::Release);
    let mut ctl = ControlConn::open(&tx, &start);
    let mut dat: Option<(Conn, Sealer)> = None;
    // Blocks sent with a valid hash, by offset, and the next honest block's offset.
    let mut sent: BTreeMap<u64, Vec<u8>> = BTreeMap::new();
    let mut next = 0u64;
    // Whether a StreamEnd went out (only then is there an end worth waiting for).
    let mut ended = false;

    while rest.len() >= 3 {
        let kind = rest[0] % 8;
        let len = usize::from(u16::from_le_bytes([rest[1], rest[2]])).min(rest.len() - 3);
        let payload = &rest[3..3 + len];
        rest = &rest[3 + len..];
        match kind {
            0 => {
                let Some(c) = &mut ctl else { continue };
                match Control::decode(payload) {
                    _ if payload.is_empty() && fixup => {
                        ended = true;
                        // The honest end of the honest blocks sent so far.
                        let digest = digest_of(&sent, next).unwrap_or_default();
                        c.send_msg(&Control::StreamEnd { len: next, digest });
                    }
                    Ok(Control::StreamEnd { len, digest }) if fixup => {
                        ended = true;
                        let digest = digest_of(&sent, len).unwrap_or(digest);
                        c.send_msg(&Control::StreamEnd { len, digest });
                    }
                    _ => {
                        let mut buf = Vec::new();
                        c.sealer.control(payload, &mut buf);
                        let _ = c.conn.write_all(&buf);
                    }
                }
            }
            3 => {
                if let Some(c) = &mut ctl {
                    let _ = c.conn.write_all(payload);
                }
            }
            5 => {
                if let Some((mut c, _)) = dat.take() {
                    let _ = c.shutdown_write();
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
                if dat.is_none() {
                    let (ours, theirs) = Conn::pair().expect("pair");
                    let _ = ours.set_write_timeout(Some(Duration::from_secs(5)));
                    if tx.send((theirs, Role::Data)).is_err() {
                        continue;
                    }
                    let s = sealer(&ours);
                    dat = Some((ours, s));
                }
                let Some((conn, sealer)) = &mut dat else {
                    continue;
                };
                let mut buf = Vec::new();
                match kind {
                    1 | 2 | 7 => {
                        let (p, fk) = match kind {
                            1 => {
                                let mut p = payload.to_vec();
                                if fixup {
                                    if let Some((o, raw)) = fix_hash(&mut p) {
                                        sent.insert(o, raw);
                                    }
                                }
                                (p, FrameKind::Data)
                            }
                            2 => (payload.to_vec(), FrameKind::End),
                            _ => {
                                let Some((p, raw)) = honest_block(payload, next, block) else {
                                    continue;
                                };
                                // As an honest sender: only within the receiver's window.
                                let until = std::time::Instant::now() + Duration::from_millis(500);
                                while next + raw.len() as u64
                                    > WRITTEN.load(Ordering::Acquire) + window
                                    && !receiver.is_finished()
                                    && std::time::Instant::now() < until
                                {
                                    std::thread::sleep(Duration::from_micros(200));
                                }
                                sent.insert(next, raw.clone());
                                next += raw.len() as u64;
                                (p, FrameKind::Data)
                            }
                        };
                        buf.extend_from_slice(&sealer.header(fk, p.len()));
                        buf.extend_from_slice(&p);
                    }
                    4 => buf.extend_from_slice(payload),
                    _ => sealer.control(payload, &mut buf),
                }
                let _ = conn.write_all(&buf);
            }
        }
    }

    // An honest sender keeps its connections until the receiver is done: give it a
    // moment to finish what it was told before the connections close.
    let deadline = std::time::Instant::now() + Duration::from_millis(500);
    while ended && !receiver.is_finished() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    drop(tx);
    if let Some((mut c, _)) = dat.take() {
        let _ = c.shutdown_write();
    }
    if let Some(c) = ctl.take() {
        drains.push(c.close());
    }
    let result = receiver.join().expect("receive_pipe must not panic");
    for d in drains {
        if let Err(p) = d.join() {
            std::panic::resume_unwind(p);
        }
    }
    if std::env::var_os("HAUL_FUZZ_DEBUG").is_some() {
        eprintln!("receive_pipe -> {:?}", result.as_ref().map(|r| r.bytes));
    }
    if let Ok(report) = result {
        let written = std::fs::read(&dest).expect("a delivered stream's file exists");
        assert_eq!(written.len() as u64, report.bytes, "length");
        assert_eq!(
            *blake3::hash(&written).as_bytes(),
            report.digest,
            "the reported digest is not the BLAKE3 of what was written"
        );
    }
    let root = cases.parent().expect("root");
    assert_only(root, |n| n == "x");
    assert_only(cases, |n| n.bytes().all(|b| b.is_ascii_digit()));
    let _ = std::fs::remove_dir_all(&dir);
});
