//! A PostgreSQL streaming standby built through haul's pipe mode, as README's recipe types
//! it: `pg_basebackup -D - -Ft -X fetch -R | haul send -` on the primary's side,
//! `haul recv - | tar -x` into an empty data directory on the standby's. `-R` puts
//! `standby.signal` and `primary_conninfo` into the stream; the standby starts on the copy,
//! the primary's `pg_stat_replication` shows it `streaming`, and a row written on the
//! primary afterwards appears on the standby.
//!
//! Both servers listen only on private unix sockets (the same port number names their
//! socket files in different directories); the backup crosses loopback TCP inside haul,
//! TLS on. The servers, their accounts and programs: `support::db`.

mod support;

use std::process::{Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use support::db::*;
use support::piped::SpawnProc;
use support::*;

/// How long the standby may take to connect and stream, and a row to be replayed; a bound
/// on a wait, not a speed requirement.
const REPLICATION_TIMEOUT: Duration = Duration::from_secs(60);

#[test]
fn standby_built_through_haul_streams_from_the_primary() {
    let pg = PgTools::find();
    let account = Account::for_service("postgres", "postgresql");
    let tmp = Scratch::new();

    let primary = tmp.owned_dir("primary", &account);
    let primary_sock = tmp.owned_dir("primary-sock", &account);
    pg.initdb(&account, &primary, tmp.path());
    let _primary_server = pg.start(&account, &primary, &primary_sock, tmp.path());
    pg.psql(
        &primary_sock,
        "CREATE TABLE items AS SELECT g AS id, md5(g::text) AS v FROM generate_series(1, 20000) g;",
    );

    // The standby's side: haul recv - | tar -x into an empty data directory.
    let standby = tmp.owned_dir("standby", &account);
    let ticket = tmp.path().join("ticket");
    let mut tar = account
        .command(&need("tar", "tar"))
        .args(["-x", "-f", "-", "-C"])
        .arg(&standby)
        .current_dir(tmp.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn_proc("tar -x");
    let tar_in = tar.child.stdin.take().expect("tar stdin");
    let mut recv = Command::new(haul_bin())
        .args(["recv", "-", "--listen", "127.0.0.1:0", "--ticket-file"])
        .arg(&ticket)
        .stdin(Stdio::null())
        .stdout(tar_in)
        .spawn_proc("haul recv -");
    let line = recv.first_stderr_line(support::process::TICKET_TIMEOUT);
    assert!(
        line.starts_with("haul1-"),
        "no ticket from haul recv -: {line:?}"
    );

    // The primary's side: pg_basebackup -D - -Ft -X fetch -R | haul send -.
    let mut backup = Command::new(&pg.basebackup)
        .arg("-h")
        .arg(&primary_sock)
        .args(["-p", PG_PORT, "-U", "postgres", "-D", "-", "-F", "t"])
        .args(["-X", "fetch", "-c", "fast", "-R"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn_proc("pg_basebackup");
    let backup_out = backup.child.stdout.take().expect("pg_basebackup stdout");
    let send = Command::new(haul_bin())
        .args(["send", "-", "--ticket-file"])
        .arg(&ticket)
        .stdin(backup_out)
        .stdout(Stdio::null())
        .spawn_proc("haul send -");
    backup.finish().assert_success();
    send.finish().assert_success();
    recv.finish().assert_success();
    tar.finish().assert_success();

    assert!(
        standby.join("standby.signal").is_file(),
        "pg_basebackup -R put no standby.signal into the stream"
    );
    let auto_conf = std::fs::read_to_string(standby.join("postgresql.auto.conf"))
        .expect("read the copy's postgresql.auto.conf");
    assert!(
        auto_conf.contains("primary_conninfo"),
        "no primary_conninfo in the copy's postgresql.auto.conf:\n{auto_conf}"
    );

    let standby_sock = tmp.owned_dir("standby-sock", &account);
    let _standby_server = pg.start_standby(&account, &standby, &standby_sock, tmp.path());
    assert_eq!(
        pg.psql(&standby_sock, "SELECT pg_is_in_recovery()").trim(),
        "t"
    );
    assert_eq!(
        pg.psql(&standby_sock, "SELECT count(*) FROM items").trim(),
        "20000"
    );

    let state = wait_for(
        || pg.psql(&primary_sock, "SELECT state FROM pg_stat_replication"),
        |s| s.trim() == "streaming",
        "the primary's pg_stat_replication to show the standby streaming",
    );
    eprintln!("pg_stat_replication.state on the primary: {}", state.trim());

    pg.psql(
        &primary_sock,
        "INSERT INTO items VALUES (20001, 'written after the copy')",
    );
    wait_for(
        || pg.psql(&standby_sock, "SELECT v FROM items WHERE id = 20001"),
        |s| s.trim() == "written after the copy",
        "the row written on the primary to appear on the standby",
    );
}

/// Polls `query` until `done` holds for its answer; panics with the last answer after
/// [`REPLICATION_TIMEOUT`].
fn wait_for(query: impl Fn() -> String, done: impl Fn(&str) -> bool, what: &str) -> String {
    let start = Instant::now();
    loop {
        let answer = query();
        if done(&answer) {
            return answer;
        }
        assert!(
            start.elapsed() < REPLICATION_TIMEOUT,
            "waited {REPLICATION_TIMEOUT:?} for {what}; last answer: {answer:?}"
        );
        sleep(Duration::from_millis(200));
    }
}
