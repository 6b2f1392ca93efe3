//! The shared network-namespace test bed (`../shared/testbed/netlab`) under a test's own
//! namespace names and addresses, so that tests running at once do not meet; brought
//! down when dropped, however the test ends.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// netlab with namespaces `NAME-a`, `NAME-b` and addresses `SUBNET.1`, `SUBNET.2`.
pub struct Netbed {
    script: PathBuf,
    name: &'static str,
    subnet: &'static str,
    up: bool,
}

impl Netbed {
    /// The test bed, when this machine can run it (the script is there, we are root, and
    /// `ip netns` works).
    pub fn new(name: &'static str, subnet: &'static str) -> Option<Netbed> {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/testbed/netlab");
        let usable = script.is_file()
            && super::is_root()
            && Command::new("ip")
                .args(["netns", "list"])
                .output()
                .is_ok_and(|o| o.status.success());
        usable.then_some(Netbed {
            script,
            name,
            subnet,
            up: false,
        })
    }

    /// Runs `netlab up`; the namespaces go down when `self` is dropped.
    pub fn up(&mut self) -> Output {
        self.up = true;
        self.cmd("up").output().expect("run netlab")
    }

    fn cmd(&self, arg: &str) -> Command {
        let mut c = Command::new("bash");
        c.arg(&self.script)
            .arg(arg)
            .env("NETLAB_A", format!("{}-a", self.name))
            .env("NETLAB_B", format!("{}-b", self.name))
            .env("NETLAB_IP_A", format!("{}.1", self.subnet))
            .env("NETLAB_IP_B", format!("{}.2", self.subnet));
        c
    }
}

impl Drop for Netbed {
    fn drop(&mut self) {
        if self.up {
            let _ = self.cmd("down").output();
        }
    }
}

/// Several hosts on one virtual switch, each on its own (optionally rate-capped) link:
/// namespaces `NAME-1` … `NAME-N` at `SUBNET.1` … (`tests/support/netlan`, netlab's sibling
/// for more than two hosts); brought down when dropped.
pub struct Lan {
    script: PathBuf,
    name: &'static str,
    hosts: usize,
    /// `SUBNET` (three octets).
    pub subnet: &'static str,
}

impl Lan {
    /// Brings the hosts up; None when this machine cannot (not root, no `ip netns`).
    pub fn up(
        name: &'static str,
        subnet: &'static str,
        hosts: usize,
        rate: Option<&str>,
    ) -> Option<Lan> {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/netlan");
        let usable = super::is_root()
            && Command::new("ip")
                .args(["netns", "list"])
                .output()
                .is_ok_and(|o| o.status.success());
        if !usable {
            return None;
        }
        let lan = Lan {
            script,
            name,
            hosts,
            subnet,
        };
        let n = hosts.to_string();
        let mut args = vec!["up", name, subnet, &n];
        args.extend(rate);
        let out = Command::new("bash")
            .arg(&lan.script)
            .args(&args)
            .output()
            .expect("run netlan");
        assert!(
            out.status.success(),
            "netlan up failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Some(lan)
    }

    /// Host `i`'s namespace (1-based).
    pub fn ns(&self, i: usize) -> String {
        format!("{}-{i}", self.name)
    }

    /// Host `i`'s address.
    pub fn ip(&self, i: usize) -> String {
        format!("{}.{i}", self.subnet)
    }
}

impl Drop for Lan {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(&self.script)
            .args(["down", self.name, &self.hosts.to_string()])
            .output();
    }
}
