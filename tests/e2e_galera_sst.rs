//! A real two-node Galera cluster (Debian's mariadb-server, galera-4, mariadb-backup) whose
//! second node joins with `wsrep_sst_method=haul`: the script `haul sst --install-script`
//! writes is on both servers' PATH, node 1 is bootstrapped and loaded (InnoDB tables, some
//! MB) and keeps writing while node 2 joins; then the cluster has two members, node 2 is
//! `Synced`, the state came by haul (its log says so, the ticket is in no command line)
//! and `CHECKSUM TABLE` answers alike on both once writes stop. Second: the donor's
//! server killed mid-stream (capped by `[sst] rlimit`): the join fails (the joiner's server
//! exits), nothing of the transfer lingers, and a second join succeeds. Third: the
//! joiner's SST connections cut twice mid-stream (`ss -K`): the join completes.
//!
//! Both nodes run on loopback, each with its own ports (client, Galera, IST, SST) and
//! option file; as the `mysql` account when the tests run as root. The servers, accounts
//! and programs: `support::db`.

mod support;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::sleep;
use std::time::{Duration, Instant};

use support::db::*;
use support::piped::SpawnProc;
use support::*;

/// Where Debian's galera-4 puts the provider.
const PROVIDER: &str = "/usr/lib/galera/libgalera_smm.so";
/// How long the cluster may take to agree after writes stop; a bound on a wait.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(60);

/// The tables node 1 holds before node 2 joins: several InnoDB tables, some MB.
const LOAD: &str = "\
    CREATE DATABASE shop; USE shop; \
    CREATE TABLE shop.items (id INT PRIMARY KEY, v CHAR(32), pad CHAR(200), KEY (v)) ENGINE=InnoDB; \
    INSERT INTO shop.items SELECT seq, md5(seq), repeat('x', 200) FROM seq_1_to_60000; \
    CREATE TABLE shop.orders (id INT PRIMARY KEY, item INT, note VARCHAR(255)) ENGINE=InnoDB; \
    INSERT INTO shop.orders SELECT seq, seq % 60000, repeat(char(65 + seq % 26), seq % 255) \
      FROM seq_1_to_40000; \
    CREATE TABLE shop.live (id INT AUTO_INCREMENT PRIMARY KEY, at INT) ENGINE=InnoDB;";

/// What must answer alike on both nodes.
const CHECKSUMS: &str = "CHECKSUM TABLE shop.items, shop.orders, shop.live EXTENDED";

#[test]
fn a_node_joins_a_galera_cluster_through_haul() {
    let c = Cluster::new("streams=4\nhaul-timeout=30\n");
    let server1 = c.node1.start(&c, true);
    c.my.sql(&c.node1.sock, LOAD);
    assert_eq!(status(&c.my, &c.node1.sock, "wsrep_cluster_size"), "1");

    // Writes go on while node 2 joins.
    let stop = Arc::new(AtomicBool::new(false));
    let written = Arc::new(AtomicU64::new(0));
    let writer = {
        let (stop, written) = (Arc::clone(&stop), Arc::clone(&written));
        let (client, sock) = (c.my.client.clone(), c.node1.sock.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let ok = Command::new(&client)
                    .arg("--no-defaults")
                    .arg(format!("--socket={}", sock.display()))
                    .args(["--user=root", "-e"])
                    .arg("USE shop; INSERT INTO shop.live (at) SELECT seq FROM seq_1_to_50; \
                          UPDATE shop.items SET v = md5(rand()) WHERE id = 1 + floor(rand() * 60000);")
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status()
                    .is_ok_and(|s| s.success());
                if ok {
                    written.fetch_add(1, Ordering::Relaxed);
                }
            }
        })
    };
    let server2 = join(&c, &server1);
    stop.store(true, Ordering::Relaxed);
    writer.join().expect("the writer thread");
    let batches = written.load(Ordering::Relaxed);
    assert!(batches > 0, "no write succeeded on node 1");
    eprintln!("node 1 took {batches} write batches while node 2 joined");
    assert_joined(&c, &server1, &server2);
}

/// The donor killed in the middle of the stream: the joiner's server fails its join
/// (exits, within `haul-timeout` and its own shutdown), nothing of the transfer is left
/// running; restarted, the donor gives the state again and the second join succeeds.
#[test]
fn a_join_whose_donor_dies_fails_cleanly_and_the_next_one_succeeds() {
    // Capped so that the stream is still going when the donor's first files go out.
    let c = Cluster::new("streams=4\nrlimit=1M\nhaul-timeout=5\n");
    let mut server1 = c.node1.start(&c, true);
    c.my.sql(&c.node1.sock, LOAD);

    let joiner = c.node2.command(&c, false).spawn_proc("node2 (first join)");
    server1.wait_log_for("Streaming ./shop/", SETTLE_TIMEOUT);
    server1.kill();
    let first = joiner.finish();
    assert!(
        !first.status.success(),
        "the join went on without its donor\n{}",
        first.describe()
    );
    assert!(
        first.stderr.contains("haul: error: sst: haul recv failed"),
        "node 2 did not fail by the state transfer\n{}",
        first.describe()
    );
    // The donor's script stops its transfer when its server is gone (SIGTERM, SIGKILL
    // after 5 s): wait for that, bounded.
    let start = Instant::now();
    loop {
        let left = running_under(c.tmp.path());
        if left.is_empty() {
            break;
        }
        assert!(
            start.elapsed() < SETTLE_TIMEOUT,
            "still running after the failed join: {left:?}"
        );
        sleep(Duration::from_millis(200));
    }
    eprintln!(
        "first join (donor killed): node 2 exited {:?}",
        first.status
    );
    for line in first.stderr.lines().filter(|l| l.contains("haul:")) {
        eprintln!("  node 2: {line}");
    }

    // A killed node must be told it may bootstrap the cluster again.
    let grastate = c.node1.data.join("grastate.dat");
    let text = fs::read_to_string(&grastate).expect("read node 1's grastate.dat");
    fs::write(
        &grastate,
        text.replace("safe_to_bootstrap: 0", "safe_to_bootstrap: 1"),
    )
    .expect("write grastate.dat");
    let server1 = c.node1.start(&c, true);
    let server2 = join(&c, &server1);
    assert_joined(&c, &server1, &server2);
}

/// The joiner's data connections cut twice mid-stream (`ss -K` on loopback, only the
/// sockets of its SST port): the donor's haul re-dials, the join completes.
#[test]
fn a_join_survives_its_connections_cut_twice() {
    let c = Cluster::new("streams=4\nrlimit=1M\nhaul-timeout=30\n");
    let mut server1 = c.node1.start(&c, true);
    c.my.sql(&c.node1.sock, LOAD);
    let mut joiner = c.node2.command(&c, false).spawn_proc("node2");
    server1.wait_log_for("Streaming ./shop/", SETTLE_TIMEOUT);
    let mut cuts = 0;
    for _ in 0..2 {
        // After a progress line: data is moving on connections there are to cut.
        joiner.wait_stderr_for("haul: progress:", SETTLE_TIMEOUT);
        let port = c.node2.sst_port;
        let out = Command::new("ss")
            .args(["-HK", "-t", "state", "established"])
            .arg(format!("( sport = :{port} or dport = :{port} )"))
            .output()
            .expect("run ss -K");
        assert!(out.status.success(), "ss -K: {out:?}");
        cuts += String::from_utf8_lossy(&out.stdout).lines().count();
    }
    assert!(
        cuts > 0,
        "ss -K found no connection of the state transfer to cut"
    );
    eprintln!("cut {cuts} connections of the state transfer, in two rounds");
    joiner.wait_stderr_for("ready for connections", SETTLE_TIMEOUT);
    let server2 = Server::adopt(joiner, libc::SIGTERM);
    assert_joined(&c, &server1, &server2);
}

/// Starts node 2, which joins through haul; on failure shows the donor's log too (its
/// half of the state transfer is there).
fn join(c: &Cluster, server1: &Server) -> Server {
    let joined = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| c.node2.start(c, false)));
    joined.unwrap_or_else(|e| {
        eprintln!("--- node 1's (the donor's) log ---\n{}", server1.log());
        std::panic::resume_unwind(e)
    })
}

/// The state came by haul, the cluster has both nodes, node 2 is Synced, and the tables
/// answer alike on both.
fn assert_joined(c: &Cluster, server1: &Server, server2: &Server) {
    let (my, node1, node2) = (&c.my, &c.node1, &c.node2);
    let log2 = server2.log();
    assert!(
        log2.contains("WSREP_SST: [INFO] haul: state transfer complete"),
        "node 2's log shows no state transfer by haul:\n{log2}"
    );
    assert!(
        !log2.contains("haul1-"),
        "a ticket is in node 2's log:\n{log2}"
    );
    let log1 = server1.log();
    assert!(
        log1.contains("haul: streaming a mariadb-backup"),
        "node 1's log shows no donation by haul:\n{log1}"
    );
    assert!(
        !log1.contains("haul1-"),
        "a ticket is in node 1's log:\n{log1}"
    );

    for node in [node1, node2] {
        assert_eq!(status(my, &node.sock, "wsrep_cluster_size"), "2");
    }
    // Joining, Joined, then Synced once it applied what was written meanwhile.
    let start = Instant::now();
    loop {
        let state = status(my, &node2.sock, "wsrep_local_state_comment");
        if state == "Synced" {
            eprintln!("node 2: wsrep_local_state_comment = {state}, wsrep_cluster_size = 2");
            break;
        }
        assert!(
            start.elapsed() < SETTLE_TIMEOUT,
            "node 2 is {state:?}, not Synced, after {SETTLE_TIMEOUT:?}"
        );
        sleep(Duration::from_millis(200));
    }
    let want = my.sql(&node1.sock, CHECKSUMS);
    let start = Instant::now();
    loop {
        // wsrep_sync_wait: node 2 answers after applying all node 1 committed.
        let got = my.sql(
            &node2.sock,
            &format!("SET SESSION wsrep_sync_wait = 1; {CHECKSUMS}"),
        );
        if got == want {
            eprintln!("CHECKSUM TABLE on both nodes:\n{got}");
            break;
        }
        assert!(
            start.elapsed() < SETTLE_TIMEOUT,
            "the nodes answer differently:\nnode 1:\n{want}\nnode 2:\n{got}"
        );
        sleep(Duration::from_millis(500));
    }
}

/// The processes whose command line names `dir` (the test's own: its servers, scripts,
/// haul ends), but for this test process.
fn running_under(dir: &Path) -> Vec<String> {
    let me = std::process::id().to_string();
    let needle = dir.display().to_string();
    let mut found = Vec::new();
    for entry in fs::read_dir("/proc").into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name == me || !name.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(cmdline) = fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let line = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if line.contains(&needle) {
            found.push(format!("{name}: {line}"));
        }
    }
    found
}

/// Two nodes' set-up: the programs, the account, the scratch directory with the SST
/// script installed, node 1 to bootstrap and node 2 to join it.
struct Cluster {
    my: MariaTools,
    account: Account,
    tmp: Scratch,
    bin: PathBuf,
    node1: Node,
    node2: Node,
}

impl Cluster {
    /// Both nodes installed (not started), with `sst` as their `[sst]` section.
    fn new(sst: &str) -> Cluster {
        let my = MariaTools::find();
        assert!(
            Path::new(PROVIDER).is_file(),
            "{PROVIDER} is missing: apt-get install -y galera-4 (.ci/run installs it)"
        );
        let account = Account::for_service("mysql", "mariadb-server");
        let tmp = Scratch::new();
        let bin = tmp.owned_dir("bin", &account);
        let installed = Command::new(haul_bin())
            .args(["sst", "--install-script"])
            .arg(&bin)
            .output()
            .expect("run haul sst --install-script");
        assert!(
            installed.status.success(),
            "haul sst --install-script: {installed:?}"
        );
        assert!(bin.join("wsrep_sst_haul").is_file());
        let gcomm1 = free_port();
        let node1 = Node::new(&tmp, &account, ("node1", gcomm1, None), sst);
        let node2 = Node::new(&tmp, &account, ("node2", free_port(), Some(gcomm1)), sst);
        my.install_db(&account, &node1.data, tmp.path());
        my.install_db(&account, &node2.data, tmp.path());
        Cluster {
            my,
            account,
            tmp,
            bin,
            node1,
            node2,
        }
    }
}

/// One Galera node's directories, ports and option file.
struct Node {
    name: &'static str,
    data: PathBuf,
    sock: PathBuf,
    cnf: PathBuf,
    /// Where it listens for a state transfer when it joins.
    sst_port: u16,
}

impl Node {
    /// A node listening for Galera on `gcomm`; joining the node at `join`, if given.
    fn new(
        tmp: &Scratch,
        account: &Account,
        (name, gcomm, join): (&'static str, u16, Option<u16>),
        sst: &str,
    ) -> Node {
        let data = tmp.owned_dir(&format!("{name}-data"), account);
        let run = tmp.owned_dir(&format!("{name}-run"), account);
        let sock = run.join("mysqld.sock");
        let cnf = run.join("my.cnf");
        let cluster = match join {
            Some(port) => format!("gcomm://127.0.0.1:{port}"),
            None => "gcomm://".into(),
        };
        let sst_port = free_port();
        let text = format!(
            "[mysqld]\n\
             datadir={data}\n\
             socket={sock}\n\
             pid-file={run}/mysqld.pid\n\
             bind-address=127.0.0.1\n\
             port={port}\n\
             binlog_format=ROW\n\
             default_storage_engine=InnoDB\n\
             innodb_autoinc_lock_mode=2\n\
             innodb_buffer_pool_size=64M\n\
             innodb_log_file_size=16M\n\
             innodb_flush_log_at_trx_commit=2\n\
             wsrep_on=ON\n\
             wsrep_provider={PROVIDER}\n\
             wsrep_cluster_name=haul-test\n\
             wsrep_cluster_address={cluster}\n\
             wsrep_node_name={name}\n\
             wsrep_node_address=127.0.0.1:{gcomm}\n\
             wsrep_provider_options=\"gmcast.listen_addr=tcp://127.0.0.1:{gcomm};ist.recv_addr=127.0.0.1:{ist};gcache.size=64M\"\n\
             wsrep_sst_method=haul\n\
             wsrep_sst_auth=root:\n\
             wsrep_sst_receive_address=127.0.0.1:{sst_port}\n\
             [sst]\n{sst}",
            data = data.display(),
            sock = sock.display(),
            run = run.display(),
            port = free_port(),
            ist = free_port(),
        );
        fs::write(&cnf, text).expect("write my.cnf");
        account.own(&cnf);
        Node {
            sst_port,
            name,
            data,
            sock,
            cnf,
        }
    }

    /// The node's server, with the SST script first on its PATH (`bootstrap`: as the
    /// first node of a new cluster).
    fn command(&self, c: &Cluster, bootstrap: bool) -> Command {
        let mut cmd = c.account.command(&c.my.server);
        cmd.arg(format!("--defaults-file={}", self.cnf.display()));
        if bootstrap {
            cmd.arg("--wsrep-new-cluster");
        }
        let path = std::env::var("PATH").unwrap_or_default();
        cmd.env("PATH", format!("{}:{path}", c.bin.display()))
            .current_dir(c.tmp.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        cmd
    }

    /// Starts the node; returns when it takes connections (a joiner: after the state
    /// transfer).
    fn start(&self, c: &Cluster, bootstrap: bool) -> Server {
        let cmd = self.command(c, bootstrap);
        Server::start(self.name, cmd, "ready for connections", libc::SIGTERM)
    }
}

/// The value of the status variable `name` on the server at `sock`.
fn status(my: &MariaTools, sock: &Path, name: &str) -> String {
    let out = my.sql(sock, &format!("SHOW GLOBAL STATUS LIKE '{name}'"));
    out.split('\t')
        .nth(1)
        .unwrap_or_default()
        .trim()
        .to_string()
}
