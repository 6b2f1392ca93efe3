//! Unit tests of the shard file format (kept apart so shard.rs stays short).

use super::*;
use crate::plan::select::Listed;
use proptest::prelude::*;

fn header() -> Header {
    Header {
        plan: "0123456789abcdef0123456789abcdef".into(),
        index: 2,
        count: 8,
        links: Links::CopyUnsafe,
        total_entries: 10,
        total_bytes: 100,
        sources: vec![b"/src/a/".to_vec(), b"/src/b\n\\c".to_vec()],
        entries: 3,
        bytes: 12,
    }
}

fn rec(kind: Kind, size: u64, source: u32, path: &[u8]) -> Record {
    Record {
        kind,
        size,
        source,
        path: SafeRelPath::parse(path).unwrap(),
    }
}

#[test]
fn round_trip_with_hostile_names() {
    let records = vec![
        rec(Kind::Dir, 0, 0, b""),
        rec(Kind::File, 12, 1, b"new\nline/\xff\xfe bytes\\#012"),
        rec(Kind::Symlink, 0, 0, b"sp ace/\x7f."),
    ];
    let bytes = encode(&header(), &records);
    let text = String::from_utf8(bytes.clone()).unwrap();
    assert_eq!(text.lines().count(), 8 + 3 + 1, "{text}");
    assert!(text.contains("f 12 1 new\\#012line/\\#377\\#376 bytes\\#134#012\n"));
    assert_eq!(
        decode(&bytes).unwrap(),
        ShardFile {
            header: header(),
            records
        }
    );
}

#[test]
fn damaged_files_are_refused() {
    let good = encode(&header(), &[rec(Kind::File, 12, 0, b"x")]);
    let cut = &good[..good.len() - 70];
    assert_eq!(decode(cut), Err(FormatError::Truncated));
    assert_eq!(decode(&good[..40]), Err(FormatError::Truncated));
    let edited = String::from_utf8(good.clone())
        .unwrap()
        .replace("f 12 0 x", "f 13 0 x");
    assert_eq!(decode(edited.as_bytes()), Err(FormatError::Checksum));
    assert_eq!(decode(b"hello\nend x\n"), Err(FormatError::Magic));
    // A well-formed file whose counts do not add up.
    let wrong = encode(&header(), &[rec(Kind::File, 11, 0, b"x")]);
    assert!(matches!(decode(&wrong), Err(FormatError::Line { .. })));
}

#[test]
fn a_shard_belongs_to_shard_0s_plan_only_with_the_same_plan_wide_fields() {
    let first = Header {
        index: 0,
        ..header()
    };
    // Its own index and counts may differ; nothing else.
    let own = Header {
        index: 2,
        entries: 1,
        bytes: 0,
        ..header()
    };
    assert_eq!(own.mismatch(&first, 2), None);
    assert_eq!(own.mismatch(&first, 3), Some("shard index"));
    let mut extra = own.clone();
    extra.sources.push(b"/elsewhere/".to_vec());
    let edits: [(Header, &str); 5] = [
        (
            Header {
                plan: "f".repeat(32),
                ..own.clone()
            },
            "plan id or shard count",
        ),
        (
            Header {
                count: 9,
                ..own.clone()
            },
            "plan id or shard count",
        ),
        (
            Header {
                links: Links::Keep,
                ..own.clone()
            },
            "symlink rule (links)",
        ),
        (
            Header {
                total_entries: 11,
                ..own.clone()
            },
            "plan totals",
        ),
        (extra, "sources"),
    ];
    for (h, what) in edits {
        assert_eq!(h.mismatch(&first, 2), Some(what));
    }
}

#[test]
fn unsafe_paths_are_refused() {
    for bad in ["..", "a/../b", "/etc", "a//b", "a\\#000b", "a\\x"] {
        let h = Header {
            entries: 1,
            bytes: 0,
            ..header()
        };
        let mut w = Writer::new(Vec::new(), &h);
        w.line(format!("d 0 0 {bad}\n").as_bytes());
        let out = w.finish().unwrap();
        assert!(
            matches!(decode(&out), Err(FormatError::Line { .. })),
            "{bad}"
        );
    }
}

#[test]
fn listed_exact_and_parents() {
    let file = ShardFile {
        header: header(),
        records: vec![
            rec(Kind::File, 1, 0, b"a/b/f"),
            rec(Kind::Dir, 0, 0, b"a"),
            rec(Kind::Dir, 0, 1, b""),
        ],
    };
    let l = file.list();
    assert_eq!(l.listed(0, b""), Listed::Parent);
    assert_eq!(l.listed(0, b"a"), Listed::Yes);
    assert_eq!(l.listed(0, b"a/b"), Listed::Parent);
    assert_eq!(l.listed(0, b"a/b/f"), Listed::Yes);
    assert_eq!(l.listed(0, b"a/b/g"), Listed::No);
    assert_eq!(l.listed(0, b"a/c"), Listed::No);
    assert_eq!(l.listed(1, b""), Listed::Yes);
    assert_eq!(l.listed(1, b"x"), Listed::No);
    assert_eq!(l.listed(7, b""), Listed::No);
}

proptest! {
    #[test]
    fn decoder_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
        let _ = decode(&bytes);
        // With a valid checksum, so the parser itself is reached.
        let mut body = b"haul-shard 1\n".to_vec();
        body.extend_from_slice(&bytes);
        if !body.ends_with(b"\n") {
            body.push(b'\n');
        }
        let sum = blake3::hash(&body);
        body.extend_from_slice(format!("end {}\n", sum.to_hex()).as_bytes());
        let _ = decode(&body);
    }

    #[test]
    fn any_names_round_trip(
        names in proptest::collection::vec(
            proptest::collection::vec(1u8..=255, 1..20), 1..6),
        size in any::<u64>(),
    ) {
        let mut records = Vec::new();
        let mut bytes = 0u64;
        for n in &names {
            let n: Vec<u8> = n.iter().map(|&b| if b == b'/' { b'_' } else { b }).collect();
            if n == b"." || n == b".." {
                continue;
            }
            let s = size / 8;
            bytes += s;
            records.push(rec(Kind::File, s, 0, &n));
        }
        let h = Header { entries: records.len() as u64, bytes, total_bytes: u64::MAX,
            total_entries: u64::MAX, ..header() };
        let got = decode(&encode(&h, &records)).unwrap();
        prop_assert_eq!(got.records, records);
    }
}
