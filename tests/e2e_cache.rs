//! No page-cache flush: by default a copy leaves the page cache as it found it (the source
//! pages it read and the pages it wrote are dropped, pages cached before stay); with
//! `--keep-cache` everything stays. Residency is read with util-linux's `fincore`.
//!
//! The page cache is shared with everything else on the machine, so the assertions have
//! wide margins: "dropped" is under a quarter of the file, "kept" over half of it.

mod support;

use std::path::Path;
use std::process::Command;

use support::*;

const SIZE: u64 = 512 * MIB;

/// Bytes of `file` in the page cache, or `None` (after printing SKIPPED) without fincore.
fn resident(file: &Path) -> Option<u64> {
    let out = match Command::new("fincore")
        .args(["--bytes", "--noheadings", "--output", "RES"])
        .arg(file)
        .output()
    {
        Ok(o) if o.status.success() => o,
        other => {
            assert!(
                std::env::var_os("CI").is_none(),
                "fincore (util-linux) is needed: {other:?}"
            );
            println!("SKIPPED: no fincore (util-linux)");
            return None;
        }
    };
    Some(String::from_utf8_lossy(&out.stdout).trim().parse().unwrap())
}

/// Drops `file` from the page cache (only it), as a cold file on disk would be.
fn evict(file: &Path) {
    let st = Command::new("dd")
        .arg(format!("if={}", file.display()))
        .args(["iflag=nocache", "count=0", "status=none"])
        .status()
        .unwrap();
    assert!(st.success());
}

/// Reads `file` into the page cache.
fn cache(file: &Path) {
    std::fs::read(file).unwrap();
}

fn run_copy(src: &Path, dst: &Path, args: &[&str]) {
    let _ = std::fs::remove_dir_all(dst);
    copy(&[src], dst, args).assert_code(0);
}

#[test]
fn a_copy_leaves_the_page_cache_as_it_found_it_unless_keep_cache() {
    // Under the target directory: a real disk, where a temp dir may be a tmpfs (whose
    // pages are the files and can never be dropped).
    let tmp = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let src = tmp.path().join("src");
    std::fs::create_dir(&src).unwrap();
    let file = src.join("big");
    write_random_file(&file, SIZE, 12);
    std::fs::File::open(&file).unwrap().sync_all().unwrap();
    let dst = tmp.path().join("dst");
    let copied = dst.join("src").join("big");
    evict(&file);
    let Some(cold) = resident(&file) else { return };
    if cold > SIZE / 8 {
        println!("SKIPPED: this file system keeps every page cached ({cold} bytes)");
        return;
    }

    // Default, cold source: neither the source nor the copy stays cached.
    run_copy(&src, &dst, &["--block-size", "1M"]);
    let (s, d) = (resident(&file).unwrap(), resident(&copied).unwrap());
    assert!(s < SIZE / 4, "source: {s} bytes cached after the copy");
    assert!(d < SIZE / 4, "copy: {d} bytes cached after the copy");

    // --keep-cache: both stay.
    evict(&file);
    run_copy(&src, &dst, &["--keep-cache"]);
    let (s, d) = (resident(&file).unwrap(), resident(&copied).unwrap());
    assert!(
        s > SIZE / 2,
        "source: only {s} bytes cached with --keep-cache"
    );
    assert!(
        d > SIZE / 2,
        "copy: only {d} bytes cached with --keep-cache"
    );

    // A source cached before the run stays cached (the sender drops only what it brought
    // in); the copy does not.
    cache(&file);
    run_copy(&src, &dst, &[]);
    let (s, d) = (resident(&file).unwrap(), resident(&copied).unwrap());
    assert!(s > SIZE / 2, "source: only {s} bytes still cached");
    assert!(d < SIZE / 4, "copy: {d} bytes cached after the copy");

    // Half cached by a sequential reader (whose readahead marks pages ahead): that half
    // stays, the rest is dropped again.
    evict(&file);
    let mut f = std::fs::File::open(&file).unwrap();
    std::io::copy(
        &mut std::io::Read::take(&mut f, SIZE / 2),
        &mut std::io::sink(),
    )
    .unwrap();
    let before = resident(&file).unwrap();
    run_copy(&src, &dst, &[]);
    let s = resident(&file).unwrap();
    assert!(
        s > SIZE / 4,
        "source: only {s} bytes still cached (of {before})"
    );
    assert!(
        s < before + SIZE / 8,
        "source: {s} bytes cached after the copy, {before} before"
    );
}

#[test]
fn a_stream_into_a_file_is_not_left_in_the_page_cache() {
    let tmp = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let file = tmp.path().join("big");
    write_random_file(&file, SIZE / 2, 13);
    std::fs::File::open(&file).unwrap().sync_all().unwrap();
    evict(&file);
    let Some(cold) = resident(&file) else { return };
    if cold > SIZE / 16 {
        println!("SKIPPED: this file system keeps every page cached ({cold} bytes)");
        return;
    }
    let out = tmp.path().join("copy");
    let recv = recv(&out, &["--stream"]);
    let cat = format!("cat {}", file.display());
    send(&[], &recv.ticket, &["--from-command", &cat]).assert_code(0);
    recv.wait().assert_code(0);
    let d = resident(&out).unwrap();
    assert!(
        d < SIZE / 8,
        "stream file: {d} bytes cached after the transfer"
    );
}
