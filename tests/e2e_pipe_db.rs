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
//! The servers, their accounts and programs: `support::db`.
//!
//! Not here: reconnects, tampering and other failure paths of pipe mode; these tests only
//! prove that real backup formats arrive intact and restore.

mod support;

use std::process::{Command, Stdio};

use support::db::*;
use support::piped::{Finished, SpawnProc};
use support::*;

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

// ---- fingerprints ------------------------------------------------------------------------

/// Row counts and content digests of every table the test made.
const PG_FINGERPRINT: &str = "\
    SELECT 'items', count(*), md5(string_agg(v, ',' ORDER BY id)) FROM items \
    UNION ALL \
    SELECT 'events', count(*), md5(string_agg(payload::text || at::text, ',' ORDER BY id)) \
      FROM events \
    UNION ALL \
    SELECT 'empty_one', count(*), '' FROM empty_one";

/// Row counts, and `CHECKSUM TABLE` (which reads every row) of every table the test made.
const MARIA_FINGERPRINT: &str = "\
    SELECT 'items', count(*) FROM shop.items UNION ALL \
    SELECT 'notes', count(*) FROM shop.notes UNION ALL \
    SELECT 'legacy', count(*) FROM shop.legacy UNION ALL \
    SELECT 'empty_one', count(*) FROM shop.empty_one; \
    CHECKSUM TABLE shop.items, shop.notes, shop.legacy, shop.empty_one EXTENDED;";
