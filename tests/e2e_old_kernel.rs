//! haul on a kernel without `openat2` (before Linux 5.6: RHEL 8, Debian 10): the binary is
//! run under a seccomp filter that answers `openat2` with `ENOSYS`, as such a kernel does,
//! so both the sender (opening what it walked) and the receiver (creating beneath its
//! destination) must take the name-by-name walk of `haul::resolve`.

mod support;

use std::process::Command;

use support::*;

/// `openat2`'s number: the same on every architecture (system calls from 424 on share one
/// table).
const SYS_OPENAT2: libc::c_long = 437;

/// `haul ARGS` that will see no `openat2`.
fn without_openat2(args: &[&std::ffi::OsStr]) -> Command {
    seccomp::haul_filtered(args, seccomp::failing_call(SYS_OPENAT2, libc::ENOSYS))
}

/// Before the receiver had the fallback, the first copy failed: "openat2: Function not
/// implemented" on the destination.
#[test]
fn a_tree_is_copied_without_openat2() {
    let tmp = tempfile::tempdir().unwrap();
    let src = build_tree(tmp.path(), "src", &TreeOptions::small());
    let dest = tmp.path().join("dest");
    let block = ["--block-size", BLOCK_SIZE_ARG].map(std::ffi::OsStr::new);
    let mut args = vec![
        std::ffi::OsStr::new("copy"),
        src.as_os_str(),
        dest.as_os_str(),
    ];
    args.extend(block);
    let out = Running::spawn("copy", without_openat2(&args)).wait();
    out.assert_code(0);
    assert_trees_equal(&src, &dest.join("src"));
    assert_no_part_files(&dest);

    // Again into the same destination: the quick check opens every file there.
    let out = Running::spawn("copy", without_openat2(&args)).wait();
    out.assert_code(0);
    assert_trees_equal(&src, &dest.join("src"));
}
