//! A throwaway OpenSSH server for the end-to-end tests of remote copies: its own host key,
//! its own user key and authorized_keys in a temp dir, listening on a loopback port (or an
//! address inside a network namespace), killed by pid when dropped.
//!
//! Needs root (sshd's privilege separation) and the distribution's openssh-server and
//! openssh-client (`.ci/run` installs them). When either is missing, [`Sshd::start`] prints
//! a `SKIPPED` line and returns `None` — except under CI (`CI` set), where a missing sshd
//! fails the test instead of letting it pass silently.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How long sshd may take to say it listens.
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// A running sshd that accepts the test key for the current user (root).
pub struct Sshd {
    child: Child,
    dir: tempfile::TempDir,
    /// The port it listens on.
    pub port: u16,
    /// The address it listens on.
    pub addr: String,
    /// Everything sshd logged so far (for failure messages).
    log: Arc<Mutex<String>>,
}

fn find(candidates: &[&str]) -> Option<PathBuf> {
    candidates.iter().map(PathBuf::from).find(|p| p.is_file())
}

/// Where sshd is, if installed.
pub fn sshd_path() -> Option<PathBuf> {
    find(&["/usr/sbin/sshd", "/usr/bin/sshd", "/sbin/sshd"])
}

/// Whether the tests can run an sshd here; prints why not (or panics under CI).
pub fn available(test: &str) -> bool {
    let why = if !super::is_root() {
        Some("the tests do not run as root (sshd needs it)")
    } else if sshd_path().is_none() {
        Some("sshd is not installed (apt-get install -y openssh-server)")
    } else if find(&["/usr/bin/ssh", "/bin/ssh"]).is_none()
        || find(&["/usr/bin/ssh-keygen", "/bin/ssh-keygen"]).is_none()
    {
        Some("the ssh client is not installed (apt-get install -y openssh-client)")
    } else {
        None
    };
    match why {
        None => true,
        Some(why) if std::env::var_os("CI").is_some() => {
            panic!("{test}: needs sshd, but {why}; .ci/run should have installed it")
        }
        Some(why) => {
            eprintln!("SKIPPED: {test}: {why}");
            println!("SKIPPED: {test}: {why}");
            false
        }
    }
}

impl Sshd {
    /// Starts sshd on 127.0.0.1 (a free port); `None` after printing SKIPPED when this
    /// machine cannot run one.
    pub fn start(test: &str) -> Option<Sshd> {
        if !available(test) {
            return None;
        }
        Some(Sshd::start_at("127.0.0.1", None))
    }

    /// Starts sshd listening on `addr`, inside network namespace `netns` when given.
    pub fn start_at(addr: &str, netns: Option<&str>) -> Sshd {
        let mut last = String::new();
        for _ in 0..5 {
            match Sshd::try_start(addr, netns) {
                Ok(s) => return s,
                Err(log) => last = log,
            }
        }
        panic!("sshd did not start on {addr}:\n{last}");
    }

    fn try_start(addr: &str, netns: Option<&str>) -> Result<Sshd, String> {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        keygen(&d.join("host_key"));
        keygen(&d.join("user_key"));
        std::fs::copy(d.join("user_key.pub"), d.join("authorized_keys")).unwrap();
        let port = match netns {
            None => super::free_port(),
            // Nothing else listens inside a fresh namespace.
            Some(_) => 22000 + (std::process::id() % 20000) as u16,
        };
        let config = format!(
            "HostKey {d}/host_key\n\
             AuthorizedKeysFile {d}/authorized_keys\n\
             PermitRootLogin prohibit-password\n\
             StrictModes no\n\
             UsePAM no\n\
             PasswordAuthentication no\n\
             KbdInteractiveAuthentication no\n\
             PidFile none\n\
             ListenAddress {addr}\n\
             AcceptEnv TMPDIR\n\
             SetEnv XDG_CACHE_HOME={d}/far-cache\n\
             AllowTcpForwarding yes\n\
             MaxSessions 100\n\
             MaxStartups 100\n\
             LogLevel ERROR\n",
            d = d.display()
        );
        std::fs::write(d.join("sshd_config"), config).unwrap();
        // Privilege separation directory, which packages create at boot only.
        let _ = std::fs::create_dir_all("/run/sshd");
        let sshd = sshd_path().expect("sshd");
        let mut cmd = match netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns]).arg(&sshd);
                c
            }
            None => Command::new(&sshd),
        };
        // sshd insists on being started by its absolute path.
        cmd.arg("-D")
            .arg("-e")
            .arg("-f")
            .arg(d.join("sshd_config"))
            .arg("-p")
            .arg(port.to_string())
            .arg("-o")
            .arg("LogLevel=INFO")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().map_err(|e| format!("cannot start sshd: {e}"))?;
        let log = Arc::new(Mutex::new(String::new()));
        let (ready_tx, ready_rx) = mpsc::channel();
        let err = child.stderr.take().unwrap();
        let log2 = Arc::clone(&log);
        std::thread::spawn(move || {
            let mut r = BufReader::new(err);
            let mut line = String::new();
            while r.read_line(&mut line).map(|n| n > 0).unwrap_or(false) {
                if line.contains("Server listening") {
                    let _ = ready_tx.send(true);
                }
                log2.lock().unwrap().push_str(&line);
                line.clear();
            }
            let _ = ready_tx.send(false);
        });
        match ready_rx.recv_timeout(START_TIMEOUT) {
            Ok(true) => Ok(Sshd {
                child,
                dir,
                port,
                addr: addr.to_string(),
                log,
            }),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                let text = log.lock().unwrap().clone();
                Err(text)
            }
        }
    }

    /// The private key that logs in.
    pub fn key(&self) -> PathBuf {
        self.dir.path().join("user_key")
    }

    /// A directory that lives as long as the server (for wrapper scripts and the like).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The ssh words that reach this server non-interactively, for `-e`.
    pub fn rsh(&self) -> String {
        format!(
            "ssh -p {} -i {} -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null \
             -o BatchMode=yes -o LogLevel=ERROR",
            self.port,
            self.key().display()
        )
    }

    /// The far user's cache base (`XDG_CACHE_HOME` in its sessions), so that uploads are
    /// cached here and not in the real home directory.
    pub fn far_cache(&self) -> PathBuf {
        self.dir.path().join("far-cache")
    }

    /// What sshd logged so far.
    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }
}

impl Drop for Sshd {
    fn drop(&mut self) {
        // Our own child, not yet reaped: its pid is still ours.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn keygen(path: &Path) {
    let st = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-f"])
        .arg(path)
        .stdin(Stdio::null())
        .status()
        .expect("run ssh-keygen");
    assert!(st.success(), "ssh-keygen failed");
}

/// The `haul serve` process that holds `dir` open (the far end receiving into it).
pub fn far_end_in(dir: &Path) -> Option<u32> {
    let dir = dir.canonicalize().ok()?;
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|p| {
        let pid: u32 = p.file_name().to_str()?.parse().ok()?;
        let cmdline = std::fs::read(p.path().join("cmdline")).ok()?;
        if !String::from_utf8_lossy(&cmdline).contains("serve") {
            return None;
        }
        let holds = std::fs::read_dir(p.path().join("fd"))
            .ok()?
            .flatten()
            .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|l| l.starts_with(&dir)));
        holds.then_some(pid)
    })
}

/// SIGKILLs the `haul serve` process that holds `dir` open (see [`far_end_in`]).
pub fn kill_far_end_in(dir: &Path) {
    let pid = far_end_in(dir).expect("the far end's process");
    // SAFETY: plain kill(2) of a process this test started (through its sshd); no `kill`
    // binary needed (procps is not among what CI installs).
    let r = unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
    assert_eq!(r, 0, "kill -KILL {pid}");
}
