//! The resume journal reader. `store::journal` is private, so this goes through the
//! closest public path: a `Store` whose destination holds an earlier run's partial file
//! and a journal built from the input, then `Store::apply_entries` for that file, which
//! reads the journal (`journal::read`) and asks for what it does not cover.
//!
//! The journal's checks are BLAKE3 values a fuzzer cannot guess, so the input describes
//! the journal and this target writes it in the documented layout (see the module docs
//! of src/store/journal.rs): per record a flag byte chooses a good or a corrupt check, and
//! a flag in the first byte a mismatching header; trailing bytes are a torn tail.
#![no_main]

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use haul::protocol::{Entry, EntryKind, SyncOptions, WantKind};
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

fn header(size: u64, sec: i64, nsec: u32, data_bytes: u64) -> [u8; 48] {
    let mut h = [0u8; 48];
    h[0..8].copy_from_slice(b"HAULJNL1");
    h[8..16].copy_from_slice(&size.to_le_bytes());
    h[16..24].copy_from_slice(&sec.to_le_bytes());
    h[24..28].copy_from_slice(&nsec.to_le_bytes());
    h[32..40].copy_from_slice(&data_bytes.to_le_bytes());
    let c = blake3::hash(&h[..40]);
    h[40..48].copy_from_slice(&c.as_bytes()[..8]);
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
    let (sec, nsec) = (1_700_000_000i64, 5u32);
    let mut journal = Vec::new();
    journal.extend_from_slice(&if flags & 2 != 0 {
        header(size, sec + 1, nsec, data_bytes)
    } else {
        header(size, sec, nsec, data_bytes)
    });
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

    static N: AtomicU64 = AtomicU64::new(0);
    let dir = base().join(N.fetch_add(1, Ordering::Relaxed).to_string());
    std::fs::create_dir_all(&dir).expect("case dir");
    let partial = std::fs::File::create(dir.join(side_name("part"))).expect("partial");
    let partial_len = if flags & 4 != 0 { size - 1 } else { size };
    partial.set_len(partial_len).expect("set_len");
    drop(partial);
    std::fs::write(dir.join(side_name("journal")), &journal).expect("journal");

    let store = Store::open(&dir).expect("store");
    store.configure(BLOCK, SyncOptions::default(), [7u8; 32]);
    let entry = Entry {
        id: 1,
        path: NAME.to_vec(),
        kind: EntryKind::File { size, data_bytes },
        mode: 0o644,
        mtime_sec: sec,
        mtime_nsec: nsec,
        uid: 0,
        gid: 0,
    };
    let want = store
        .apply_entries(vec![entry])
        .expect("a fresh store accepts one file");
    if std::env::var_os("HAUL_FUZZ_DEBUG").is_some() {
        eprintln!("journal {} bytes -> {want:?}", journal.len());
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
    assert!(jlen <= journal.len() as u64 || jlen == 48);
    assert!(jlen >= 48 || jlen == 0);
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
});
