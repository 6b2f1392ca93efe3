//! A copy's fan-out through the test sshd: the `haul copy … --also …` command and the
//! far destinations it names.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::process::haul_bin;
use super::sshd::Sshd;
use super::BLOCK_SIZE_ARG;

/// `haul copy` through `sshd` (`--json -q`, the tests' block size): `args`, then
/// `--also` for each of `also`.
pub fn copy_cmd(sshd: &Sshd, args: &[&str], also: &[String]) -> Command {
    let mut cmd = Command::new(haul_bin());
    cmd.args(["copy", "-e", &sshd.rsh(), "--remote-haul", haul_bin()])
        .args(["--json", "-q", "--block-size", BLOCK_SIZE_ARG])
        .args(args);
    for a in also {
        cmd.args(["--also", a]);
    }
    cmd
}

/// `d` as a destination on the sshd's host.
pub fn far(d: &Path) -> String {
    format!("127.0.0.1:{}/", d.display())
}

/// `n` new directories `parent/NAME1`…`NAMEn`.
pub fn dirs(parent: &Path, name: &str, n: usize) -> Vec<PathBuf> {
    (1..=n)
        .map(|i| {
            let d = parent.join(format!("{name}{i}"));
            std::fs::create_dir(&d).unwrap();
            d
        })
        .collect()
}
