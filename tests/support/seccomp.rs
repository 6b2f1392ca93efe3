//! Runs `haul` under a seccomp filter that makes one system call fail as an older kernel or
//! a less able file system would: the fallbacks behind those failures get exercised on any
//! test machine.

use std::ffi::OsStr;
use std::os::unix::process::CommandExt;
use std::process::Command;

use super::haul_bin;

const LD_W_ABS: u16 = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
const JEQ_K: u16 = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
const JSET_K: u16 = (libc::BPF_JMP | libc::BPF_JSET | libc::BPF_K) as u16;
const RET_K: u16 = (libc::BPF_RET | libc::BPF_K) as u16;

/// Offsets in `struct seccomp_data`: the call's number, and the low 32 bits of its
/// arguments (little-endian machines; the tests run on x86_64 and aarch64).
const NR: u32 = 0;
fn arg_low(i: u32) -> u32 {
    16 + 8 * i
}

fn stmt(code: u16, k: u32) -> libc::sock_filter {
    libc::sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}

/// Jumps over `skip` instructions unless the accumulator equals `k`.
fn unless_eq(k: u32, skip: u8) -> libc::sock_filter {
    libc::sock_filter {
        code: JEQ_K,
        jt: 0,
        jf: skip,
        k,
    }
}

fn fail_with(errno: i32) -> libc::sock_filter {
    stmt(RET_K, libc::SECCOMP_RET_ERRNO | errno as u32)
}

fn allow() -> libc::sock_filter {
    stmt(RET_K, libc::SECCOMP_RET_ALLOW)
}

/// System call `nr` fails with `errno`; everything else is allowed.
pub fn failing_call(nr: libc::c_long, errno: i32) -> Vec<libc::sock_filter> {
    vec![
        stmt(LD_W_ABS, NR),
        unless_eq(nr as u32, 1),
        fail_with(errno),
        allow(),
    ]
}

/// `fcntl(fd, F_SETFL, flags)` with any of `bits` set in `flags` fails with `errno`, as
/// `fcntl` answers `O_DIRECT` on a file system that cannot do direct I/O (`EINVAL`).
pub fn failing_setfl(bits: libc::c_int, errno: i32) -> Vec<libc::sock_filter> {
    vec![
        stmt(LD_W_ABS, NR),
        unless_eq(libc::SYS_fcntl as u32, 5),
        stmt(LD_W_ABS, arg_low(1)),
        unless_eq(libc::F_SETFL as u32, 3),
        stmt(LD_W_ABS, arg_low(2)),
        libc::sock_filter {
            code: JSET_K,
            jt: 0,
            jf: 1,
            k: bits as u32,
        },
        fail_with(errno),
        allow(),
    ]
}

/// `haul ARGS` under `filter`.
pub fn haul_filtered(args: &[&OsStr], filter: Vec<libc::sock_filter>) -> Command {
    let mut cmd = Command::new(haul_bin());
    cmd.args(args);
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
