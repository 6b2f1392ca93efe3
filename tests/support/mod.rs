//! Shared helpers of the end-to-end tests of the `haul` binary.
//!
//! - [`tree`]: builds the hostile-but-legal source tree (and random files).
//! - [`compare`]: asserts that a destination tree equals its source, stat for stat.
//! - [`db`]: throwaway PostgreSQL and MariaDB servers, their accounts and programs.
//! - [`process`]: runs `haul recv`, `send` and `copy` with timeouts, reading the ticket.
//! - [`piped`]: children whose stdin/stdout are wired to each other, stderr read by line.
//! - [`pipe_harness`]: pipe-mode runs with a ticket file, JSON fields, namespaces to cut
//!   connections in, a peak-RSS watcher.
//! - [`sshd`]: a throwaway OpenSSH server for the remote-copy tests.
//! - [`s3`]: a throwaway S3 server (s3s-fs) for the object-store tests.
//! - [`seccomp`]: `haul` with one system call failing, as an older kernel's would.
//! - [`netbed`]: the shared netlab test bed under a test's own names.
//! - [`fanout_pipe`]: a stream chain's receivers and sender, its JSON's digest.
//! - [`fanout_ssh`]: a copy's fan-out command through the test sshd, far destinations.
//! - [`wanbed`]: the shared wanlab emulator (RTT, loss, rate, outages) under a test's name.
//! - [`hostile`]: a `haul recv` for forged conversations, bounded waits, closed looks.
//!
//! The helpers panic with a full explanation instead of returning errors: a test either
//! proves what arrived or fails saying what did not. Each test binary uses a subset, hence
//! the `dead_code` and `unused_imports` (of re-exports) allowances.
#![allow(dead_code, unused_imports)]

pub mod compare;
pub mod db;
pub mod fanout_pipe;
pub mod fanout_ssh;
pub mod hostile;
pub mod netbed;
pub mod pipe_harness;
pub mod piped;
pub mod process;
pub mod s3;
pub mod seccomp;
pub mod sshd;
pub mod tree;
pub mod wanbed;

use std::fs;
use std::net::TcpListener;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

pub use compare::{assert_contents_equal, assert_trees_equal, Compare};
pub use process::{
    assert_transfer_ok, copy, haul_bin, recv, send, transfer, Haul, Outcome, Recv, Running,
};
pub use tree::{build_tree, write_random_file, Rng, TreeOptions};

/// One mebibyte.
pub const MIB: u64 = 1 << 20;
/// The block size every tree test passes, as the CLI spells it; matches
/// [`TreeOptions::block_size`].
pub const BLOCK_SIZE_ARG: &str = "1M";

/// Whether rsync (the oracle of the parity tests) is installed; under CI it must be.
pub fn have_rsync() -> bool {
    let ok = std::process::Command::new("rsync")
        .arg("--version")
        .output()
        .is_ok();
    if !ok {
        assert!(
            std::env::var_os("CI").is_none(),
            "rsync is missing under CI"
        );
        eprintln!("SKIPPED: rsync is not installed");
    }
    ok
}

/// Whether the tests run as root (then owners are preserved and compared).
pub fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// The unprivileged user and group a root test runs haul as (through `setpriv`).
pub const NOBODY: u32 = 65534;
pub const NOGROUP: u32 = 65534;

/// haul as a user without root's powers: the current one when not root, else `nobody`
/// through `setpriv`; `None` as root without `setpriv`.
pub fn unprivileged_haul() -> Option<process::Haul> {
    if !is_root() {
        return Some(process::Haul::new());
    }
    let setpriv = std::process::Command::new("setpriv")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    setpriv.then(|| process::Haul::as_user(NOBODY, NOGROUP))
}

/// [`unprivileged_haul`] and a temporary directory it may enter (mode 0755: a root test's
/// temporary directory is 0700), or `None` after saying that `test` is skipped.
pub fn unprivileged_tempdir(test: &str) -> Option<(process::Haul, tempfile::TempDir)> {
    let Some(haul) = unprivileged_haul() else {
        eprintln!("SKIPPED {test}: root without setpriv");
        return None;
    };
    let tmp = tempfile::tempdir().unwrap();
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(tmp.path(), fs::Permissions::from_mode(0o755)).unwrap();
    Some((haul, tmp))
}

/// A TCP port on 127.0.0.1 that was free a moment ago (bound, then released).
pub fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    listener.local_addr().unwrap().port()
}

/// `path` with a trailing `/` (rsync's "the contents of" form).
pub fn with_slash(path: &Path) -> PathBuf {
    let mut bytes = path.as_os_str().as_bytes().to_vec();
    if bytes.last() != Some(&b'/') {
        bytes.push(b'/');
    }
    PathBuf::from(std::ffi::OsStr::from_bytes(&bytes))
}

/// Whether `name` is one of haul's partial-file names, `.haul-<hex>.part`.
pub fn is_part_name(name: &[u8]) -> bool {
    let Some(hex) = name
        .strip_prefix(b".haul-")
        .and_then(|rest| rest.strip_suffix(b".part"))
    else {
        return false;
    };
    !hex.is_empty() && hex.iter().all(u8::is_ascii_hexdigit)
}

/// Every `.haul-*.part` file under `dir` (not following symlinks); empty if `dir` is missing.
pub fn part_files(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(path) = stack.pop() {
        let Ok(entries) = fs::read_dir(&path) else {
            continue;
        };
        for entry in entries.flatten() {
            let child = entry.path();
            if is_part_name(entry.file_name().as_bytes()) {
                found.push(child.clone());
            }
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(child);
            }
        }
    }
    found
}

/// Asserts that no `.haul-*.part` file is left anywhere under `dir`.
pub fn assert_no_part_files(dir: &Path) {
    let parts = part_files(dir);
    assert!(parts.is_empty(), "partial files left behind: {parts:?}");
}

/// The names directly inside `dir`, sorted; empty if `dir` does not exist.
pub fn dir_names(dir: &Path) -> Vec<Vec<u8>> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut names: Vec<Vec<u8>> = entries
        .map(|e| e.unwrap().file_name().as_bytes().to_vec())
        .collect();
    names.sort();
    names
}

/// Asserts that `dir` is missing or empty: nothing was delivered into it.
pub fn assert_nothing_delivered(dir: &Path) {
    let names = dir_names(dir);
    let shown: Vec<String> = names.iter().map(|n| compare::show(n)).collect();
    assert!(
        names.is_empty(),
        "{dir:?} should have received nothing, but holds {shown:?}"
    );
}
