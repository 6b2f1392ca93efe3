//! The shared long-fat-network emulator (`../shared/testbed/wanlab`, see its WANLAB.md)
//! under a test's own lab name: namespaces `NAME-a` (198.19.0.1) and `NAME-b`
//! (198.19.0.2) joined by a delay line with a rate cap, loss and live changes; brought down
//! when dropped, however the test ends.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The address of namespace `NAME-a`.
pub const IP_A: &str = "198.19.0.1";
/// The address of namespace `NAME-b`.
pub const IP_B: &str = "198.19.0.2";

/// A wanlab lab that is up.
pub struct Wanlab {
    script: PathBuf,
    /// The lab's name (its namespaces are `NAME-a` and `NAME-b`).
    pub name: String,
}

impl Wanlab {
    /// Brings lab `name` up with link options `args` (`--rtt 150ms --loss 1% ...`); None
    /// (after printing `SKIPPED: test: why`) when this machine cannot run it.
    pub fn up(test: &str, name: &str, args: &[&str]) -> Option<Wanlab> {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/testbed/wanlab");
        let skip = |why: &str| {
            println!("SKIPPED: {test}: {why}");
            eprintln!("SKIPPED: {test}: {why}");
        };
        if !script.is_file() || !super::is_root() || !Path::new("/dev/net/tun").exists() {
            skip("the wanlab test bed is not usable here (needs it, root and /dev/net/tun)");
            return None;
        }
        let lab = Wanlab {
            script,
            name: name.to_string(),
        };
        // A lab of this name left by a killed run would make `up` fail.
        let _ = lab.cmd(&["down"]).output();
        let out = lab.cmd(&["up"]).args(args).output().expect("run wanlab");
        if !out.status.success() {
            let why = String::from_utf8_lossy(&out.stderr).into_owned();
            // Nothing of it may stay (Drop brings it down).
            drop(lab);
            skip(&format!("wanlab up failed: {why}"));
            return None;
        }
        Some(lab)
    }

    /// Namespace `NAME-a` (side = "a") or `NAME-b`.
    pub fn ns(&self, side: &str) -> String {
        format!("{}-{side}", self.name)
    }

    /// Changes the link live (`--loss 100%` for an outage, `--loss 0` to end it).
    pub fn set(&self, args: &[&str]) {
        let out = self
            .cmd(&["set"])
            .args(args)
            .output()
            .expect("run wanlab set");
        assert!(
            out.status.success(),
            "wanlab set {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// The congestion control of every established TCP connection from `NAME-a` to
    /// `NAME-b` that has sent more than 64 KiB (as `ss -ti` in `NAME-a` prints it): a
    /// handshake sends less, and runs before a `--cc` choice is made.
    pub fn congestion_a_to_b(&self) -> Vec<String> {
        let out = Command::new("ip")
            .args([
                "netns",
                "exec",
                &self.ns("a"),
                "ss",
                "-Htin",
                "state",
                "established",
            ])
            .args(["dst", IP_B])
            .output()
            .expect("run ss");
        let text = String::from_utf8_lossy(&out.stdout);
        // Each connection is two lines: addresses, then its info ("... bbr wscale:...").
        let sent = |l: &str| -> u64 {
            l.split_whitespace()
                .find_map(|w| w.strip_prefix("bytes_sent:"))
                .and_then(|n| n.parse().ok())
                .unwrap_or(0)
        };
        text.lines()
            .filter(|l| l.contains("wscale:") || l.contains("rto:"))
            .filter(|l| sent(l) > 64 << 10)
            .filter_map(|l| {
                l.split_whitespace()
                    .find(|w| ["bbr", "cubic", "reno", "bbr2", "bbr3"].contains(w))
                    .map(str::to_owned)
            })
            .collect()
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new("bash");
        c.arg(&self.script)
            .arg(args[0])
            .arg(&self.name)
            .args(&args[1..]);
        c
    }
}

impl Drop for Wanlab {
    fn drop(&mut self) {
        let _ = self.cmd(&["down"]).output();
    }
}
