//! Tests of the instruction lines (`wire`).

use super::*;

#[test]
fn messages_round_trip_as_single_safe_lines() {
    let reqs = [
        Request::Receive {
            dest: b"/x\xff y\n".to_vec(),
            single_file: true,
            advertise: Some("192.0.2.1".parse().unwrap()),
            everywhere: true,
            accept: Accept {
                owner: false,
                ..Accept::default()
            },
            dry_run: true,
            keep_cache: true,
            relay: true,
        },
        Request::Send {
            paths: vec![b"a/".to_vec(), b"b".to_vec()],
            streams: 4,
            compress: "zstd:3".into(),
            block_size: 4 << 20,
            sync: SyncOptions {
                checksum: true,
                inplace: false,
                delete: true,
                dry_run: true,
                items: true,
                rules: crate::protocol::Rules {
                    update: true,
                    size_only: true,
                    ..Default::default()
                },
            },
            listen: true,
            advertise: None,
            select: Selection {
                filter: vec![crate::protocol::FilterRule {
                    include: false,
                    pattern: b"postmaster.pid".to_vec(),
                }]
                .into(),
                files_from: Some(crate::plan::select::FileList::parse(
                    b"a\nb/c\n./d/./e\n",
                    false,
                    true,
                )),
                links: crate::plan::select::Links::CopyUnsafe,
                one_file_system: true,
                quiet: false,
                shard: None,
                no_xattrs: true,
                delete_excluded: true,
            },
            limit: Some(10 << 20),
            listing: Listing {
                itemize: true,
                ..Listing::default()
            },
            keep_cache: false,
            congestion: None,
        },
        Request::Go {
            rename: Some(b"new".to_vec()),
            ticket: Some("haul1-abc".into()),
            encrypt: true,
            chain: Some(Chain {
                hops: vec![crate::protocol::Hop {
                    label: "db2:/x".into(),
                    ticket: "haul1-def".into(),
                }],
                encrypt: true,
                nonce: None,
            }),
            label: "/data/\x1b".into(),
        },
        Request::ReceiveStream {
            dest: Vec::new(),
            command: Some("mbstream -x -C /var/lib/mysql".into()),
            window: 64 << 20,
            advertise: None,
            keep_cache: false,
            everywhere: true,
            relay: false,
        },
        Request::SendStream {
            path: b"/backups/x.xb".to_vec(),
            command: None,
            streams: 8,
            compress: "zstd:1".into(),
            block_size: 4 << 20,
            window: 64 << 20,
            advertise: None,
            limit: None,
            keep_cache: true,
            congestion: Some("cubic".into()),
        },
        Request::Probe {
            dest: b"/var/lib/\xfe".to_vec(),
            streams: 8,
            advertise: Some("2001:db8::1".parse().unwrap()),
            everywhere: true,
        },
        Request::ProbeSource {
            paths: vec![b"/var/lib/\xfe".to_vec(), b"b/".to_vec()],
            streams: 3,
            advertise: None,
            listen: false,
        },
    ];
    for r in reqs {
        let line = encode(&r);
        assert!(!line.contains('\n') && line.is_ascii(), "{line}");
        assert!(is_message(&line));
        assert_eq!(decode::<Request>(&line).unwrap(), r);
    }
    let done = Reply::Done(Done {
        code: 4,
        message: "disk full".into(),
        files: 1,
        bytes: 2,
        deleted: 3,
        replicas: vec![Replica {
            host: "db2:/x".into(),
            outcome: crate::protocol::Outcome::Failed {
                code: 5,
                message: "gone".into(),
            },
            proof: None,
        }],
        stats: Stats {
            files_unchanged: 4,
            bytes_read: 5,
            bytes_wire: 6,
            bytes_skipped: 7,
            failed_files: 8,
            changed_files: 9,
            reconnects: 10,
            entries: 11,
            regular: 12,
            dirs: 13,
            total_size: 14,
            transferred_size: 16,
            matched: 15,
            dry_run: true,
        },
    });
    assert_eq!(decode::<Reply>(&encode(&done)).unwrap(), done);
    let probed = Reply::Probed {
        write_rate: Some(400 << 20),
        file_micros: None,
        received: 1 << 33,
        micros: 3_000_123,
    };
    assert_eq!(decode::<Reply>(&encode(&probed)).unwrap(), probed);
    let source = Reply::SourceProbed(SourceReport {
        files: 20_000,
        bytes: 1 << 30,
        complete: true,
        blocks: 16,
        read_rate: Some(300 << 20),
        direct: true,
        cached_permille: 1000,
        small_files: 19_000,
        small_bytes: 1 << 28,
        small_read_nanos: Some(40_000),
        walk_micros: 512_000,
        codecs: vec![
            ("none".into(), 3 << 30, 1000),
            ("zstd:3".into(), 1 << 28, 3300),
        ],
    });
    assert_eq!(decode::<Reply>(&encode(&source)).unwrap(), source);
}

proptest::proptest! {
    /// Whatever bytes a line carries, decoding a reply returns (an error or a
    /// message) and never panics.
    #[test]
    fn any_reply_line_decodes_or_fails_cleanly(bin in proptest::collection::vec(0u8.., 0..300)) {
        let line = format!("{MSG_PREFIX}{}", data_encoding::BASE32_NOPAD.encode(&bin));
        let _ = decode::<Reply>(&line);
        let _ = decode::<Request>(&line);
    }
}

#[test]
fn garbage_is_an_error_not_a_panic() {
    assert!(decode::<Reply>("hello").is_err());
    assert!(decode::<Reply>("haul-msg !!!").is_err());
    assert!(decode::<Reply>("haul-msg AAAA").is_err());
    assert!(decode::<Reply>("haul-msg ").is_err());
}

#[test]
fn greetings() {
    let g = parse_greeting(&greeting(None)).unwrap();
    assert!(g.compatible());
    assert_eq!(g.hash, None);
    let g = parse_greeting(&greeting(Some("ab12"))).unwrap();
    assert_eq!(g.hash.as_deref(), Some("ab12"));
    assert!(!parse_greeting("haul-serve 11 1").unwrap().compatible());
    // Version 15: `Stats` carries `transferred_size`, `Send` `congestion` and the transfer rules; 14: the selection's --files-from list holds bases and `-r`; 12: `Go`'s chain has a nonce, `Done`'s replicas a proof; 11:
    // `Receive`/`ReceiveStream` say `relay`; 10: `Stats` carries `--stats`' totals; 9: `Done` carries `Stats`; 8: `Probe` says `everywhere`, `ProbeSource` `listen`, `Go` a chain, `Done`
    // the replicas; 7:
    // `ProbeSource`/`SourceProbed`; 6: ReceiveStream says `everywhere`, and
    // `Probe`/`Probed` (5: `compress`
    // may be "auto" and every request carries keep_cache; 4 added dry_run, a listing, a
    // cap and deleted; 3 the walk's selection); an older far end cannot read them and is
    // replaced by an upload.
    assert_eq!(SERVE_VERSION, 15);
    for old in 2..SERVE_VERSION {
        let line = format!("haul-serve {old} {PROTOCOL_VERSION}");
        assert!(!parse_greeting(&line).unwrap().compatible());
    }
    assert!(parse_greeting("haul-serve x").is_none());
    assert!(parse_greeting("Welcome!").is_none());
    assert!(parse_greeting("haul-serve 1 1 h extra").is_none());
}

#[test]
fn shorten_cuts_long_noise() {
    assert_eq!(shorten("abc\n"), "abc");
    assert_eq!(shorten(&"x".repeat(300)).chars().count(), 101);
}
