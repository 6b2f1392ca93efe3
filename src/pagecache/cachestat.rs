//! `cachestat(2)` (Linux 6.5): how many pages of a range of a file are in the page cache,
//! in one system call. The per-page map of `mincore` costs a mapping made and removed
//! around it (three calls, and the mapping's setup and teardown in the kernel) for every
//! small file read; most ranges are either not cached at all or cached whole, and the
//! count alone settles those. It does not replace `mincore`: a partly cached range still
//! needs the map, and an older kernel (`ENOSYS`, remembered) or a file the caller may not
//! ask about (`EPERM`) answers `None`, and the caller asks `mincore`.
//!
//! Hand-written: neither libc (which has no number for it on x86_64) nor rustix wraps it.

use std::fs::File;
use std::sync::atomic::{AtomicBool, Ordering};

/// The call's number where the kernel uses the unified system call table (every
/// architecture added since; 451 there for all of them).
#[cfg(any(
    target_arch = "x86_64",
    target_arch = "aarch64",
    target_arch = "riscv64",
    target_arch = "loongarch64"
))]
const SYS_CACHESTAT: libc::c_long = 451;

/// The kernel said it has no such call: stop asking.
static MISSING: AtomicBool = AtomicBool::new(false);

/// `struct cachestat_range` of the kernel's ABI.
#[repr(C)]
struct Range {
    off: u64,
    len: u64,
}

/// `struct cachestat` of the kernel's ABI (only `nr_cache` is used).
#[repr(C)]
#[derive(Default)]
struct Stat {
    nr_cache: u64,
    nr_dirty: u64,
    nr_writeback: u64,
    nr_evicted: u64,
    nr_recently_evicted: u64,
}

/// How many pages of `[offset, offset + len)` of `file` are cached (`len` > 0); `None`
/// when the kernel cannot or will not say.
#[cfg(any(
    target_arch = "x86_64",
    target_arch = "aarch64",
    target_arch = "riscv64",
    target_arch = "loongarch64"
))]
pub(super) fn cached_pages(file: &File, offset: u64, len: u64) -> Option<u64> {
    use std::os::fd::AsRawFd;
    // A length of 0 would mean "to the end of the file".
    if len == 0 || MISSING.load(Ordering::Relaxed) {
        return None;
    }
    let range = Range { off: offset, len };
    let mut stat = Stat::default();
    // SAFETY: cachestat reads one `struct cachestat_range` and writes one `struct
    // cachestat`, both `repr(C)` with the kernel's layout and alive for the whole call;
    // the descriptor is borrowed for the call; flags must be 0.
    let r = unsafe {
        libc::syscall(
            SYS_CACHESTAT,
            file.as_raw_fd(),
            &range as *const Range,
            &mut stat as *mut Stat,
            0 as libc::c_uint,
        )
    };
    if r == 0 {
        return Some(stat.nr_cache);
    }
    if std::io::Error::last_os_error().raw_os_error() == Some(libc::ENOSYS) {
        MISSING.store(true, Ordering::Relaxed);
    }
    None
}

/// No known number for the call here: always ask `mincore`.
#[cfg(not(any(
    target_arch = "x86_64",
    target_arch = "aarch64",
    target_arch = "riscv64",
    target_arch = "loongarch64"
)))]
pub(super) fn cached_pages(_file: &File, _offset: u64, _len: u64) -> Option<u64> {
    let _ = MISSING.load(Ordering::Relaxed);
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn counts_what_was_read_and_nothing_after_it_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        let mut f = File::create(&p).unwrap();
        f.write_all(&vec![3u8; 1 << 20]).unwrap();
        f.sync_all().unwrap();
        let f = File::open(&p).unwrap();
        let Some(all) = cached_pages(&f, 0, 1 << 20) else {
            // A kernel before 6.5 (or one that forbids it): the caller asks mincore.
            return;
        };
        let page = rustix::param::page_size() as u64;
        assert!(all <= (1 << 20) / page, "{all} pages");
        super::super::drop_all(&f);
        let after = cached_pages(&f, 0, 1 << 20).unwrap();
        // tmpfs and the like cannot drop their pages; elsewhere none stay.
        assert!(
            after == 0 || after == all,
            "{after} of {all} pages after dropping"
        );
        assert_eq!(cached_pages(&f, 0, 0), None);
    }
}
