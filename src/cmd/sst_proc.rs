//! The programs one end of a Galera state transfer runs (`haul recv`/`haul send` of this
//! same binary, mariadb-backup, my_print_defaults), each in a process group of its own so
//! that stopping it stops what it started (mbstream, mariadb-backup under `sh -c`).
//!
//! Every wait is bounded by the server: when the parent `mariadbd` is gone, or this process
//! is told to stop, the programs still running are stopped (SIGTERM to the group, SIGKILL
//! after [`STOP_GRACE`]) and the transfer fails. How long a transfer may take is the
//! transfer's own business (`haul recv --timeout` ends one whose sender stays away).

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::sleep;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;

use crate::error::{exit, Error, Result};

/// How often a wait looks at the child and the server.
const POLL: Duration = Duration::from_millis(200);
/// How long a stopped group has to exit after SIGTERM before it is killed.
pub(super) const STOP_GRACE: Duration = Duration::from_secs(5);

/// The process groups still running, for the stop handler.
#[derive(Clone, Default)]
pub(super) struct Groups(Arc<Mutex<Vec<i32>>>);

impl Groups {
    fn add(&self, pg: i32) {
        if let Ok(mut g) = self.0.lock() {
            g.push(pg);
        }
    }

    fn remove(&self, pg: i32) {
        if let Ok(mut g) = self.0.lock() {
            g.retain(|p| *p != pg);
        }
    }

    /// Stops every group still running (from the signal handler: no waiting here).
    pub(super) fn stop_all(&self) {
        if let Ok(g) = self.0.lock() {
            for pg in g.iter() {
                let _ = killpg(Pid::from_raw(*pg), Signal::SIGTERM);
            }
        }
    }
}

/// A program started for the transfer, in its own process group.
pub(super) struct Step {
    /// What it is, for messages ("haul recv", "mariadb-backup --prepare").
    pub what: String,
    /// The process.
    pub child: Child,
    groups: Groups,
}

impl Step {
    /// Starts `cmd` (stdin from /dev/null) as the leader of a new process group.
    pub(super) fn spawn(what: &str, mut cmd: Command, groups: &Groups) -> Result<Step> {
        cmd.stdin(Stdio::null()).process_group(0);
        let child = cmd.spawn().map_err(|e| Error::StateTransfer {
            message: format!("cannot start {what} ({cmd:?}): {e}"),
            code: exit::OTHER,
        })?;
        groups.add(child.id() as i32);
        Ok(Step {
            what: what.to_string(),
            child,
            groups: groups.clone(),
        })
    }

    /// Waits for the step to end; stops it (and fails) when `parent` is gone first.
    /// Fails when it exits other than 0, with `hint` saying what to do.
    pub(super) fn wait(mut self, parent: Option<u32>, hint: &str) -> Result<()> {
        let status = loop {
            match self.child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) => {}
                Err(e) => return Err(Error::io(format!("waiting for {}", self.what), e)),
            }
            if let Some(p) = parent.filter(|p| !alive(*p)) {
                self.stop();
                return Err(Error::StateTransfer {
                    message: format!(
                        "the server (pid {p}) is gone: {} stopped, the state transfer abandoned",
                        self.what
                    ),
                    code: exit::OTHER,
                });
            }
            sleep(POLL);
        };
        self.groups.remove(self.child.id() as i32);
        if status.success() {
            return Ok(());
        }
        Err(Error::StateTransfer {
            message: format!("{} failed ({}){hint}", self.what, describe(status)),
            code: status
                .code()
                .filter(|c| *c > 0 && *c < 126)
                .unwrap_or(exit::OTHER),
        })
    }

    /// Stops the step's whole group: SIGTERM, then SIGKILL after [`STOP_GRACE`].
    pub(super) fn stop(&mut self) {
        let pg = Pid::from_raw(self.child.id() as i32);
        let _ = killpg(pg, Signal::SIGTERM);
        let start = Instant::now();
        while start.elapsed() < STOP_GRACE {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            sleep(POLL);
        }
        // Whatever of the group is left (a command under sh -c) goes too.
        let _ = killpg(pg, Signal::SIGKILL);
        let _ = self.child.wait();
        self.groups.remove(pg.as_raw());
    }
}

impl Drop for Step {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.stop();
        }
    }
}

/// Whether process `pid` still exists.
fn alive(pid: u32) -> bool {
    let Ok(pid) = i32::try_from(pid) else {
        return false;
    };
    !matches!(
        kill(Pid::from_raw(pid), None),
        Err(nix::errno::Errno::ESRCH)
    )
}

fn describe(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => format!("exit status {c}"),
        (None, Some(s)) => format!("killed by signal {s}"),
        _ => "ended abnormally".into(),
    }
}

/// Runs `cmd` to its end (stdout captured, stderr to the error log) and returns stdout.
pub(super) fn output(what: &str, cmd: &mut Command, hint: &str) -> Result<String> {
    let out = cmd
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| Error::StateTransfer {
            message: format!("cannot start {what}: {e}{hint}"),
            code: exit::OTHER,
        })?;
    if !out.status.success() {
        return Err(Error::StateTransfer {
            message: format!("{what} failed ({}){hint}", describe(out.status)),
            code: exit::OTHER,
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `tool` on PATH or in the sbin directories, or an error naming the package to install.
pub(super) fn program(tool: &str, package: &str) -> Result<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/bin", "/usr/sbin", "/bin", "/sbin"].map(PathBuf::from))
        .map(|dir| dir.join(tool))
        .find(|p| p.is_file())
        .ok_or_else(|| Error::StateTransfer {
            message: format!("{tool} not found on PATH: install {package}"),
            code: exit::OTHER,
        })
}

/// `path` quoted for `sh -c`.
pub(super) fn sh_quote(path: &Path) -> String {
    sh_word(&path.display().to_string())
}

/// `s` quoted for `sh -c`.
pub(super) fn sh_word(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// One line for the server's error log, in the form `wsrep_sst_common` writes.
pub(super) fn log(msg: &str) {
    eprintln!("WSREP_SST: [INFO] haul: {msg}");
}
