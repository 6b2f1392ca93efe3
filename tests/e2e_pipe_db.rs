//! Pipe mode carrying real database backups: each test runs its own throwaway database
//! server (temp data dir, private unix socket, no TCP listener), fills it with known rows,
//! streams a hot physical backup through `haul send` → `haul recv` over loopback (TLS on,
//! default options), restores it, starts a second server on the copy and checks that the
//! data answer the same.
//!
//! - PostgreSQL: `pg_basebackup -Ft -D -` (one tar on stdout) piped into `haul send -`;
//!   `haul recv -` piped into `tar -x`. Exercises the stdin and stdout ends.
//! - MariaDB: `haul send --from-command 'mariadb-backup --backup --stream=xbstream'` and
//!   `haul recv --to-command 'mbstream -x'`, then `mariadb-backup --prepare`. Exercises the
//!   command ends.
//!
//! Both sides must exit 0 and report the same `stream_blake3` in `--json`.
//!
//! The servers run as the packages' service accounts (`postgres`, `mysql`) through `setpriv`
//! when the tests run as root (postgres refuses root), else as the current user. They are
//! never the packages' own services: nothing here reads /etc/mysql or the cluster configs.
//! A missing tool is a failure naming the Debian package to install, never a skip: CI
//! installs them in `.ci/run`.
//!
//! Not here: reconnects, tampering and other failure paths of pipe mode; these tests only
//! prove that real backup formats arrive intact and restore.

mod support;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use support::piped::{Finished, Proc, SpawnProc};
use support::*;

/// How long a database server may take to say it is ready.
const SERVER_START_TIMEOUT: Duration = Duration::from_secs(120);
/// How long a server may take to stop after its shutdown signal before it is killed.
const SERVER_STOP_TIMEOUT: Duration = Duration::from_secs(30);

#[test]
fn postgres_basebackup_through_stdin_and_stdout() {
    let pg = PgTools::find();
    let account = Account::for_service("postgres", "postgresql");
    let tmp = Scratch::new();

    // The source cluster, with known rows.
    let src = tmp.owned_dir("src", &account);
    let src_sock = tmp.owned_dir("src-sock", &account);
    pg.initdb(&account, &src, tmp.path());
    let server = pg.start(&account, &src, &src_sock, tmp.path());
    pg.psql(
        &src_sock,
        "CREATE TABLE items AS \
           SELECT g AS id, md5(g::text) AS v FROM generate_series(1, 60000) AS g; \
         CREATE INDEX ON items (v); \
         CREATE TABLE events (id serial PRIMARY KEY, at timestamptz, payload jsonb); \
         INSERT INTO events (at, payload) \
           SELECT '2024-01-01'::timestamptz + g * interval '1 minute', \
                  jsonb_build_object('n', g, 's', repeat('x', g % 50)) \
           FROM generate_series(1, 20000) AS g; \
         CREATE TABLE empty_one (id int);",
    );
    let expected = pg.psql(&src_sock, PG_FINGERPRINT);
    assert!(
        expected.contains("60000") && expected.contains("20000"),
        "unexpected source fingerprint: {expected}"
    );

    // Receiving end: haul recv - | tar -x (as the account, so the files are its own).
    let copy = tmp.owned_dir("copy", &account);
    let ticket = tmp.path().join("ticket");
    let mut tar = account
        .command(&need("tar", "tar"))
        .args(["-x", "-f", "-", "-C"])
        .arg(&copy)
        .current_dir(tmp.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn_proc("tar -x");
    let tar_in = tar.child.stdin.take().expect("tar stdin");
    let mut recv = Command::new(haul_bin())
        .args([
            "recv",
            "-",
            "--json",
            "--listen",
            "127.0.0.1:0",
            "--ticket-file",
        ])
        .arg(&ticket)
        .stdin(Stdio::null())
        .stdout(tar_in)
        .spawn_proc("haul recv -");
    let line = recv.first_stderr_line(support::process::TICKET_TIMEOUT);
    assert!(
        line.starts_with("haul1-"),
        "haul recv - should print the ticket first on stderr, got {line:?}"
    );

    // Sending end: pg_basebackup -D - -Ft | haul send -.
    let mut backup = Command::new(&pg.basebackup)
        .args(["-h"])
        .arg(&src_sock)
        .args(["-p", PG_PORT, "-U", "postgres", "-D", "-", "-F", "t"])
        .args(["-X", "fetch", "-c", "fast"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn_proc("pg_basebackup");
    let backup_out = backup.child.stdout.take().expect("pg_basebackup stdout");
    let send = Command::new(haul_bin())
        .args(["send", "-", "--json", "--ticket-file"])
        .arg(&ticket)
        .stdin(backup_out)
        .stdout(Stdio::piped())
        .spawn_proc("haul send -");

    let backup = backup.finish();
    backup.assert_success();
    let sent = send.finish();
    sent.assert_success();
    let received = recv.finish();
    received.assert_success();
    tar.finish().assert_success();
    assert_same_stream(&sent.stdout, received.stderr.as_bytes(), &sent, &received);
    drop(server);

    // A second server on the copy must replay the fetched WAL and answer the same.
    assert!(
        copy.join("backup_label").is_file(),
        "the extracted copy has no backup_label: not a base backup"
    );
    let copy_sock = tmp.owned_dir("copy-sock", &account);
    let restored = pg.start(&account, &copy, &copy_sock, tmp.path());
    let got = pg.psql(&copy_sock, PG_FINGERPRINT);
    assert_eq!(got, expected, "the restored cluster answers differently");
    drop(restored);
}

#[test]
fn mariadb_backup_through_from_command_and_to_command() {
    let my = MariaTools::find();
    let account = Account::for_service("mysql", "mariadb-server");
    let tmp = Scratch::new();

    // The source server, with known rows in InnoDB, Aria and MyISAM tables.
    let src = tmp.owned_dir("src", &account);
    let src_sock = tmp.path().join("src-sock").join("mysqld.sock");
    tmp.owned_dir("src-sock", &account);
    my.install_db(&account, &src, tmp.path());
    let server = my.start(&account, &src, &src_sock, tmp.path());
    my.sql(
        &src_sock,
        "CREATE DATABASE shop; \
         USE shop; \
         CREATE TABLE shop.items (id INT PRIMARY KEY, v CHAR(32), KEY (v)) ENGINE=InnoDB; \
         INSERT INTO shop.items SELECT seq, md5(seq) FROM seq_1_to_60000; \
         CREATE TABLE shop.notes (id INT PRIMARY KEY, body TEXT) ENGINE=Aria; \
         INSERT INTO shop.notes SELECT seq, repeat(char(65 + seq % 26), seq % 300) \
           FROM seq_1_to_5000; \
         CREATE TABLE shop.legacy (id INT, k VARCHAR(20)) ENGINE=MyISAM; \
         INSERT INTO shop.legacy SELECT seq, concat('k', seq) FROM seq_1_to_3000; \
         CREATE TABLE shop.empty_one (id INT) ENGINE=InnoDB;",
    );
    let expected = my.sql(&src_sock, MARIA_FINGERPRINT);
    assert!(
        expected.contains("60000") && expected.contains("5000") && expected.contains("3000"),
        "unexpected source fingerprint: {expected}"
    );

    // Receiving end: haul recv --to-command 'mbstream -x -C DIR' (as the account).
    let copy = tmp.owned_dir("copy", &account);
    let ticket = tmp.path().join("ticket");
    let to_command = format!(
        "{} -x -C {}",
        account.shell_prefix(&my.mbstream),
        sh_quote(&copy)
    );
    let mut recv_cmd = Haul::new().command("recv");
    recv_cmd
        .args([
            "--json",
            "--listen",
            "127.0.0.1:0",
            "--to-command",
            &to_command,
        ])
        .arg("--ticket-file")
        .arg(&ticket)
        .current_dir(tmp.path());
    let mut recv = Running::spawn("recv --to-command", recv_cmd);
    let line = recv.first_line().expect("haul recv printed no ticket");
    assert!(line.starts_with(b"haul1-"), "not a ticket: {line:?}");

    // Sending end: haul send --from-command 'mariadb-backup --backup --stream=xbstream'.
    let backup_tmp = tmp.owned_dir("backup-tmp", &account);
    let from_command = format!(
        "{} --no-defaults --backup --stream=xbstream --user=root --socket={} \
         --datadir={} --target-dir={} --tmpdir={}",
        account.shell_prefix(&my.backup),
        sh_quote(&src_sock),
        sh_quote(&src),
        sh_quote(&backup_tmp),
        sh_quote(&backup_tmp),
    );
    let mut send_cmd = Haul::new().command("send");
    send_cmd
        .args(["--json", "--from-command", &from_command])
        .arg("--ticket-file")
        .arg(&ticket)
        .current_dir(tmp.path());
    let sent = Running::spawn("send --from-command", send_cmd).wait();
    let received = recv.wait();
    sent.assert_code(0);
    received.assert_code(0);
    assert_same_stream(
        &sent.stdout,
        received.stdout_after_first_line(),
        &sent,
        &received,
    );
    drop(server);

    // Prepare the copy, start a second server on it: the checksums must match.
    run_ok(
        account
            .command(&my.backup)
            .args(["--no-defaults", "--prepare"])
            .arg(format!("--target-dir={}", copy.display()))
            .current_dir(tmp.path()),
        "mariadb-backup --prepare",
    );
    let copy_sock = tmp.path().join("copy-sock").join("mysqld.sock");
    tmp.owned_dir("copy-sock", &account);
    let restored = my.start(&account, &copy, &copy_sock, tmp.path());
    let got = my.sql(&copy_sock, MARIA_FINGERPRINT);
    assert_eq!(got, expected, "the restored server answers differently");
    drop(restored);
}

// ---- comparing the two ends ---------------------------------------------------------------

/// Panics unless both `--json` objects carry the same, well-formed `stream_blake3`.
fn assert_same_stream(sent_json: &[u8], recv_json: &[u8], sent: &dyn Show, recv: &dyn Show) {
    let ours = stream_blake3(sent_json)
        .unwrap_or_else(|| panic!("no stream_blake3 in send --json\n{}", sent.show()));
    let theirs = stream_blake3(recv_json)
        .unwrap_or_else(|| panic!("no stream_blake3 in recv --json\n{}", recv.show()));
    assert_eq!(
        ours,
        theirs,
        "the two ends disagree on the stream's BLAKE3\n{}\n{}",
        sent.show(),
        recv.show()
    );
}

/// The hex `stream_blake3` of the last JSON object line in `out`.
fn stream_blake3(out: &[u8]) -> Option<String> {
    const KEY: &str = "\"stream_blake3\":\"";
    let text = String::from_utf8_lossy(out);
    let line = text.lines().rev().find(|l| l.starts_with('{'))?;
    let start = line.find(KEY)? + KEY.len();
    let hex = line.get(start..start + 64)?;
    let well_formed =
        hex.bytes().all(|b| b.is_ascii_hexdigit()) && line[start + 64..].starts_with('"');
    well_formed.then(|| hex.to_string())
}

/// Something whose output can be shown in a failure message.
trait Show {
    fn show(&self) -> String;
}

impl Show for Outcome {
    fn show(&self) -> String {
        self.describe()
    }
}

impl Show for Finished {
    fn show(&self) -> String {
        self.describe()
    }
}

// ---- PostgreSQL ---------------------------------------------------------------------------

/// The port number names the socket file; with no TCP listener and a private socket
/// directory per server, it cannot collide with anything.
const PG_PORT: &str = "5432";

/// Row counts and content digests of every table the test made.
const PG_FINGERPRINT: &str = "\
    SELECT 'items', count(*), md5(string_agg(v, ',' ORDER BY id)) FROM items \
    UNION ALL \
    SELECT 'events', count(*), md5(string_agg(payload::text || at::text, ',' ORDER BY id)) \
      FROM events \
    UNION ALL \
    SELECT 'empty_one', count(*), '' FROM empty_one";

/// The PostgreSQL programs: the server's from the newest /usr/lib/postgresql/*/bin.
struct PgTools {
    bin: PathBuf,
    basebackup: PathBuf,
}

impl PgTools {
    fn find() -> PgTools {
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

    fn initdb(&self, account: &Account, data: &Path, cwd: &Path) {
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
    fn start(&self, account: &Account, data: &Path, sock: &Path, cwd: &Path) -> Server {
        let mut cmd = account.command(&self.bin.join("postgres"));
        cmd.arg("-D")
            .arg(data)
            .args(["-p", PG_PORT, "-c", "listen_addresses="])
            .arg("-c")
            .arg(format!("unix_socket_directories={}", sock.display()))
            .args(["-c", "fsync=off", "-c", "logging_collector=off"])
            .current_dir(cwd);
        // SIGINT is PostgreSQL's fast shutdown: it stops its backends too.
        Server::start("postgres", cmd, "ready to accept connections", libc::SIGINT)
    }

    /// Runs `sql` as the superuser over the socket in `sock`; returns the unaligned output.
    fn psql(&self, sock: &Path, sql: &str) -> String {
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

/// Row counts, and `CHECKSUM TABLE` (which reads every row) of every table the test made.
const MARIA_FINGERPRINT: &str = "\
    SELECT 'items', count(*) FROM shop.items UNION ALL \
    SELECT 'notes', count(*) FROM shop.notes UNION ALL \
    SELECT 'legacy', count(*) FROM shop.legacy UNION ALL \
    SELECT 'empty_one', count(*) FROM shop.empty_one; \
    CHECKSUM TABLE shop.items, shop.notes, shop.legacy, shop.empty_one EXTENDED;";

/// The MariaDB programs.
struct MariaTools {
    server: PathBuf,
    install_db: PathBuf,
    client: PathBuf,
    backup: PathBuf,
    mbstream: PathBuf,
}

impl MariaTools {
    fn find() -> MariaTools {
        MariaTools {
            server: need("mariadbd", "mariadb-server"),
            install_db: need("mariadb-install-db", "mariadb-server"),
            client: need("mariadb", "mariadb-client"),
            backup: need("mariadb-backup", "mariadb-backup"),
            mbstream: need("mbstream", "mariadb-backup"),
        }
    }

    fn install_db(&self, account: &Account, data: &Path, cwd: &Path) {
        run_ok(
            account
                .command(&self.install_db)
                .arg("--no-defaults")
                .arg(format!("--datadir={}", data.display()))
                .args(["--auth-root-authentication-method=normal", "--skip-test-db"])
                .current_dir(cwd),
            "mariadb-install-db",
        );
    }

    /// Starts `mariadbd` on `data` with no TCP listener, its socket at `sock`.
    fn start(&self, account: &Account, data: &Path, sock: &Path, cwd: &Path) -> Server {
        let mut cmd = account.command(&self.server);
        cmd.arg("--no-defaults")
            .arg(format!("--datadir={}", data.display()))
            .arg(format!("--socket={}", sock.display()))
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
    fn sql(&self, sock: &Path, sql: &str) -> String {
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
struct Server {
    proc: Proc,
    stop_signal: libc::c_int,
}

impl Server {
    /// Starts `cmd` and waits until its stderr says `ready`.
    fn start(name: &str, mut cmd: Command, ready: &str, stop_signal: libc::c_int) -> Server {
        cmd.stdin(Stdio::null()).stdout(Stdio::null());
        let mut server = Server {
            proc: cmd.spawn_proc(name),
            stop_signal,
        };
        server.proc.wait_stderr_for(ready, SERVER_START_TIMEOUT);
        server
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.proc.stop(self.stop_signal, SERVER_STOP_TIMEOUT);
    }
}

/// Whom the servers run as: a service account (through `setpriv`) when we are root, else
/// ourselves.
struct Account {
    ids: Option<(u32, u32)>,
}

impl Account {
    /// The account `name` from the package `package` when root; panics naming the package
    /// when it does not exist.
    fn for_service(name: &str, package: &str) -> Account {
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
    fn command(&self, program: &Path) -> Command {
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
    fn shell_prefix(&self, program: &Path) -> String {
        match self.ids {
            None => sh_quote(program),
            Some((uid, gid)) => format!(
                "setpriv --reuid={uid} --regid={gid} --clear-groups {}",
                sh_quote(program)
            ),
        }
    }

    /// Makes `path` the account's.
    fn own(&self, path: &Path) {
        if let Some((uid, gid)) = self.ids {
            std::os::unix::fs::chown(path, Some(uid), Some(gid))
                .unwrap_or_else(|e| panic!("chown {}: {e}", path.display()));
        }
    }
}

/// The test's temp dir, traversable by the service accounts.
struct Scratch {
    dir: tempfile::TempDir,
}

impl Scratch {
    fn new() -> Scratch {
        let dir = tempfile::Builder::new()
            .prefix("haul-pipedb-")
            .tempdir()
            .expect("temp dir");
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o711)).unwrap();
        Scratch { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// A new mode-0700 directory `name` owned by `account`.
    fn owned_dir(&self, name: &str, account: &Account) -> PathBuf {
        let path = self.dir.path().join(name);
        if !path.exists() {
            fs::create_dir(&path).unwrap_or_else(|e| panic!("mkdir {}: {e}", path.display()));
            fs::set_permissions(&path, fs::Permissions::from_mode(0o700)).unwrap();
            account.own(&path);
        }
        path
    }
}

/// The path of `tool` on PATH or in the sbin directories; panics naming its package.
fn need(tool: &str, package: &str) -> PathBuf {
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
fn sh_quote(path: &Path) -> String {
    format!("'{}'", path.display().to_string().replace('\'', r"'\''"))
}

/// Runs `cmd` to completion; panics with its output unless it exits 0. Returns stdout.
fn run_ok(cmd: &mut Command, what: &str) -> String {
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
