//! `haul sst`: one end of a Galera state transfer, `wsrep_sst_method=haul` (docs/design.md,
//! *State transfer*). The `wsrep_sst_haul` script the server runs is one line that starts
//! this; the interface is `wsrep_sst_mariabackup`'s, read from Debian's
//! `wsrep_sst_common`.
//!
//! - Joiner: `haul recv --to-command 'mbstream -x -C DATADIR/.sst'` listening on the SST
//!   address; prints `ready haul:TICKET@ADDR/haul` (the server strips what comes before
//!   the `@` and hands it to the donor's script in its environment,
//!   `WSREP_SST_OPT_REMOTE_AUTH`: the ticket is never on a command line or in a file);
//!   `--timeout haul-timeout` (default 300 s) bounds how long the donor may take to come,
//!   or to come back after a cut. When the stream is complete: `mariadb-backup --prepare`
//!   there, the old data removed (but for `wsrep_sst_mariabackup`'s kept names: galera.cache,
//!   grastate.dat, gvwstate.dat, `*.err`, `*.log`, `*.pem`, pid file and socket),
//!   `--move-back`, `.sst` removed, and the donor's `uuid:seqno domain` printed as the last
//!   line. Until then a failure leaves the old data as it was.
//! - Donor: `haul send --from-command 'mariadb-backup --backup --galera-info
//!   --stream=xbstream'` (which streams the state id files too); with `--bypass` (the
//!   joiner catches up by IST) only `donor_galera_info` and `xtrabackup_ist`, by
//!   `mbstream -c`; prints `done uuid:seqno`. `HAUL_TICKET` (and `MYSQL_PWD` from
//!   `wsrep_sst_auth`) reach the programs in their environment.
//! - Options from `[sst]` (`my_print_defaults sst` with the server's `--defaults-file`):
//!   `streams`, `rlimit` (or `limit`), `compress`, `haul-timeout`; other methods' keys are
//!   ignored. Progress: `--progress` on both ends, a line every 5 s into the error log
//!   (stderr); stdout carries only the lines the server reads.
//! - Failure: any step's non-zero exit fails the script with it (the server aborts the
//!   join; a restart retries); how the waits end is `sst_proc`'s. A donor's server dying
//!   mid-stream stops `haul send`, whose producer's failure ends the joiner's `recv` at
//!   once; a donor host that vanishes ends it after `haul-timeout`; a connection cut within
//!   it is re-dialed (both tested in `tests/e2e_galera_sst.rs`).
//!
//! Everything the transfer is (TLS, N streams, per-block BLAKE3, reconnects within
//! `haul-timeout`) is pipe mode's. Not done: a retried join starting where the last one
//! stopped (a stream cannot resume, README *Streams*); binary logs are not moved.

use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, ToSocketAddrs};
use std::os::fd::AsFd;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::sst_proc::{log, output, program, sh_quote, sh_word, Groups, Step};
use crate::config::{listen_address, sst_options, Defaults, Sst, SstJob, SstOptions, SstRole};
use crate::error::{exit, Error, Result};

/// The data directory's subdirectory the joiner receives into (`wsrep_sst_mariabackup`'s
/// name, which its clean-up pattern keeps).
const SST_DIR: &str = ".sst";
/// The donor's state id file, as `wsrep_sst_mariabackup` names it.
const DONOR_INFO: &str = "donor_galera_info";
/// mariadb-backup's own state id file, the fallback.
const BACKUP_INFO: &str = "xtrabackup_galera_info";
/// Present when the donor sent only the state id (the joiner catches up by IST).
const IST_FILE: &str = "xtrabackup_ist";
/// How long the joiner waits for the donor by default (mariabackup's `sst-initial-timeout`).
const DEFAULT_WAIT: u64 = 300;
/// What in the data directory outlives a state transfer (`wsrep_sst_mariabackup`'s
/// `cpat`, with the server's pid file and socket): suffixes and whole names.
const KEEP_SUFFIXES: [&str; 5] = [".pem", ".err", ".log", ".pid", ".sock"];
const KEEP_NAMES: [&str; 5] = [
    SST_DIR,
    "galera.cache",
    "grastate.dat",
    "gvwstate.dat",
    "sst_in_progress",
];

/// Runs `haul sst`.
pub(super) fn run(sst: &Sst) -> Result<()> {
    let job = match sst {
        Sst::InstallScript(dir) => return install_script(dir),
        Sst::Run(job) => job,
    };
    let opts = read_options(&job.defaults)?;
    let groups = Groups::default();
    let stopper = groups.clone();
    let _on_stop = crate::signals::on_stop(move || stopper.stop_all());
    match job.role {
        SstRole::Joiner => joiner(job, &opts, &groups),
        SstRole::Donor => donor(job, &opts, &groups),
    }
}

/// Writes `DIR/wsrep_sst_haul`, which runs this binary (by its absolute path).
fn install_script(dir: &Path) -> Result<()> {
    let haul = std::env::current_exe()
        .and_then(fs::canonicalize)
        .map_err(|e| Error::io("finding this haul's own path", e))?;
    let script = format!(
        "#!/bin/sh\n\
         # Galera's state transfer method `haul` (wsrep_sst_method=haul), written by\n\
         # `haul sst --install-script`: the work is haul's (`haul sst --help`).\n\
         exec {} sst -- \"$@\"\n",
        sh_quote(&haul)
    );
    let path = dir.join("wsrep_sst_haul");
    let tmp = dir.join(".wsrep_sst_haul.tmp");
    let written = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o755)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&tmp)
        .and_then(|mut f| f.write_all(script.as_bytes()).and_then(|()| f.sync_all()))
        .and_then(|()| fs::rename(&tmp, &path));
    if let Err(e) = written {
        let _ = fs::remove_file(&tmp);
        return Err(Error::Destination {
            path,
            source: e,
            hint: ": give a directory you can write on mariadbd's PATH, e.g. /usr/bin",
        });
    }
    println!("{}", path.display());
    Ok(())
}

/// The `[sst]` options of the server's option files.
fn read_options(defaults: &Defaults) -> Result<SstOptions> {
    let tool = program("my_print_defaults", "mariadb-server")?;
    let printed = output(
        "my_print_defaults sst",
        Command::new(tool).args(defaults.args()).arg("sst"),
        ": check the server's option files",
    )?;
    sst_options(&printed)
}

fn joiner(job: &SstJob, opts: &SstOptions, groups: &Groups) -> Result<()> {
    let (host, port) = listen_address(&job.address)?;
    let addr: SocketAddr = (host.as_str(), port)
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| Error::Usage(format!("sst: cannot resolve the SST address {host:?}")))?;
    let sst_dir = job.datadir.join(SST_DIR);
    if sst_dir.exists() {
        log(&format!(
            "removing {} left by an earlier state transfer",
            sst_dir.display()
        ));
        fs::remove_dir_all(&sst_dir)
            .map_err(|e| Error::io(format!("removing {}", sst_dir.display()), e))?;
    }
    fs::DirBuilder::new()
        .mode(0o700)
        .create(&sst_dir)
        .map_err(|e| Error::io(format!("creating {}", sst_dir.display()), e))?;
    let mbstream = program("mbstream", "mariadb-backup")?;
    let mut recv = Command::new(haul_exe()?);
    recv.args(["recv", "--progress", "--to-command"])
        .arg(format!(
            "exec {} -x -C {}",
            sh_quote(&mbstream),
            sh_quote(&sst_dir)
        ))
        .args(["--listen", &addr.to_string(), "--timeout"])
        .arg(opts.timeout.unwrap_or(DEFAULT_WAIT).to_string())
        .stdout(Stdio::piped());
    let mut step = Step::spawn("haul recv", recv, groups)?;
    let ticket = first_line(&mut step)?;
    // The part before '@' goes to the donor's script in its environment, not its argv.
    println!("ready haul:{ticket}@{addr}/haul");
    std::io::stdout()
        .flush()
        .map_err(|e| Error::io("writing to the server", e))?;
    log(&format!("waiting for the donor on {addr}"));
    step.wait(
        job.parent,
        ": the donor's log says why; the server retries the join",
    )?;

    let coords = state_id(&sst_dir)?;
    if sst_dir.join(IST_FILE).exists() {
        log("the donor sent the state id only: the server catches up by IST");
    } else {
        install_backup(job, &sst_dir, groups)?;
    }
    fs::remove_dir_all(&sst_dir)
        .map_err(|e| Error::io(format!("removing {}", sst_dir.display()), e))?;
    log(&format!("state transfer complete: {coords}"));
    println!("{coords}");
    Ok(())
}

/// Prepares the received backup, replaces the old data with it.
fn install_backup(job: &SstJob, sst_dir: &Path, groups: &Groups) -> Result<()> {
    if !sst_dir.join("xtrabackup_checkpoints").is_file() {
        return Err(Error::StateTransfer {
            message: format!(
                "the stream ended without xtrabackup_checkpoints in {}: mariadb-backup failed \
                 on the donor (see its log)",
                sst_dir.display()
            ),
            code: exit::OTHER,
        });
    }
    let backup = program("mariadb-backup", "mariadb-backup")?;
    log(&format!("preparing the backup in {}", sst_dir.display()));
    let mut prepare = Command::new(&backup);
    prepare
        .args(job.defaults.args())
        .arg("--prepare")
        .arg(dir_arg("--target-dir", sst_dir))
        .arg(dir_arg("--datadir", sst_dir));
    Step::spawn("mariadb-backup --prepare", prepare, groups)?.wait(job.parent, "")?;
    log(&format!(
        "removing the old data in {}",
        job.datadir.display()
    ));
    clear_datadir(&job.datadir)?;
    let mut move_back = Command::new(&backup);
    move_back
        .args(job.defaults.args())
        .args(["--move-back", "--force-non-empty-directories"])
        .arg(dir_arg("--target-dir", sst_dir))
        .arg(dir_arg("--datadir", &job.datadir));
    Step::spawn("mariadb-backup --move-back", move_back, groups)?.wait(job.parent, "")
}

/// The state id the joiner reports: the donor's, else mariadb-backup's (first line).
fn state_id(sst_dir: &Path) -> Result<String> {
    for name in [DONOR_INFO, BACKUP_INFO] {
        let Ok(text) = fs::read_to_string(sst_dir.join(name)) else {
            continue;
        };
        if let Some(line) = text
            .lines()
            .next()
            .map(str::trim)
            .filter(|l| l.contains(':'))
        {
            return Ok(line.to_string());
        }
    }
    Err(Error::StateTransfer {
        message: format!(
            "no state id ({DONOR_INFO} or {BACKUP_INFO}) arrived in {}: is the donor's \
             wsrep_sst_method haul?",
            sst_dir.display()
        ),
        code: exit::OTHER,
    })
}

/// Removes what a state transfer replaces from `datadir` (not [`KEEP_NAMES`] and
/// [`KEEP_SUFFIXES`]).
fn clear_datadir(datadir: &Path) -> Result<()> {
    let entries = fs::read_dir(datadir)
        .map_err(|e| Error::io(format!("reading {}", datadir.display()), e))?;
    for entry in entries {
        let entry = entry.map_err(|e| Error::io(format!("reading {}", datadir.display()), e))?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if KEEP_NAMES.contains(&name.as_ref()) || KEEP_SUFFIXES.iter().any(|s| name.ends_with(s)) {
            continue;
        }
        let path = entry.path();
        let is_dir = entry.file_type().map(|t| t.is_dir()).unwrap_or(false);
        let removed = match is_dir {
            true => fs::remove_dir_all(&path),
            false => fs::remove_file(&path),
        };
        removed.map_err(|e| Error::io(format!("removing {}", path.display()), e))?;
    }
    Ok(())
}

fn donor(job: &SstJob, opts: &SstOptions, groups: &Groups) -> Result<()> {
    let auth = std::env::var("WSREP_SST_OPT_REMOTE_AUTH").unwrap_or_default();
    let Some(ticket) = auth.strip_prefix("haul:").filter(|t| !t.is_empty()) else {
        return Err(Error::StateTransfer {
            message: "the joiner's request carries no haul ticket: set wsrep_sst_method=haul \
                      on the joiner too"
                .into(),
            code: exit::USAGE,
        });
    };
    let gtid = job.gtid.as_deref().unwrap_or_default();
    let stage = Stage::new()?;
    // mariadb-backup --galera-info puts the state id files into its stream itself; with
    // --bypass only ours go, and the IST marker.
    let produce = match job.bypass {
        true => {
            let domain = job.gtid_domain.as_deref().unwrap_or("0");
            stage.write(DONOR_INFO, &format!("{gtid} {domain}\n"))?;
            stage.write(IST_FILE, "1\n")?;
            let mbstream = program("mbstream", "mariadb-backup")?;
            format!(
                "cd {} && exec {} -c {DONOR_INFO} {IST_FILE}",
                sh_quote(&stage.0),
                sh_quote(&mbstream)
            )
        }
        false => format!("exec {}", backup_command(job, &stage.0)?),
    };
    let mut send = Command::new(haul_exe()?);
    send.args(["send", "--progress", "--from-command", &produce]);
    if let Some(n) = opts.streams {
        send.args(["--streams", &n.to_string()]);
    }
    if let Some(l) = &opts.limit {
        send.args(["--limit", l]);
    }
    if let Some(c) = &opts.compress {
        send.args(["--compress", c]);
    }
    send.env("HAUL_TICKET", ticket).stdout(stderr_stdio()?);
    if let Some(pswd) = password() {
        send.env("MYSQL_PWD", pswd);
    }
    log(&format!(
        "streaming {} to the joiner at {}",
        if job.bypass {
            "the state id"
        } else {
            "a mariadb-backup"
        },
        job.address
    ));
    Step::spawn("haul send", send, groups)?.wait(job.parent, ": the joiner's log may say more")?;
    println!("done {gtid}");
    Ok(())
}

/// The donor's `mariadb-backup --backup` command line, for `sh -c`.
fn backup_command(job: &SstJob, stage: &Path) -> Result<String> {
    let backup = program("mariadb-backup", "mariadb-backup")?;
    let mut words: Vec<String> = vec![sh_quote(&backup)];
    words.extend(job.defaults.args().iter().map(|a| sh_word(a)));
    words.push("--backup --galera-info --stream=xbstream".into());
    for (opt, dir) in [("--target-dir", "target"), ("--tmpdir", "tmp")] {
        words.push(sh_word(&dir_arg(opt, &stage.join(dir))));
    }
    words.push(sh_word(&dir_arg("--datadir", &job.datadir)));
    if let Some(s) = &job.socket {
        words.push(sh_word(&dir_arg("--socket", s)));
    }
    if let Some(user) = user() {
        words.push(sh_word(&format!("--user={user}")));
    }
    Ok(words.join(" "))
}

/// `WSREP_SST_OPT_AUTH`'s user (`wsrep_sst_auth = user:password`), if any.
fn user() -> Option<String> {
    let auth = std::env::var("WSREP_SST_OPT_AUTH").ok()?;
    let user = auth.split(':').next()?.to_string();
    (!user.is_empty() && auth != "(null)").then_some(user)
}

/// Its password (given to mariadb-backup in the environment, as mariabackup's script does).
fn password() -> Option<String> {
    let auth = std::env::var("WSREP_SST_OPT_AUTH").ok()?;
    auth.split_once(':')
        .map(|(_, p)| p.to_string())
        .filter(|p| !p.is_empty())
}

fn dir_arg(opt: &str, dir: &Path) -> String {
    format!("{opt}={}", dir.display())
}

/// This haul, for the transfer's own processes.
fn haul_exe() -> Result<PathBuf> {
    std::env::current_exe().map_err(|e| Error::io("finding this haul's own path", e))
}

/// The server reads our stdout as the transfer's answer: other output goes to stderr, the
/// error log.
fn stderr_stdio() -> Result<Stdio> {
    let fd = std::io::stderr()
        .as_fd()
        .try_clone_to_owned()
        .map_err(|e| Error::io("duplicating stderr", e))?;
    Ok(Stdio::from(fd))
}

/// The ticket `haul recv` prints first; what it prints later is passed to the error log.
fn first_line(step: &mut Step) -> Result<String> {
    let Some(out) = step.child.stdout.take() else {
        return Err(Error::io(
            "reading haul recv's ticket",
            std::io::ErrorKind::BrokenPipe.into(),
        ));
    };
    let mut out = BufReader::new(out);
    let mut line = String::new();
    // Bounded: recv prints the ticket at once or exits (end of file), and is ours to stop.
    out.by_ref()
        .take(4096)
        .read_line(&mut line)
        .map_err(|e| Error::io("reading haul recv's ticket", e))?;
    let ticket = line.trim().to_string();
    if !ticket.starts_with("haul1-") || ticket.contains('@') {
        return Err(Error::StateTransfer {
            message: format!("haul recv printed no ticket (got {ticket:?}): see the lines above"),
            code: exit::OTHER,
        });
    }
    std::thread::spawn(move || {
        let mut err = std::io::stderr();
        let _ = std::io::copy(&mut out, &mut err);
    });
    Ok(ticket)
}

/// The donor's private scratch directory (mode 0700), removed when the transfer ends.
struct Stage(PathBuf);

impl Stage {
    fn new() -> Result<Stage> {
        let base = std::env::temp_dir();
        let nonce: u64 = rand_u64()?;
        let dir = base.join(format!("haul-sst-{}-{nonce:016x}", std::process::id()));
        let mut b = fs::DirBuilder::new();
        b.mode(0o700);
        b.create(&dir)
            .map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
        for sub in ["target", "tmp"] {
            b.create(dir.join(sub))
                .map_err(|e| Error::io(format!("creating {}/{sub}", dir.display()), e))?;
        }
        Ok(Stage(dir))
    }

    fn write(&self, name: &str, text: &str) -> Result<()> {
        let path = self.0.join(name);
        fs::write(&path, text).map_err(|e| Error::io(format!("writing {}", path.display()), e))
    }
}

impl Drop for Stage {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn rand_u64() -> Result<u64> {
    let mut b = [0u8; 8];
    getrandom::fill(&mut b)
        .map_err(|e| Error::io("reading random bytes", std::io::Error::other(e.to_string())))?;
    Ok(u64::from_le_bytes(b))
}
