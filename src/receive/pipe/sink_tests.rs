//! Tests of the pipe sink (`sink.rs`).

use super::*;

#[test]
fn a_file_appears_only_when_finished() {
    let d = tempfile::tempdir().unwrap();
    let dest = d.path().join("out.bin");
    let mut o = Output::open(&PipeTo::File(dest.clone()), false).unwrap();
    o.write_all(b"hello").unwrap();
    assert!(!dest.exists());
    o.finish().unwrap();
    assert_eq!(std::fs::read(&dest).unwrap(), b"hello");
    assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 1);
}

#[test]
fn an_unfinished_file_leaves_nothing() {
    let d = tempfile::tempdir().unwrap();
    let dest = d.path().join("out.bin");
    std::fs::write(&dest, b"old").unwrap();
    let mut o = Output::open(&PipeTo::File(dest.clone()), false).unwrap();
    o.write_all(b"partial").unwrap();
    drop(o);
    assert_eq!(std::fs::read(&dest).unwrap(), b"old");
    assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 1);
}

/// `> FILE` and `>> FILE`: the stream lands after what the file held, and the pages
/// handled are the stream's own.
#[test]
fn standard_output_into_a_file_starts_where_the_file_stands() {
    let d = tempfile::tempdir().unwrap();
    for append in [false, true] {
        let p = d.path().join(format!("out-{append}"));
        std::fs::write(&p, b"old").unwrap();
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .append(append)
            .open(&p)
            .unwrap();
        if !append {
            use std::io::Seek;
            f.seek(io::SeekFrom::End(0)).unwrap();
        }
        let mut o = Output::from_kind(stdout_kind(f), false);
        assert_eq!(o.base, 3);
        let chunk = vec![9u8; (DROP_CHUNK / 2) as usize];
        for _ in 0..5 {
            o.write_all(&chunk).unwrap();
        }
        assert!(o.dropped > 0, "written pages were handed back");
        o.finish().unwrap();
        let got = std::fs::read(&p).unwrap();
        assert_eq!(&got[..3], b"old");
        assert_eq!(got.len(), 3 + 5 * chunk.len());
        assert!(got[3..].iter().all(|b| *b == 9));
    }
    let (r, w) = rustix::pipe::pipe().unwrap();
    drop(r);
    let k = stdout_kind(File::from(w));
    assert!(matches!(k, Kind::Stdout { regular: false, .. }));
}

/// Blocks are reserved ahead of the writes and what is beyond the end is freed when
/// the file is finished (a file and `> FILE`), or dropped unfinished (`> FILE`); a
/// file appended to is left alone.
#[test]
fn reserved_blocks_beyond_the_end_are_freed() {
    use std::os::unix::fs::MetadataExt;
    let d = tempfile::tempdir().unwrap();
    let chunk = vec![5u8; 3 << 20];
    let blocks = |p: &Path| std::fs::metadata(p).unwrap().blocks() * 512;
    for case in 0..3 {
        let p = d.path().join(format!("out-{case}"));
        let mut o = match case {
            0 => Output::open(&PipeTo::File(p.clone()), false).unwrap(),
            _ => Output::from_kind(stdout_kind(File::create(&p).unwrap()), false),
        };
        o.write_all(&chunk).unwrap();
        o.write_all(&chunk[..1000]).unwrap();
        let len = chunk.len() as u64 + 1000;
        if o.reserved.is_none() {
            println!("SKIPPED: this file system cannot reserve blocks (fallocate)");
            assert!(
                std::env::var_os("CI").is_none(),
                "CI's /tmp can (ext4, tmpfs)"
            );
            return;
        }
        assert_eq!(o.reserved, Some(len - 1000 + RESERVE_CHUNK));
        match case {
            2 => drop(o),
            _ => o.finish().unwrap(),
        }
        assert_eq!(std::fs::metadata(&p).unwrap().len(), len);
        assert!(blocks(&p) < len + (1 << 20), "{} blocks held", blocks(&p));
    }
    // `>> FILE`: others may append too; nothing is reserved, so nothing is freed.
    let p = d.path().join("appended");
    let mut f = std::fs::OpenOptions::new();
    let f = f.create(true).append(true).open(&p).unwrap();
    let mut o = Output::from_kind(stdout_kind(f), false);
    o.write_all(&chunk).unwrap();
    assert_eq!(o.reserved, None);
}

#[test]
fn a_directory_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let e = Output::open(&PipeTo::File(d.path().to_path_buf()), false)
        .err()
        .unwrap();
    assert!(e.to_string().contains("is a directory"), "{e}");
}

#[test]
fn a_failing_command_fails_the_output() {
    let mut o = Output::open(
        &PipeTo::Command {
            command: "cat >/dev/null; exit 4".into(),
            stdout_to_stderr: true,
        },
        false,
    )
    .unwrap();
    o.write_all(b"abc").unwrap();
    let e = o.finish().unwrap_err().to_string();
    assert!(e.contains("exited with status 4"), "{e}");
}

#[test]
fn a_consumer_that_stops_reading_is_an_error() {
    let mut o = Output::open(
        &PipeTo::Command {
            command: "head -c 10 >/dev/null".into(),
            stdout_to_stderr: true,
        },
        false,
    )
    .unwrap();
    let big = vec![7u8; 1 << 20];
    let mut r = Ok(());
    for _ in 0..64 {
        r = o.write_all(&big);
        if r.is_err() {
            break;
        }
    }
    let e = r.unwrap_err().to_string();
    assert!(e.contains("closed its input"), "{e}");
}

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 31 + i / 4096) as u8).collect()
}

/// Blocks of a stream (a power of two each, the last one short) written into a file and
/// into `> FILE` at an aligned and an unaligned start: byte-identical, the descriptor's
/// offset past the stream (the shell may write after it), and the aligned blocks never
/// in the page cache (they went straight to the device, where the file system does
/// `O_DIRECT`).
#[test]
fn a_file_is_written_directly_and_byte_identical_with_unaligned_ends() {
    use std::io::Seek;
    let d = tempfile::tempdir().unwrap();
    let block = 64 << 10;
    let data = pattern(5 * block + 1234);
    for case in 0..3 {
        let p = d.path().join(format!("out-{case}"));
        let old: &[u8] = if case == 2 { b"old" } else { b"" };
        let mut o = match case {
            0 => Output::open(&PipeTo::File(p.clone()), false).unwrap(),
            _ => {
                std::fs::write(&p, old).unwrap();
                let mut f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
                f.seek(io::SeekFrom::End(0)).unwrap();
                Output::from_kind(stdout_kind(f), false)
            }
        };
        assert!(o.direct.is_some(), "case {case}");
        o.write_all(&data[..block]).unwrap();
        if case == 1 {
            let f = o.written_file().unwrap();
            let share = pagecache::cached_share(f, 0, block as u64);
            let refused = o.direct.as_ref().unwrap().refused.has(0);
            assert!(
                share == 0.0 || refused,
                "an aligned block went to the page cache"
            );
        }
        for piece in data[block..].chunks(block) {
            o.write_all(piece).unwrap();
        }
        if let Kind::Stdout { file, .. } = &mut o.kind {
            let at = file.stream_position().unwrap();
            assert_eq!(at, (old.len() + data.len()) as u64, "case {case}");
        }
        o.finish().unwrap();
        let got = std::fs::read(&p).unwrap();
        assert_eq!(&got[..old.len()], old, "case {case}");
        assert!(got[old.len()..] == data[..], "case {case}");
    }
}

/// A file system that refuses `O_DIRECT` (tmpfs before Linux 6.6, some FUSE and NFS
/// mounts): the first direct write fails with EINVAL, that block and every later one go
/// through the page cache, and the file is byte-identical.
#[test]
fn a_file_system_that_refuses_direct_writes_gets_them_buffered() {
    fn refuse(_: &File, _: &[u8], _: u64, _: &mut Bounce) -> io::Result<()> {
        Err(io::Error::from_raw_os_error(libc::EINVAL))
    }
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("out");
    let mut o = Output::from_kind(stdout_kind(File::create(&p).unwrap()), false);
    o.direct.as_mut().unwrap().write = refuse;
    let data = pattern(3 * (64 << 10) + 7);
    for piece in data.chunks(64 << 10) {
        o.write_all(piece).unwrap();
    }
    assert!(o.direct.as_ref().unwrap().refused.has(0));
    o.finish().unwrap();
    assert!(std::fs::read(&p).unwrap() == data);
}

/// `--keep-cache` and a file appended to (`>> FILE`) are written through the page cache.
#[test]
fn kept_cache_and_appending_write_buffered() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("out");
    let o = Output::open(&PipeTo::File(p.clone()), true).unwrap();
    assert!(o.direct.is_none());
    drop(o);
    std::fs::write(&p, b"x").unwrap();
    let f = std::fs::OpenOptions::new().append(true).open(&p).unwrap();
    let mut o = Output::from_kind(stdout_kind(f), false);
    assert!(o.direct.is_none());
    o.write_all(&pattern(70_000)).unwrap();
    o.finish().unwrap();
    assert_eq!(std::fs::read(&p).unwrap().len(), 70_001);
}

/// `haul recv - > FILE`: standard output's description is the shell's too. `O_DIRECT` is
/// set only on a description of haul's own (a SIGKILL mid-write would leave it set on
/// the shared one for the next writer), and the bytes and the shared offset are right.
#[test]
fn standard_output_is_written_directly_through_a_description_of_its_own() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Mutex;
    /// The shell's descriptor (the hook is a plain `fn`: it cannot capture it).
    static SHELL: Mutex<Option<File>> = Mutex::new(None);
    static SEEN_ON_SHARED: AtomicBool = AtomicBool::new(false);
    /// A direct write that notes whether `O_DIRECT` set on the description it was given
    /// shows on the shell's (the test's) descriptor.
    fn spy(f: &File, data: &[u8], at: u64, b: &mut Bounce) -> io::Result<()> {
        use rustix::fs::{fcntl_getfl, fcntl_setfl, OFlags};
        let flags = fcntl_getfl(f)?;
        fcntl_setfl(f, flags | OFlags::DIRECT)?;
        let shell = SHELL.lock().unwrap();
        let shared = fcntl_getfl(shell.as_ref().unwrap())?.contains(OFlags::DIRECT);
        SEEN_ON_SHARED.fetch_or(shared, Ordering::SeqCst);
        fcntl_setfl(f, flags)?;
        direct::write_direct(f, data, at, b)
    }
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("out");
    let shell = File::create(&p).unwrap();
    *SHELL.lock().unwrap() = Some(shell.try_clone().unwrap());
    let mut o = Output::from_kind(stdout_kind(shell.try_clone().unwrap()), false);
    o.direct.as_mut().expect("written directly").write = spy;
    let data = pattern(4 * (64 << 10) + 99);
    for piece in data.chunks(64 << 10) {
        o.write_all(piece).unwrap();
    }
    o.finish().unwrap();
    assert!(
        !SEEN_ON_SHARED.load(Ordering::SeqCst),
        "O_DIRECT showed on the shell's description"
    );
    assert!(std::fs::read(&p).unwrap() == data);
    let at = rustix::fs::seek(&shell, rustix::fs::SeekFrom::Current(0)).unwrap();
    assert_eq!(
        at,
        data.len() as u64,
        "the shell's offset is past the stream"
    );
}

/// A file is synced along the way as it is written (the wiring of `syncer`: the direct
/// and the buffered paths both report how far they got).
#[test]
fn a_file_is_synced_while_it_is_written() {
    use std::time::{Duration, Instant};
    let d = tempfile::tempdir().unwrap();
    for keep_cache in [false, true] {
        let dest = d.path().join(format!("out-{keep_cache}"));
        let mut o = Output::open(&PipeTo::File(dest.clone()), keep_cache).unwrap();
        o.syncer = regular_file(&o.kind).and_then(|f| Syncer::start(f, 1 << 20, sync_data));
        for _ in 0..3 {
            o.write_all(&vec![7u8; 1 << 20]).unwrap();
        }
        // A bound for a stuck thread, not a timing assertion.
        let end = Instant::now() + Duration::from_secs(60);
        while o.syncer.as_ref().unwrap().syncs() == 0 && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(
            o.syncer.as_ref().unwrap().syncs() > 0,
            "keep_cache {keep_cache}"
        );
        o.finish().unwrap();
        assert_eq!(std::fs::read(&dest).unwrap(), vec![7u8; 3 << 20]);
    }
}

/// A sync along the way that failed fails the stream, though the final `fsync` would
/// succeed (the kernel reports a writeback error once per open file description): a
/// file is not put in place, and standard output into a file is an error.
#[test]
fn a_failed_sync_along_the_way_fails_the_finish() {
    use std::time::{Duration, Instant};
    fn eio(_: &File) -> io::Result<()> {
        Err(io::Error::from_raw_os_error(libc::EIO))
    }
    let d = tempfile::tempdir().unwrap();
    let dest = d.path().join("out.bin");
    let mut o = Output::open(&PipeTo::File(dest.clone()), false).unwrap();
    o.syncer = regular_file(&o.kind).and_then(|f| Syncer::start(f, 1, eio));
    o.write_all(b"hello").unwrap();
    // The finish may come before the thread's sync was tried (then there is nothing to
    // report): wait for the failure first. A bound for a stuck thread, not a timing check.
    let failed = |o: &Output| o.syncer.as_ref().is_some_and(|s| s.failed());
    let end = Instant::now() + Duration::from_secs(60);
    while !failed(&o) && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(5));
    }
    let e = o.finish().unwrap_err().to_string();
    assert!(
        e.contains("out.bin") && e.contains("Input/output error"),
        "{e}"
    );
    assert!(!dest.exists());
    assert_eq!(
        std::fs::read_dir(d.path()).unwrap().count(),
        0,
        "no temporary left"
    );

    let p = d.path().join("stdout.bin");
    let mut o = Output::from_kind(stdout_kind(File::create(&p).unwrap()), false);
    o.syncer = regular_file(&o.kind).and_then(|f| Syncer::start(f, 1, eio));
    o.write_all(b"hello").unwrap();
    let end = Instant::now() + Duration::from_secs(60);
    while !failed(&o) && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(o.finish().is_err());
}
