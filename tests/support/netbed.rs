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
