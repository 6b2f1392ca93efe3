//! A real two-node Galera cluster (Debian's mariadb-server, galera-4, mariadb-backup) whose
//! second node joins with `wsrep_sst_method=haul`: the script `haul sst --install-script`
//! writes is on both servers' PATH, node 1 is bootstrapped and loaded (InnoDB tables, some
//! MB) and keeps writing while node 2 joins; then the cluster has two members, node 2 is
//! `Synced`, the state came by haul (its log says so, the ticket is in no command line)
//! and `CHECKSUM TABLE` answers alike on both once writes stop.
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
    let node1 = Node::new(&tmp, &account, "node1", gcomm1, None);
    let node2 = Node::new(&tmp, &account, "node2", free_port(), Some(gcomm1));
    my.install_db(&account, &node1.data, tmp.path());
    my.install_db(&account, &node2.data, tmp.path());

    let server1 = node1.start(&my, &account, &bin, &tmp);
    my.sql(&node1.sock, LOAD);
    assert_eq!(status(&my, &node1.sock, "wsrep_cluster_size"), "1");

    // Writes go on while node 2 joins.
    let stop = Arc::new(AtomicBool::new(false));
    let written = Arc::new(AtomicU64::new(0));
    let writer = {
        let (stop, written) = (Arc::clone(&stop), Arc::clone(&written));
        let (client, sock) = (my.client.clone(), node1.sock.clone());
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

    // A failed join shows the donor's log too: its half of the state transfer is there.
    let joined = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        node2.start(&my, &account, &bin, &tmp)
    }));
    let server2 = joined.unwrap_or_else(|e| {
        eprintln!("--- node 1's (the donor's) log ---\n{}", server1.log());
        std::panic::resume_unwind(e)
    });
    stop.store(true, Ordering::Relaxed);
    writer.join().expect("the writer thread");
    assert!(
        written.load(Ordering::Relaxed) > 0,
        "no write succeeded on node 1"
    );

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

    for node in [&node1, &node2] {
        assert_eq!(status(&my, &node.sock, "wsrep_cluster_size"), "2");
    }
    // Joining, Joined, then Synced once it applied what was written meanwhile.
    let start = Instant::now();
    loop {
        let state = status(&my, &node2.sock, "wsrep_local_state_comment");
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
    drop(server2);
    drop(server1);
}

/// One Galera node's directories, ports and option file.
struct Node {
    name: &'static str,
    data: PathBuf,
    sock: PathBuf,
    cnf: PathBuf,
    bootstrap: bool,
}

impl Node {
    /// A node listening for Galera on `gcomm`; joining the node at `join`, if given.
    fn new(
        tmp: &Scratch,
        account: &Account,
        name: &'static str,
        gcomm: u16,
        join: Option<u16>,
    ) -> Node {
        let data = tmp.owned_dir(&format!("{name}-data"), account);
        let run = tmp.owned_dir(&format!("{name}-run"), account);
        let sock = run.join("mysqld.sock");
        let cnf = run.join("my.cnf");
        let cluster = match join {
            Some(port) => format!("gcomm://127.0.0.1:{port}"),
            None => "gcomm://".into(),
        };
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
             wsrep_sst_receive_address=127.0.0.1:{sst}\n\
             [sst]\n\
             streams=4\n\
             haul-timeout=30\n",
            data = data.display(),
            sock = sock.display(),
            run = run.display(),
            port = free_port(),
            ist = free_port(),
            sst = free_port(),
        );
        fs::write(&cnf, text).expect("write my.cnf");
        account.own(&cnf);
        Node {
            name,
            data,
            sock,
            cnf,
            bootstrap: join.is_none(),
        }
    }

    /// Starts the node with `bin` (the SST script) first on its PATH; returns when it
    /// takes connections (for a joiner: after the state transfer).
    fn start(&self, my: &MariaTools, account: &Account, bin: &Path, tmp: &Scratch) -> Server {
        let mut cmd = account.command(&my.server);
        cmd.arg(format!("--defaults-file={}", self.cnf.display()));
        if self.bootstrap {
            cmd.arg("--wsrep-new-cluster");
        }
        let path = std::env::var("PATH").unwrap_or_default();
        cmd.env("PATH", format!("{}:{path}", bin.display()))
            .current_dir(tmp.path());
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
