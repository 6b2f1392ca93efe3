//! The resume journal reader. `store::journal` is private, so this goes through the
//! closest public path: a `Store` whose destination holds an earlier run's partial file
//! and a journal built from the input, then `Store::apply_entries` for that file, which
//! reads the journal (`journal::read`) and asks for what it does not cover.
//!
//! The journal's checks are BLAKE3 values a fuzzer cannot guess, so the input describes
//! the journal and this target writes it in the documented layout (see the module docs
//! of src/store/journal.rs): per record a flag byte chooses a good or a corrupt check, and
//! flags in the first byte a mismatching header (another source version, another partial
//! file's inode, another key); trailing bytes are a torn tail.
//!
//! The header is keyed (protocol v2 era) with the receiver's private journal key, which the
//! store makes itself in its per-user state directory (`/var/lib/haul` for root, see
//! src/store/key.rs). At start-up the target lets a store make it (one transfer of a
//! journaled file) and reads it from there, so it can write journals the store accepts.
#![no_main]

use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use haul::protocol::{Entry, EntryKind, SyncOptions, Want, WantKind};
use haul::store::{Store, PARTIAL_PREFIX};
use libfuzzer_sys::fuzz_target;

const NAME: &[u8] = b"f";
const BLOCK: u64 = 4096;

fn base() -> &'static PathBuf {
    static BASE: OnceLock<PathBuf> = OnceLock::new();
    BASE.get_or_init(|| {
        let p = std::env::temp_dir().join(format!("haul-fuzz-journal-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).expect("temp dir");
        p
    })
}

fn side_name(suffix: &str) -> String {
    let h = blake3::hash(NAME);
    let hex: String = h.as_bytes()[..8]
        .iter()
        .map(|x| format!("{x:02x}"))
        .collect();
    format!("{PARTIAL_PREFIX}{hex}.{suffix}")
}

/// The store's state directory, as src/store/key.rs finds it.
fn state_dir() -> PathBuf {
    if unsafe { libc::geteuid() } == 0 {
        return PathBuf::from("/var/lib/haul");
    }
    let abs = |v: std::ffi::OsString| Some(PathBuf::from(v)).filter(|p| p.is_absolute());
    std::env::var_os("XDG_STATE_HOME")
        .and_then(abs)
        .or_else(|| {
            std::env::var_os("HOME")
                .and_then(abs)
                .map(|h| h.join(".local/state"))
        })
        .expect("XDG_STATE_HOME or HOME")
        .join("haul")
}

/// The store's journal key: one transfer of a journaled file makes it if it is missing.
fn journal_key() -> &'static [u8; 32] {
    static KEY: OnceLock<[u8; 32]> = OnceLock::new();
    KEY.get_or_init(|| {
        let file = state_dir().join("journal.key");
        if !file.exists() {
            let dir = base().join("keygen");
            let store = Store::open(&dir).expect("store");
            store.configure(BLOCK, SyncOptions::default(), [7u8; 32]);
            let size = 4 * BLOCK;
            let _ = store.apply_entries(vec![entry(size, size)]);
            drop(store);
            let _ = std::fs::remove_dir_all(&dir);
        }
        let k = std::fs::read(&file).expect("the store made its journal key");
        k.try_into().expect("a 32-byte key")
    })
}

fn entry(size: u64, data_bytes: u64) -> Entry {
    Entry {
        id: 1,
        path: NAME.to_vec(),
        kind: EntryKind::File { size, data_bytes },
        mode: 0o644,
        mtime_sec: SEC,
        mtime_nsec: NSEC,
        uid: 0,
        gid: 0,
        xattrs: None,
        checksum: None,
    }
}

const SEC: i64 = 1_700_000_000;
const NSEC: u32 = 5;

/// The 64-byte keyed header (layout in src/store/journal.rs).
fn header(key: &[u8; 32], inode: u64, size: u64, sec: i64, data_bytes: u64) -> [u8; 64] {
    let mut h = [0u8; 64];
    h[0..8].copy_from_slice(b"HAULJNL2");
    h[8..16].copy_from_slice(&size.to_le_bytes());
    h[16..24].copy_from_slice(&sec.to_le_bytes());
    h[24..28].copy_from_slice(&NSEC.to_le_bytes());
    h[32..40].copy_from_slice(&data_bytes.to_le_bytes());
    h[40..48].copy_from_slice(&inode.to_le_bytes());
    let mut mac = blake3::Hasher::new_keyed(key);
    mac.update(&h[..48]);
    mac.update(NAME);
    h[48..64].copy_from_slice(&mac.finalize().as_bytes()[..16]);
    h
}

fn record(offset: u64, len: u32, corrupt: bool) -> [u8; 16] {
    let mut r = [0u8; 16];
    r[..8].copy_from_slice(&offset.to_le_bytes());
    r[8..12].copy_from_slice(&len.to_le_bytes());
    let c = blake3::hash(&r[..12]);
    r[12..16].copy_from_slice(&c.as_bytes()[..4]);
    if corrupt {
        r[12] ^= 1;
    }
    r
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 5 {
        return;
    }
    let flags = data[0];
    // Up to 1 MiB plus one block: always larger than the block, so the file is journaled.
    let size =
        BLOCK + 1 + u64::from(u32::from_le_bytes([data[1], data[2], data[3], data[4]]) & 0xf_ffff);
    let data_bytes = if flags & 1 != 0 { size } else { size - 1 };
    let key = *journal_key();

    static N: AtomicU64 = AtomicU64::new(0);
    let dir = base().join(N.fetch_add(1, Ordering::Relaxed).to_string());
    std::fs::create_dir_all(&dir).expect("case dir");
    let partial = std::fs::File::create(dir.join(side_name("part"))).expect("partial");
    let partial_len = if flags & 4 != 0 { size - 1 } else { size };
    partial.set_len(partial_len).expect("set_len");
    let inode = partial.metadata().expect("stat").ino();
    drop(partial);

    let sec = if flags & 2 != 0 { SEC + 1 } else { SEC };
    let inode = if flags & 8 != 0 { inode ^ 1 } else { inode };
    let key = if flags & 16 != 0 { [0u8; 32] } else { key };
    let mut journal = Vec::new();
    journal.extend_from_slice(&header(&key, inode, size, sec, data_bytes));
    let mut rest = &data[5..];
    while rest.len() >= 13 {
        let offset = u64::from_le_bytes(rest[..8].try_into().unwrap());
        let len = u32::from_le_bytes(rest[8..12].try_into().unwrap());
        // Small offsets/lengths most of the time, so records land inside the file.
        let (offset, len) = if rest[12] & 2 != 0 {
            (offset, len)
        } else {
            (offset % (size + 2), len % 70_000)
        };
        journal.extend_from_slice(&record(offset, len, rest[12] & 1 != 0));
        rest = &rest[13..];
    }
    journal.extend_from_slice(rest);
    std::fs::write(dir.join(side_name("journal")), &journal).expect("journal");

    let store = Store::open(&dir).expect("store");
    store.configure(BLOCK, SyncOptions::default(), [7u8; 32]);
    let entry = entry(size, data_bytes);
    let want = store
        .apply_entries(vec![entry])
        .expect("a fresh store accepts one file");
    if std::env::var_os("HAUL_FUZZ_DEBUG").is_some() {
        eprintln!("journal {} bytes -> {want:?}", journal.len());
    }
    if flags & (2 | 4 | 8 | 16) == 0 {
        // Header exactly as the store writes it, partial file of the right size: resumed
        // (asking for the ranges the journal does not cover, or nothing if it covers all).
        assert!(
            matches!(
                want.as_slice(),
                [] | [Want {
                    what: WantKind::Ranges(_),
                    ..
                }]
            ),
            "a journal with the store's own header was not resumed: {want:?}"
        );
    }
    for w in &want {
        assert_eq!(w.id, 1);
        if let WantKind::Ranges(r) = &w.what {
            let mut prev_end = 0u64;
            for (i, &(a, b)) in r.iter().enumerate() {
                assert!(a < b, "empty or inverted range {a}..{b}");
                assert!(b <= size, "range {a}..{b} beyond size {size}");
                assert!(
                    i == 0 || a > prev_end,
                    "ranges not sorted and disjoint: {r:?}"
                );
                prev_end = b;
            }
        }
    }
    // The journal may only shrink to its intact prefix, never grow past what was written.
    let jlen = std::fs::metadata(dir.join(side_name("journal")))
        .map(|m| m.len())
        .unwrap_or(0);
    assert!(jlen <= journal.len() as u64 || jlen == 64);
    assert!(jlen >= 64 || jlen == 0);
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
});
