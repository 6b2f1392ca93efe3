//! Writes the seed corpus: small valid inputs for each target, made with the library's own
//! encoders, plus a few edge cases. Run from the repository root:
//!
//!     cargo run --manifest-path fuzz/Cargo.toml --bin gen-corpus
//!
//! Output is deterministic (fixed keys and secrets), so re-running changes nothing unless
//! the wire format did.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use haul::codec::{unit_hash, Compression, Encoder};
use haul::protocol::{
    encode_data_header, encode_frame, Codec, Control, Entry, EntryKind, FrameKind, Segment,
    Summary, SyncOptions, Want, WantKind,
};
use haul::transport::{Secret, Ticket};

/// The key the receive target uses for unit hashes.
const KEY: [u8; 32] = [0x5a; 32];

fn out_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus")
}

fn put(target: &str, name: &str, bytes: &[u8]) {
    let dir = out_dir().join(target);
    std::fs::create_dir_all(&dir).expect("corpus dir");
    std::fs::write(dir.join(name), bytes).expect("corpus file");
}

fn entry(id: u64, path: &str, kind: EntryKind) -> Entry {
    let mode = if matches!(kind, EntryKind::Dir) {
        0o755
    } else {
        0o644
    };
    Entry {
        id,
        path: path.as_bytes().to_vec(),
        kind,
        mode,
        mtime_sec: 1_700_000_000,
        mtime_nsec: 123,
        uid: 1000,
        gid: 1000,
    }
}

fn messages() -> Vec<(&'static str, Control)> {
    let file = |id, p: &str, size| {
        entry(
            id,
            p,
            EntryKind::File {
                size,
                data_bytes: size,
            },
        )
    };
    vec![
        (
            "start",
            Control::Start {
                streams: 4,
                block_size: 4 << 20,
                options: SyncOptions {
                    checksum: true,
                    inplace: false,
                    delete: true,
                },
            },
        ),
        (
            "entries",
            Control::Entries(vec![
                entry(1, "dir", EntryKind::Dir),
                file(2, "dir/a.bin", 5000),
                entry(
                    3,
                    "dir/link",
                    EntryKind::Symlink {
                        target: b"a.bin".to_vec(),
                    },
                ),
                entry(
                    4,
                    "dir/hard",
                    EntryKind::Hardlink {
                        target: b"dir/a.bin".to_vec(),
                    },
                ),
                entry(5, "fifo", EntryKind::Fifo),
                entry(
                    6,
                    "dev",
                    EntryKind::Device {
                        block: true,
                        rdev: 0x0801,
                    },
                ),
                entry(
                    7,
                    "sparse",
                    EntryKind::File {
                        size: 1 << 30,
                        data_bytes: 4096,
                    },
                ),
            ]),
        ),
        (
            "need",
            Control::Need(vec![
                Want {
                    id: 2,
                    what: WantKind::All,
                },
                Want {
                    id: 7,
                    what: WantKind::Ranges(vec![(0, 4096), (8192, 12288)]),
                },
                Want {
                    id: 9,
                    what: WantKind::Delta {
                        chunk: 16384,
                        hashes: vec![[1; 16], [2; 16]],
                    },
                },
            ]),
        ),
        ("forget", Control::Forget(vec![3, 4, u64::MAX])),
        (
            "finish",
            Control::Finish {
                failed: vec![5],
                units: 12,
            },
        ),
        (
            "done",
            Control::Done(Summary {
                files: 3,
                other: 2,
                bytes: 5000,
                skipped: 1,
                ..Summary::default()
            }),
        ),
        (
            "error",
            Control::Error {
                code: 3,
                message: "disk full".into(),
            },
        ),
    ]
}

/// One data frame for `raw`, compressed with `mode` when that pays.
fn data_frame(mode: Compression, segs: &[Segment], raw: &[u8]) -> Vec<u8> {
    let mut cbuf = Vec::new();
    let codec = Encoder::new(mode).encode(raw, &mut cbuf);
    let body: &[u8] = if codec == Codec::Raw { raw } else { &cbuf };
    let mut out = Vec::new();
    encode_data_header(
        &mut out,
        codec,
        raw.len() as u32,
        &unit_hash(&KEY, raw),
        segs,
        body.len(),
    );
    out.extend_from_slice(body);
    out
}

fn seg(file: u64, offset: u64, len: u32) -> Segment {
    Segment {
        file,
        offset,
        len,
        keep: false,
    }
}

fn frames() {
    for (name, m) in messages() {
        let mut out = Vec::new();
        m.encode(&mut out).expect("encodes");
        put("frame", &format!("control-{name}"), &out);
    }
    let text = b"hello, haul! ".repeat(40);
    put(
        "frame",
        "data-raw",
        &data_frame(Compression::None, &[seg(2, 0, 11)], b"hello world"),
    );
    put(
        "frame",
        "data-lz4",
        &data_frame(Compression::Lz4, &[seg(2, 0, text.len() as u32)], &text),
    );
    put(
        "frame",
        "data-zstd",
        &data_frame(Compression::Zstd(3), &[seg(2, 0, text.len() as u32)], &text),
    );
    let keep = Segment {
        file: 3,
        offset: 100,
        len: 50,
        keep: true,
    };
    put(
        "frame",
        "data-segments",
        &data_frame(
            Compression::None,
            &[seg(2, 4090, 6), keep, seg(4, 0, 10)],
            b"abcdefghijklmnop",
        ),
    );
    let mut stream = data_frame(Compression::None, &[seg(1, 0, 3)], b"abc");
    encode_frame(&mut stream, FrameKind::End, &[]);
    // FrameReader target: first byte 3 = three read sizes (1 byte, a tick, 5 bytes).
    let mut chunked = vec![3u8, 1, 0, 5];
    chunked.extend_from_slice(&stream);
    put("frame", "stream-chunked", &chunked);
    put("frame", "stream", &stream);
    put("frame", "edge-empty", b"");
    put("frame", "edge-header-only", &[2, 0, 0, 0, 0, 0, 0, 0]);
    put("frame", "edge-reserved", &[1, 1, 0, 0, 0, 0, 0, 0]);
    put(
        "frame",
        "edge-too-long",
        &[2, 0, 0, 0, 0xff, 0xff, 0xff, 0xff],
    );
    put("frame", "edge-truncated", &[1, 0, 0, 0, 9, 0, 0, 0, 1, 2]);
}

fn controls() {
    for (name, m) in messages() {
        let mut out = Vec::new();
        m.encode(&mut out).expect("encodes");
        put("control", name, &out[8..]);
    }
    put("control", "edge-empty", b"");
    put(
        "control",
        "edge-huge-vec",
        &[1, 0xff, 0xff, 0xff, 0xff, 0x0f],
    );
}

fn tickets() {
    let addrs: Vec<SocketAddr> = vec![
        "192.0.2.7:7100".parse().unwrap(),
        "[2001:db8::1]:7100".parse().unwrap(),
    ];
    let mk = |addrs: Vec<SocketAddr>| Ticket {
        addrs,
        fingerprint: [0xab; 32],
        secret: Secret::from_bytes([0x11; 32]),
    };
    let t2 = mk(addrs.clone()).encode();
    put("ticket", "v4-v6", t2.as_bytes());
    put("ticket", "v4", mk(addrs[..1].to_vec()).encode().as_bytes());
    put(
        "ticket",
        "upper-spaces",
        format!("  {}\n", t2.to_ascii_uppercase()).as_bytes(),
    );
    // The binary body (what the target wraps with a checksum itself).
    let bin = data_encoding::BASE32_NOPAD_NOCASE
        .decode(&t2.as_bytes()[6..])
        .expect("base32");
    put("ticket", "body-v4-v6", &bin[..bin.len() - 4]);
    put("ticket", "edge-prefix", b"haul1-");
    put("ticket", "edge-truncated", &t2.as_bytes()[..t2.len() - 3]);
}

fn paths() {
    for (name, s) in [
        ("rel", &b"dir/sub/file.txt"[..]),
        ("join", b"dir/sub\0name"),
        ("non-utf8", b"caf\xe9/x"),
        ("dotdot", b"a/../b"),
        ("abs", b"/etc/passwd"),
        ("remote", b"user@host:/data/x"),
        ("remote-v6", b"[fe80::1%eth0]:dir"),
        ("daemon", b"host::module"),
        ("local-colon", b"./a:b"),
        ("rsh", b"ssh -p 2222 -o 'Opt=a b' \"x\\\"y\" z\\ w"),
    ] {
        put("path", name, s);
    }
}

fn journals() {
    // flags, size (u32 LE, plus one block), then 13-byte records: offset, len, flags.
    let rec = |off: u64, len: u32, fl: u8| {
        let mut r = off.to_le_bytes().to_vec();
        r.extend_from_slice(&len.to_le_bytes());
        r.push(fl);
        r
    };
    let mut good = vec![1u8, 0, 0, 1, 0];
    good.extend(rec(0, 4096, 0));
    good.extend(rec(8192, 4096, 0));
    good.extend(rec(4096, 100, 0));
    put("journal", "resume", &good);
    let mut torn = good.clone();
    torn.extend(rec(20000, 10, 1));
    torn.extend([1, 2, 3]);
    put("journal", "corrupt-tail", &torn);
    let mut past = vec![0u8, 0, 0, 1, 0];
    past.extend(rec(u64::MAX - 5, 10, 2));
    put("journal", "overflow", &past);
    put("journal", "header-mismatch", &[2u8, 0, 0, 1, 0]);
}

fn receives() {
    let data = b"0123456789abcdef".repeat(300); // 4800 bytes: two 4096-byte blocks
    let text = b"compressible text ".repeat(100);
    let mut ctl1 = Vec::new();
    Control::Entries(vec![
        entry(1, "d", EntryKind::Dir),
        entry(
            2,
            "d/big",
            EntryKind::File {
                size: data.len() as u64,
                data_bytes: data.len() as u64,
            },
        ),
        entry(
            3,
            "small",
            EntryKind::File {
                size: text.len() as u64,
                data_bytes: text.len() as u64,
            },
        ),
        entry(
            4,
            "d/ln",
            EntryKind::Symlink {
                target: b"big".to_vec(),
            },
        ),
        entry(
            5,
            "hl",
            EntryKind::Hardlink {
                target: b"small".to_vec(),
            },
        ),
    ])
    .encode(&mut ctl1)
    .unwrap();
    let mut dat = data_frame(Compression::None, &[seg(2, 0, 4096)], &data[..4096]);
    dat.extend(data_frame(
        Compression::Lz4,
        &[seg(2, 4096, 704)],
        &data[4096..],
    ));
    dat.extend(data_frame(
        Compression::Zstd(1),
        &[seg(3, 0, text.len() as u32)],
        &text,
    ));
    encode_frame(&mut dat, FrameKind::End, &[]);
    let mut ctl2 = Vec::new();
    Control::Finish {
        failed: vec![],
        units: 3,
    }
    .encode(&mut ctl2)
    .unwrap();
    let input = |c1: &[u8], d: &[u8], c2: &[u8]| {
        let mut v = (c1.len() as u16).to_le_bytes().to_vec();
        v.extend_from_slice(&(d.len() as u16).to_le_bytes());
        v.extend_from_slice(c1);
        v.extend_from_slice(d);
        v.extend_from_slice(c2);
        v
    };
    put("receive", "copy", &input(&ctl1, &dat, &ctl2));
    let mut forget = Vec::new();
    Control::Forget(vec![3]).encode(&mut forget).unwrap();
    forget.extend_from_slice(&ctl2);
    put(
        "receive",
        "forget",
        &input(&ctl1, &dat[..dat.len() / 2], &forget),
    );
    put("receive", "no-data", &input(&ctl1, &[], &ctl2));
    put("receive", "empty", &input(&[], &[], &[]));
}

fn main() {
    let _ = std::fs::remove_dir_all(out_dir());
    frames();
    controls();
    tickets();
    paths();
    journals();
    receives();
    println!("wrote {}", out_dir().display());
}
