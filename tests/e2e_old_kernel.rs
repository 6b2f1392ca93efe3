//! haul on a kernel without `openat2` (before Linux 5.6: RHEL 8, Debian 10): the binary is
//! run under a seccomp filter that answers `openat2` with `ENOSYS`, as such a kernel does,
//! so both the sender (opening what it walked) and the receiver (creating beneath its
//! destination) must take the name-by-name walk of `haul::resolve`.

mod support;

use std::os::unix::process::CommandExt;
use std::process::Command;

use support::*;

/// `openat2`'s number: the same on every architecture (system calls from 424 on share one
/// table).
const SYS_OPENAT2: u32 = 437;

/// A seccomp program: `openat2` fails with `ENOSYS`, everything else is allowed.
fn no_openat2_filter() -> Vec<libc::sock_filter> {
    const LD_W_ABS: u16 = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
    const JEQ_K: u16 = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
    const RET_K: u16 = (libc::BPF_RET | libc::BPF_K) as u16;
    let stmt = |code, k| libc::sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    };
    vec![
        // seccomp_data.nr is at offset 0.
        stmt(LD_W_ABS, 0),
        libc::sock_filter {
            code: JEQ_K,
            jt: 0,
            jf: 1,
            k: SYS_OPENAT2,
        },
        stmt(RET_K, libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32),
        stmt(RET_K, libc::SECCOMP_RET_ALLOW),
    ]
}

/// `haul ARGS` that will see no `openat2`.
fn without_openat2(args: &[&std::ffi::OsStr]) -> Command {
    let mut cmd = Command::new(haul_bin());
    cmd.args(args);
    let filter = no_openat2_filter();
    // SAFETY: between fork and exec the closure makes only two prctl system calls (async-
    // signal-safe) on memory allocated before the fork (`filter`, moved in, and `prog`
    // pointing into it); there is no safe API to install a seccomp filter on a child.
    unsafe {
        cmd.pre_exec(move || {
            let prog = libc::sock_fprog {
                len: filter.len() as u16,
                filter: filter.as_ptr() as *mut libc::sock_filter,
            };
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
                || libc::prctl(
                    libc::PR_SET_SECCOMP,
                    libc::SECCOMP_MODE_FILTER,
                    &prog as *const libc::sock_fprog,
                ) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd
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
