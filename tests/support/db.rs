//! Throwaway database servers for the end-to-end tests: the service account they run as,
//! a scratch directory it can traverse, a server stopped when dropped, and the PostgreSQL
//! and MariaDB programs with the few calls the tests make (init, start, query).
//!
//! The servers run as the packages' service accounts (`postgres`, `mysql`) through `setpriv`
//! when the tests run as root (postgres refuses root), else as the current user. They are
//! never the packages' own services: nothing here reads /etc/mysql or the cluster configs.
//! A missing tool is a failure naming the Debian package to install, never a skip: CI
//! installs them in `.ci/run`.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use super::is_root;
use super::piped::{Proc, SpawnProc};

/// How long a database server may take to say it is ready.
pub const SERVER_START_TIMEOUT: Duration = Duration::from_secs(120);
/// How long a server may take to stop after its shutdown signal before it is killed.
pub const SERVER_STOP_TIMEOUT: Duration = Duration::from_secs(30);

// ---- PostgreSQL ---------------------------------------------------------------------------

/// The port number names the socket file; with no TCP listener and a private socket
/// directory per server, it cannot collide with anything.
pub const PG_PORT: &str = "5432";

/// The PostgreSQL programs: the server's from the newest /usr/lib/postgresql/*/bin.
pub struct PgTools {
    pub bin: PathBuf,
    pub basebackup: PathBuf,
}

impl PgTools {
    pub fn find() -> PgTools {
        let mut found: Vec<(u32, PathBuf)> = fs::read_dir("/usr/lib/postgresql")
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| {
                let version = e.file_name().to_str()?.parse().ok()?;
                let bin = e.path().join("bin");
                bin.join("postgres").is_file().then_some((version, bin))
            })
            .collect();
        found.sort();
        let Some((_, bin)) = found.pop() else {
            panic!(
                "no PostgreSQL server in /usr/lib/postgresql/*/bin: \
                 apt-get install -y postgresql (.ci/run installs it)"
            );
        };
        for tool in ["initdb", "postgres", "psql", "pg_basebackup"] {
            assert!(
                bin.join(tool).is_file(),
                "{} is missing: apt-get install -y postgresql",
                bin.join(tool).display()
            );
        }
        PgTools {
            basebackup: bin.join("pg_basebackup"),
            bin,
        }
    }

    pub fn initdb(&self, account: &Account, data: &Path, cwd: &Path) {
        run_ok(
            account
                .command(&self.bin.join("initdb"))
                .args(["-D"])
                .arg(data)
                .args(["-A", "trust", "-U", "postgres", "-E", "UTF8", "--no-sync"])
                .current_dir(cwd),
            "initdb",
        );
    }

    /// Starts `postgres` on `data`, listening only on a socket in `sock`.
    pub fn start(&self, account: &Account, data: &Path, sock: &Path, cwd: &Path) -> Server {
        self.start_until(account, (data, sock, cwd), "ready to accept connections")
    }

    /// Starts `postgres` on a standby's `data` (with `standby.signal`): it is up when it
    /// accepts read-only connections.
    pub fn start_standby(&self, account: &Account, data: &Path, sock: &Path, cwd: &Path) -> Server {
        let ready = "ready to accept read-only connections";
        self.start_until(account, (data, sock, cwd), ready)
    }

    fn start_until(
        &self,
        account: &Account,
        (data, sock, cwd): (&Path, &Path, &Path),
        ready: &str,
    ) -> Server {
        let mut cmd = account.command(&self.bin.join("postgres"));
        cmd.arg("-D")
            .arg(data)
            .args(["-p", PG_PORT, "-c", "listen_addresses="])
            .arg("-c")
            .arg(format!("unix_socket_directories={}", sock.display()))
            .args(["-c", "fsync=off", "-c", "logging_collector=off"])
            .current_dir(cwd);
        // SIGINT is PostgreSQL's fast shutdown: it stops its backends too.
        Server::start("postgres", cmd, ready, libc::SIGINT)
    }

    /// Runs `sql` as the superuser over the socket in `sock`; returns the unaligned output.
    pub fn psql(&self, sock: &Path, sql: &str) -> String {
        run_ok(
            Command::new(self.bin.join("psql"))
                .arg("-h")
                .arg(sock)
                .args(["-p", PG_PORT, "-U", "postgres", "-d", "postgres"])
                .args(["-X", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-c", sql]),
            "psql",
        )
    }
}

// ---- MariaDB ------------------------------------------------------------------------------

/// The MariaDB programs.
pub struct MariaTools {
    pub server: PathBuf,
    pub install_db: PathBuf,
    pub client: PathBuf,
    pub backup: PathBuf,
    pub mbstream: PathBuf,
}

impl MariaTools {
    pub fn find() -> MariaTools {
        MariaTools {
            server: need("mariadbd", "mariadb-server"),
            install_db: need("mariadb-install-db", "mariadb-server"),
            client: need("mariadb", "mariadb-client"),
            backup: need("mariadb-backup", "mariadb-backup"),
            mbstream: need("mbstream", "mariadb-backup"),
        }
    }

    pub fn install_db(&self, account: &Account, data: &Path, cwd: &Path) {
        run_ok(
            account
                .command(&self.install_db)
                .arg("--no-defaults")
                .arg(format!("--datadir={}", data.display()))
                .arg(format!("--tmpdir={}", server_tmp(account, data).display()))
                .args(["--auth-root-authentication-method=normal", "--skip-test-db"])
                .current_dir(cwd),
            "mariadb-install-db",
        );
    }

    /// Starts `mariadbd` on `data` with no TCP listener, its socket at `sock`.
    pub fn start(&self, account: &Account, data: &Path, sock: &Path, cwd: &Path) -> Server {
        let mut cmd = account.command(&self.server);
        cmd.arg("--no-defaults")
            .arg(format!("--datadir={}", data.display()))
            .arg(format!("--socket={}", sock.display()))
            .arg(format!("--tmpdir={}", server_tmp(account, data).display()))
            .arg(format!(
                "--pid-file={}",
                data.join("mariadbd.pid").display()
            ))
            .args(["--skip-networking", "--innodb-buffer-pool-size=32M"])
            .args([
                "--innodb-log-file-size=16M",
                "--innodb-flush-log-at-trx-commit=2",
            ])
            .current_dir(cwd);
        // Without --log-error the log goes to stderr, where Server reads it.
        Server::start("mariadbd", cmd, "ready for connections", libc::SIGTERM)
    }

    /// Runs `sql` as root over the socket `sock`; returns the tab-separated output.
    pub fn sql(&self, sock: &Path, sql: &str) -> String {
        run_ok(
            Command::new(&self.client)
                .arg("--no-defaults")
                .arg(format!("--socket={}", sock.display()))
                .args(["--user=root", "--batch", "--skip-column-names", "-e", sql]),
            "mariadb",
        )
    }
}

// ---- servers and accounts -----------------------------------------------------------------

/// A database server we started; stopped (then killed, if it lingers) when dropped, so a
/// panicking test leaves no server behind.
pub struct Server {
    proc: Proc,
    stop_signal: libc::c_int,
}

impl Server {
    /// Starts `cmd` and waits until its stderr says `ready`.
    pub fn start(name: &str, mut cmd: Command, ready: &str, stop_signal: libc::c_int) -> Server {
        cmd.stdin(Stdio::null()).stdout(Stdio::null());
        let mut server = Server {
            proc: cmd.spawn_proc(name),
            stop_signal,
        };
        server.proc.wait_stderr_for(ready, SERVER_START_TIMEOUT);
        server
    }
}

impl Server {
    /// Its log (stderr) so far.
    pub fn log(&self) -> String {
        self.proc.stderr_so_far()
    }

    /// A server started by the caller (already up), stopped with `stop_signal` when
    /// dropped.
    pub fn adopt(proc: Proc, stop_signal: libc::c_int) -> Server {
        Server { proc, stop_signal }
    }

    /// Waits for a log line containing `needle`; panics if the server exits or
    /// `timeout` passes first.
    pub fn wait_log_for(&mut self, needle: &str, timeout: Duration) {
        self.proc.wait_stderr_for(needle, timeout);
    }

    /// Kills it at once (SIGKILL), as a crash would.
    pub fn kill(&mut self) {
        self.proc.stop(libc::SIGKILL, Duration::from_secs(5));
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.proc.stop(self.stop_signal, SERVER_STOP_TIMEOUT);
    }
}

/// Whom the servers run as: a service account (through `setpriv`) when we are root, else
/// ourselves.
pub struct Account {
    ids: Option<(u32, u32)>,
}

impl Account {
    /// The account `name` from the package `package` when root; panics naming the package
    /// when it does not exist.
    pub fn for_service(name: &str, package: &str) -> Account {
        if !is_root() {
            return Account { ids: None };
        }
        need("setpriv", "util-linux");
        let passwd = fs::read_to_string("/etc/passwd").expect("read /etc/passwd");
        let ids = passwd.lines().find_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f.len() > 3 && f[0] == name).then(|| (f[2].parse().ok(), f[3].parse().ok()))
        });
        let Some((Some(uid), Some(gid))) = ids else {
            panic!(
                "no '{name}' user to run the server as (the tests run as root): \
                 apt-get install -y {package}"
            );
        };
        Account {
            ids: Some((uid, gid)),
        }
    }

    /// `program`, run as the account.
    pub fn command(&self, program: &Path) -> Command {
        let Some((uid, gid)) = self.ids else {
            return Command::new(program);
        };
        let mut cmd = Command::new("setpriv");
        cmd.arg(format!("--reuid={uid}"))
            .arg(format!("--regid={gid}"))
            .arg("--clear-groups")
            .arg(program);
        cmd
    }

    /// `program`, run as the account, as the start of a `sh -c` command line.
    pub fn shell_prefix(&self, program: &Path) -> String {
        match self.ids {
            None => sh_quote(program),
            Some((uid, gid)) => format!(
                "setpriv --reuid={uid} --regid={gid} --clear-groups {}",
                sh_quote(program)
            ),
        }
    }

    /// Makes `path` the account's.
    pub fn own(&self, path: &Path) {
        if let Some((uid, gid)) = self.ids {
            std::os::unix::fs::chown(path, Some(uid), Some(gid))
                .unwrap_or_else(|e| panic!("chown {}: {e}", path.display()));
        }
    }
}

/// The test's temp dir, traversable by the service accounts.
pub struct Scratch {
    dir: tempfile::TempDir,
}

impl Scratch {
    pub fn new() -> Scratch {
        let dir = tempfile::Builder::new()
            .prefix("haul-pipedb-")
            .tempdir()
            .expect("temp dir");
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o711)).unwrap();
        Scratch { dir }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// A new mode-0700 directory `name` owned by `account`.
    pub fn owned_dir(&self, name: &str, account: &Account) -> PathBuf {
        let path = self.dir.path().join(name);
        if !path.exists() {
            fs::create_dir(&path).unwrap_or_else(|e| panic!("mkdir {}: {e}", path.display()));
            fs::set_permissions(&path, fs::Permissions::from_mode(0o700)).unwrap();
            account.own(&path);
        }
        path
    }
}

/// A server's own temporary directory beside its data directory (`DATA-tmp`, made for
/// `account`): with /tmp shared by every test and process on the machine, a bootstrap once
/// failed on "Error on delete of '/tmp/#sql-temptable-…'" (a file removed under it).
fn server_tmp(account: &Account, data: &Path) -> PathBuf {
    let mut name = data.file_name().unwrap_or_default().to_os_string();
    name.push("-tmp");
    let path = data.with_file_name(name);
    if !path.exists() {
        fs::create_dir_all(&path).unwrap_or_else(|e| panic!("mkdir {}: {e}", path.display()));
        fs::set_permissions(&path, fs::Permissions::from_mode(0o700)).unwrap();
        account.own(&path);
    }
    path
}

/// The path of `tool` on PATH or in the sbin directories; panics naming its package.
pub fn need(tool: &str, package: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/usr/bin", "/sbin", "/bin"].map(PathBuf::from))
        .map(|dir| dir.join(tool))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!("`{tool}` is not installed: apt-get install -y {package} (.ci/run installs it)")
        })
}

/// `path` quoted for `sh -c`.
pub fn sh_quote(path: &Path) -> String {
    format!("'{}'", path.display().to_string().replace('\'', r"'\''"))
}

/// Runs `cmd` to completion; panics with its output unless it exits 0. Returns stdout.
pub fn run_ok(cmd: &mut Command, what: &str) -> String {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot start {what} ({cmd:?}): {e}"));
    assert!(
        out.status.success(),
        "{what} failed ({:?}): {cmd:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}
