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
    encode_data_header, hashed_parts, set_hash, Chain, Codec, Control, Entry, EntryKind, FrameKind,
    Hop, Outcome, Replica, Rules, Sealer, Segment, Summary, SyncOptions, Want, WantKind, Xattr,
    Xattrs,
};
use haul::transport::{Secret, Ticket};

/// The frame target's link key (frame tags and control MACs).
const LINK: [u8; 32] = [0x4c; 32];
/// The frame target's block key (data unit hashes).
const BLOCK_KEY: [u8; 32] = [0x6b; 32];

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
        xattrs: None,
        checksum: None,
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
                    rules: Rules {
                        update: true,
                        ..Rules::default()
                    },
                    ..SyncOptions::default()
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
            "entries-xattrs",
            Control::Entries(vec![Entry {
                xattrs: Some(
                    Xattrs::new(vec![
                        Xattr {
                            name: b"user.mime_type".to_vec(),
                            value: b"text/plain".to_vec(),
                        },
                        Xattr {
                            name: b"system.posix_acl_access".to_vec(),
                            value: vec![2, 0, 0, 0, 1, 0, 6, 0, 255, 255, 255, 255],
                        },
                    ])
                    .expect("valid attributes"),
                ),
                ..file(8, "tagged", 10)
            }]),
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
        ("arrived", Control::Arrived(vec![0, 9, u64::MAX])),
        (
            "finish",
            Control::Finish {
                failed: vec![5],
                units: 12,
                unlisted: 1,
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
        (
            "chain",
            Control::Chain(Chain {
                hops: vec![Hop {
                    label: "192.0.2.7:7100".into(),
                    ticket: "haul1-abc".into(),
                }],
                encrypt: true,
                nonce: Some([0x5a; 32]),
            }),
        ),
        (
            "chain-last",
            Control::Chain(Chain {
                hops: Vec::new(),
                encrypt: true,
                nonce: Some([0x5b; 32]),
            }),
        ),
        ("proof", Control::Proof([0x3c; 32])),
        (
            "stream-start-chain",
            Control::StreamStart {
                streams: 4,
                block_size: 1 << 20,
                window: 64 << 20,
                chain: Chain {
                    hops: vec![Hop {
                        label: "192.0.2.8:7100".into(),
                        ticket: "haul1-def".into(),
                    }],
                    encrypt: true,
                    nonce: Some([0x5c; 32]),
                },
            },
        ),
        (
            "replicas",
            Control::Replicas(vec![
                Replica {
                    host: "192.0.2.7:7100".into(),
                    outcome: Outcome::Done(Summary::default()),
                    proof: Some([0x3d; 32]),
                },
                Replica {
                    host: "192.0.2.8:7100".into(),
                    outcome: Outcome::Failed {
                        code: 5,
                        message: "gone".into(),
                    },
                    proof: None,
                },
            ]),
        ),
        ("probe", Control::Probe { streams: 4 }),
        (
            "probe-ready",
            Control::ProbeReady {
                write_rate: Some(400 << 20),
                file_micros: Some(1500),
            },
        ),
        (
            "probed",
            Control::Probed {
                received: 3 << 30,
                micros: 2_950_000,
            },
        ),
    ]
}

/// One data payload for `raw`, compressed with `mode` when that pays, hashed as v2 does.
fn data_payload(mode: Compression, segs: &[Segment], raw: &[u8]) -> Vec<u8> {
    data_payload_keyed(&BLOCK_KEY, mode, segs, raw)
}

/// [`data_payload`] with the unit hash keyed by `key`.
fn data_payload_keyed(key: &[u8; 32], mode: Compression, segs: &[Segment], raw: &[u8]) -> Vec<u8> {
    let mut cbuf = Vec::new();
    let (codec, packed) = Encoder::new(mode, 1).encode(raw, &mut cbuf);
    let body: &[u8] = if codec == Codec::Raw { raw } else { packed };
    let mut out = Vec::new();
    encode_data_header(&mut out, codec, raw.len() as u32, segs);
    let hash = unit_hash(key, hashed_parts(&out), raw);
    set_hash(&mut out, &hash);
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

/// The frame target's record form: `kind u8 (0 control, 1 data, 2 end), len u16, payload`.
fn record(kind: u8, payload: &[u8]) -> Vec<u8> {
    let mut r = vec![kind];
    r.extend_from_slice(&(payload.len() as u16).to_le_bytes());
    r.extend_from_slice(payload);
    r
}

/// A control message's postcard bytes (the payload without the MAC).
fn control_payload(m: &Control) -> Vec<u8> {
    let mut out = Vec::new();
    m.encode(&mut Sealer::new([0; 32], true), &mut out)
        .expect("encodes");
    out[haul::protocol::FRAME_HEADER_LEN..out.len() - haul::protocol::CONTROL_MAC_LEN].to_vec()
}

fn frames() {
    // Records (sealed by the target) for each control message, one input each.
    for (name, m) in messages() {
        let mut input = vec![0u8];
        input.extend(record(0, &control_payload(&m)));
        put("frame", &format!("control-{name}"), &input);
    }
    let text = b"hello, haul! ".repeat(40);
    let keep = Segment {
        file: 3,
        offset: 100,
        len: 50,
        keep: true,
    };
    let units = [
        (
            "raw",
            data_payload(Compression::None, &[seg(2, 0, 11)], b"hello world"),
        ),
        (
            "lz4",
            data_payload(Compression::Lz4, &[seg(2, 0, text.len() as u32)], &text),
        ),
        (
            "zstd",
            data_payload(Compression::Zstd(3), &[seg(2, 0, text.len() as u32)], &text),
        ),
        (
            "segments",
            data_payload(
                Compression::None,
                &[seg(2, 4090, 6), keep, seg(4, 0, 10)],
                b"abcdefghijklmnop",
            ),
        ),
    ];
    for (name, p) in &units {
        let mut input = vec![0u8];
        input.extend(record(1, p));
        put("frame", &format!("data-{name}"), &input);
    }
    // A data stream: units, then End; read in chunks of 1 byte, a tick, 5 bytes.
    let mut recs = Vec::new();
    for (_, p) in &units {
        recs.extend(record(1, p));
    }
    recs.extend(record(2, &[]));
    let mut chunked = vec![3u8, 1, 0, 5];
    chunked.extend_from_slice(&recs);
    put("frame", "records-chunked", &chunked);
    // The same as one honestly sealed byte stream (part 1 of the target reads it as is).
    let mut sealer = Sealer::new(LINK, true);
    let mut stream = vec![0u8];
    control_start(&mut sealer, &mut stream);
    for (_, p) in &units {
        stream.extend_from_slice(&sealer.header(FrameKind::Data, p.len()));
        stream.extend_from_slice(p);
    }
    stream.extend_from_slice(&sealer.header(FrameKind::End, 0));
    put("frame", "sealed-stream", &stream);
    // The flip flag (0x10): one bit of the sealed records altered.
    let mut flipped = vec![0x10u8 | (3 << 5), 7];
    flipped.extend_from_slice(&recs);
    put("frame", "records-flipped", &flipped);
    put("frame", "edge-empty", b"");
    put("frame", "edge-end-with-payload", &[0, 2, 3, 0, 1, 2, 3]);
    put("frame", "edge-short-record", &[0, 1, 9, 0, 1, 2]);
}

fn control_start(sealer: &mut Sealer, out: &mut Vec<u8>) {
    Control::Start {
        streams: 1,
        block_size: 4096,
        options: SyncOptions::default(),
    }
    .encode(sealer, out)
    .expect("Start encodes");
}

fn controls() {
    for (name, m) in messages() {
        put("control", name, &control_payload(&m));
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
    // What a chain fan-out's relay is given for the hop after it.
    put(
        "ticket",
        "hop",
        mk(addrs[..1].to_vec()).for_hop().encode().as_bytes(),
    );
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
    let mut inode = good.clone();
    inode[0] |= 8;
    put("journal", "other-inode", &inode);
    let mut key = good.clone();
    key[0] |= 16;
    put("journal", "other-key", &key);
}

/// The receive target's block key.
const RECV_KEY: [u8; 32] = [0x5a; 32];
/// The receive target's old files' mtime (flag 0x40).
const OLD_MTIME: i64 = 1_600_000_000;

/// The receive target's records: control message, data unit, End, new data connection,
/// new control connection, raw bytes on the control connection.
fn rc(m: &Control) -> Vec<u8> {
    record(0, &control_payload(m))
}
fn rd(segs: &[Segment], raw: &[u8], mode: Compression) -> Vec<u8> {
    record(1, &data_payload_keyed(&RECV_KEY, mode, segs, raw))
}
fn r_end() -> Vec<u8> {
    record(2, &[])
}

fn finish(units: u64) -> Vec<u8> {
    rc(&Control::Finish {
        failed: vec![],
        units,
        unlisted: 0,
    })
}

fn file(id: u64, path: &str, size: u64) -> Entry {
    entry(
        id,
        path,
        EntryKind::File {
            size,
            data_bytes: size,
        },
    )
}

fn receive_input(flags: u8, records: &[Vec<u8>]) -> Vec<u8> {
    let mut out = vec![flags];
    for r in records {
        out.extend_from_slice(r);
    }
    out
}

fn receives() {
    let put_r = |name: &str, flags: u8, recs: &[Vec<u8>]| {
        put("receive", name, &receive_input(flags, recs));
    };
    let text = b"hello, haul! ".repeat(40);
    let small = b"hello world";
    // A few small files, a symlink, a hardlink, an empty file; one raw and one lz4 unit.
    let manifest = Control::Entries(vec![
        entry(1, "d", EntryKind::Dir),
        file(2, "d/a.txt", small.len() as u64),
        file(3, "b.txt", text.len() as u64),
        entry(
            4,
            "d/link",
            EntryKind::Symlink {
                target: b"a.txt".to_vec(),
            },
        ),
        entry(
            5,
            "hard",
            EntryKind::Hardlink {
                target: b"d/a.txt".to_vec(),
            },
        ),
        file(6, "empty", 0),
    ]);
    let files = [
        rc(&manifest),
        rd(&[seg(2, 0, small.len() as u32)], small, Compression::None),
        rd(&[seg(3, 0, text.len() as u32)], &text, Compression::Lz4),
        r_end(),
        finish(2),
    ];
    put_r("files", 0, &files);
    // The same with 4 streams declared and --checksum --delete into old files.
    put_r("files-old-delete", 0x80 | 0x40 | 0x08 | 0x02, &files);
    // One empty file.
    put_r(
        "empty-file",
        0,
        &[rc(&Control::Entries(vec![file(1, "e", 0)])), finish(0)],
    );
    // Small files packed in one zstd unit (many segments).
    let pack: Vec<u8> = b"aaaa".repeat(30);
    put_r(
        "packed",
        0,
        &[
            rc(&Control::Entries(vec![
                file(1, "p1", 40),
                file(2, "p2", 50),
                file(3, "p3", 30),
            ])),
            rd(
                &[seg(1, 0, 40), seg(2, 0, 50), seg(3, 0, 30)],
                &pack,
                Compression::Zstd(3),
            ),
            r_end(),
            finish(1),
        ],
    );
    // A file of three 4 KiB blocks, the last block on a second data connection.
    let big: Vec<u8> = (0..10_000u32).map(|i| (i % 97) as u8).collect();
    put_r(
        "blocks-redial",
        0,
        &[
            rc(&Control::Entries(vec![file(1, "big", 10_000)])),
            rd(&[seg(1, 0, 4096)], &big[..4096], Compression::Zstd(1)),
            rd(&[seg(1, 4096, 4096)], &big[4096..8192], Compression::None),
            record(5, &[]),
            rd(&[seg(1, 8192, 1808)], &big[8192..], Compression::Lz4),
            r_end(),
            finish(3),
        ],
    );
    // Delta (16 KiB blocks, flag 0x10) against the old 40000-byte file (flag 0x40): the
    // first and last pieces kept, the middle one sent; then the same --inplace.
    let keep = |offset, len| Segment {
        file: 1,
        offset,
        len,
        keep: true,
    };
    let changed = vec![0xeeu8; 16384];
    let delta = [
        rc(&Control::Entries(vec![file(1, "old.bin", 40_000)])),
        rd(&[keep(0, 16384)], &[], Compression::None),
        rd(&[seg(1, 16384, 16384)], &changed, Compression::Lz4),
        rd(&[keep(32768, 40_000 - 32768)], &[], Compression::None),
        r_end(),
        finish(3),
    ];
    put_r("delta", 0x40 | 0x10, &delta);
    put_r("delta-inplace", 0x40 | 0x10 | 0x04, &delta);
    // Unchanged (same size and mtime as the old file), and --delete removing the rest.
    let mut same = file(1, "old.txt", 9);
    same.mtime_sec = OLD_MTIME;
    same.mtime_nsec = 0;
    put_r(
        "unchanged-delete",
        0x40 | 0x08,
        &[
            rc(&Control::Entries(vec![entry(0, "", EntryKind::Dir), same])),
            finish(0),
        ],
    );
    // Sparse file, a FIFO and a device; a Forget; a Finish before the data, whose
    // answer (Need) comes first, then the data and Finish again.
    put_r(
        "sparse-special-forget",
        0,
        &[
            rc(&Control::Entries(vec![
                entry(
                    1,
                    "sparse",
                    EntryKind::File {
                        size: 100_000,
                        data_bytes: 4096,
                    },
                ),
                entry(2, "fifo", EntryKind::Fifo),
                entry(
                    3,
                    "dev",
                    EntryKind::Device {
                        block: false,
                        rdev: 0x0103,
                    },
                ),
                file(4, "forgotten", 5),
            ])),
            rc(&Control::Forget(vec![4])),
            finish(1),
            rd(&[seg(1, 8192, 4096)], &big[..4096], Compression::None),
            r_end(),
            finish(1),
        ],
    );
    // The control connection breaks (raw bytes fail its tags); a new one replays the
    // Entries (answered from the cache) and the transfer completes.
    let one = Control::Entries(vec![file(1, "f", small.len() as u64)]);
    put_r(
        "control-redial",
        0,
        &[
            rc(&one),
            record(3, b"garbage, not a frame"),
            record(6, &[]),
            rc(&one),
            rd(&[seg(1, 0, small.len() as u32)], small, Compression::None),
            r_end(),
            finish(1),
        ],
    );
    // Failure paths: a unit whose body was altered after hashing (flag 1: no fix-up),
    // an End with a payload, the sender's Error, a control frame on a data stream.
    let mut bad = data_payload_keyed(
        &RECV_KEY,
        Compression::None,
        &[seg(1, 0, small.len() as u32)],
        small,
    );
    let last = bad.len() - 1;
    bad[last] ^= 1;
    put_r(
        "bad-hash",
        1,
        &[rc(&one), record(1, &bad), r_end(), finish(1)],
    );
    put_r(
        "end-with-payload",
        0,
        &[rc(&one), record(2, b"xyz"), finish(1)],
    );
    put_r(
        "sender-error",
        0,
        &[
            rc(&one),
            rc(&Control::Error {
                code: 3,
                message: "cannot read".into(),
            }),
        ],
    );
    put_r(
        "control-on-data",
        0,
        &[
            rc(&one),
            record(7, &control_payload(&Control::Forget(vec![1]))),
        ],
    );
    put_r("edge-empty", 0, &[]);
}

/// The targets whose seeds this program writes (their directories are made afresh); the
/// other targets' seeds (`pipe`, `shard`) are kept as they are in git.
const GENERATED: [&str; 6] = ["frame", "control", "ticket", "path", "journal", "receive"];

fn main() {
    for target in GENERATED {
        let _ = std::fs::remove_dir_all(out_dir().join(target));
    }
    frames();
    controls();
    tickets();
    paths();
    journals();
    receives();
    println!("wrote {}", out_dir().display());
}
