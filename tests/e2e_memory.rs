//! Memory against the number of files: 200,000 small files sent over loopback, with each
//! side's peak resident memory held to a bound far below what a record per file kept for
//! the whole run would need (design.md, *Memory*).
//!
//! Two readings: the exact peak of both processes together (`getrusage(RUSAGE_CHILDREN)`
//! after both are reaped: the largest peak of any child this test waited for, and it waits
//! for no other), which the assertion uses, and each side's VmHWM polled from /proc while
//! it runs, printed to tell the sides apart.

mod support;

use std::fs;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use support::pipe_harness::{json_u64, watch_peak_rss};
use support::*;

const FILES: u64 = 200_000;
const PER_DIR: u64 = 1_000;
/// Peak resident memory allowed on either side. A sender that kept its ~0.8 KB per file
/// for the whole run would pass it at about 160,000 files.
const RSS_BOUND_KIB: u64 = 128 * 1024;

/// `FILES` files of 0-64 random bytes, `PER_DIR` per directory.
fn many_small_files(root: &Path) {
    let mut rng = Rng::new(14);
    let mut buf = [0u8; 64];
    for d in 0..FILES / PER_DIR {
        let dir = root.join(format!("d{d:03}"));
        fs::create_dir_all(&dir).unwrap();
        for f in 0..PER_DIR {
            let len = rng.range(0, 64) as usize;
            rng.fill(&mut buf[..len]);
            fs::write(dir.join(format!("f{f:04}")), &buf[..len]).unwrap();
        }
    }
}

/// The largest peak resident memory (KiB) of any child this process has waited for.
fn children_max_rss_kib() -> u64 {
    // SAFETY: `usage` is a plain C struct that getrusage fills in; zeroed is a valid value.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to `usage`; RUSAGE_CHILDREN is a valid `who`. std offers no
    // way to read a child's resource usage.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage) };
    assert_eq!(rc, 0, "getrusage: {}", std::io::Error::last_os_error());
    u64::try_from(usage.ru_maxrss).unwrap_or(0)
}

#[test]
fn two_hundred_thousand_files_in_bounded_memory() {
    let started = std::time::Instant::now();
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    many_small_files(&src);
    eprintln!("{FILES} files made in {:.1?}", started.elapsed());
    let dest = tmp.path().join("dest");
    let haul = Haul::new();
    let recv = haul.recv(&dest, &[]);
    // Four streams of 1 MiB blocks: the fixed buffers (per stream, never per file) stay
    // small and the same on any machine, so what the bound sees is what files cost.
    let args = ["--json", "--streams", "4", "--block-size", "1M"];
    let send = haul.spawn_send(&[&src], &recv.ticket, &args);
    let done = Arc::new(AtomicBool::new(false));
    let peaks = watch_peak_rss(vec![send.pid(), recv.proc.pid()], Arc::clone(&done));
    // Reaping ends /proc/<pid>: the watcher stops first (a zombie has no VmHWM anyway).
    let (sent, received) = (send.wait(), recv.wait());
    done.store(true, Ordering::Relaxed);
    let peaks = peaks.join().unwrap();
    assert_transfer_ok(&sent, &received);
    let both = children_max_rss_kib();
    eprintln!(
        "sent after {:.1?}; peak RSS for {FILES} files: sender {} KiB, receiver {} KiB (polled); \
         both {both} KiB (getrusage); bound {RSS_BOUND_KIB} KiB",
        started.elapsed(),
        peaks[0],
        peaks[1]
    );
    let stdout = String::from_utf8_lossy(&sent.stdout);
    assert_eq!(
        json_u64(&sent, &stdout, "files"),
        FILES,
        "files sent (--json)"
    );
    assert!(peaks.iter().all(|&p| p > 0), "no VmHWM read: {peaks:?}");
    assert!(
        both < RSS_BOUND_KIB,
        "a side peaked at {both} KiB resident (sender ~{} KiB, receiver ~{} KiB), over \
         {RSS_BOUND_KIB} KiB for {FILES} files",
        peaks[0],
        peaks[1]
    );
    assert_contents_equal(&src, &dest.join("src"));
    assert_no_part_files(&dest);
    eprintln!("compared after {:.1?}", started.elapsed());
}
