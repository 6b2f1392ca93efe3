//! `haul sst`: the arguments Galera gives a `wsrep_sst_<method>` script (`--role`,
//! `--address`, `--datadir`, `--defaults-file`, `--parent`, `--gtid`, `--bypass`…, as
//! `wsrep_sst_common` reads them), and the `[sst]` options of my.cnf as
//! `my_print_defaults sst` prints them. Pure data: nothing here runs a program.
//!
//! Options the server passes that a haul transfer has no use for (`--binlog`,
//! `--mysqld-args` and what follows it, …) are accepted and ignored, so that a newer server
//! does not fail a state transfer.

use std::ffi::OsString;
use std::path::PathBuf;

use super::size::parse_limit;
use crate::error::{Error, Result};

/// The port a joiner listens on when its address names none (as `wsrep_sst_mariabackup`).
pub const DEFAULT_SST_PORT: u16 = 4444;

/// Which end of the state transfer this is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SstRole {
    /// The node that joins: receives the state.
    Joiner,
    /// The node that gives its state.
    Donor,
}

/// One state transfer, as the server asked for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SstJob {
    /// Which end.
    pub role: SstRole,
    /// Joiner: where to listen (`HOST` or `HOST:PORT`); donor: the joiner's address with
    /// the ticket taken off (the ticket comes in the environment, never in argv).
    pub address: String,
    /// The server's data directory.
    pub datadir: PathBuf,
    /// `--defaults-file`, `--defaults-extra-file`, `--defaults-group-suffix`: where
    /// mariadb-backup and my_print_defaults read options.
    pub defaults: Defaults,
    /// Donor: the server's socket, for mariadb-backup.
    pub socket: Option<PathBuf>,
    /// Donor: the state id `uuid:seqno` being given.
    pub gtid: Option<String>,
    /// Donor: `wsrep_gtid_domain_id`.
    pub gtid_domain: Option<String>,
    /// Donor: only the state id is sent (the joiner catches up by IST).
    pub bypass: bool,
    /// The server's pid: the transfer stops when it is gone.
    pub parent: Option<u32>,
}

/// Where the server's options are read from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Defaults {
    /// `--defaults-file`.
    pub file: Option<PathBuf>,
    /// `--defaults-extra-file`.
    pub extra_file: Option<PathBuf>,
    /// `--defaults-group-suffix`.
    pub group_suffix: Option<String>,
}

impl Defaults {
    /// The options to give a MariaDB program so that it reads the same files, in the
    /// order it requires (these must come first).
    pub fn args(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(f) = &self.file {
            out.push(format!("--defaults-file={}", f.display()));
        }
        if let Some(f) = &self.extra_file {
            out.push(format!("--defaults-extra-file={}", f.display()));
        }
        if let Some(s) = &self.group_suffix {
            out.push(format!("--defaults-group-suffix={s}"));
        }
        out
    }
}

/// What `haul sst` was asked to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Sst {
    /// Write the `wsrep_sst_haul` script into this directory.
    InstallScript(PathBuf),
    /// Run one end of a transfer.
    Run(SstJob),
}

/// The `[sst]` options haul reads (other methods' options there are ignored).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SstOptions {
    /// `streams=N`: data connections.
    pub streams: Option<usize>,
    /// `rlimit=RATE` (mariabackup's name) or `limit=RATE`: bytes per second, K/M/G.
    pub limit: Option<String>,
    /// `compress=auto|none|lz4|zstd` (haul's `--compress`); mariabackup's `compressor`
    /// is a command and is not read.
    pub compress: Option<String>,
    /// `haul-timeout=SECS`: how long the joiner waits for the donor, or for it to come
    /// back after a cut (default 300, as mariabackup's `sst-initial-timeout`).
    pub timeout: Option<u64>,
}

/// Parses the server's arguments.
pub fn sst_job(args: &[OsString]) -> Result<SstJob> {
    let args: Vec<String> = args
        .iter()
        .map(|a| {
            a.to_str()
                .map(str::to_owned)
                .ok_or_else(|| Error::Usage(format!("sst: argument {a:?} is not UTF-8")))
        })
        .collect::<Result<_>>()?;
    let mut role = None;
    let mut job = SstJob {
        role: SstRole::Joiner,
        address: String::new(),
        datadir: PathBuf::new(),
        defaults: Defaults::default(),
        socket: None,
        gtid: None,
        gtid_domain: None,
        bypass: false,
        parent: None,
    };
    let mut i = 0;
    while i < args.len() {
        let (key, inline) = match args[i].split_once('=') {
            Some((k, v)) if k.starts_with("--") => (k, Some(v.to_string())),
            _ => (args[i].as_str(), None),
        };
        if key == "--bypass" {
            job.bypass = true;
            i += 1;
            continue;
        }
        if key == "--mysqld-args" {
            // The server's own command line follows: none of it is ours.
            break;
        }
        if !key.starts_with("--") {
            return Err(Error::Usage(format!("sst: unexpected argument {key:?}")));
        }
        let value = match inline {
            Some(v) => v,
            None => {
                i += 1;
                args.get(i)
                    .cloned()
                    .ok_or_else(|| Error::Usage(format!("sst: {key} needs a value")))?
            }
        };
        i += 1;
        match key {
            "--role" => {
                role = Some(match value.as_str() {
                    "joiner" => SstRole::Joiner,
                    "donor" => SstRole::Donor,
                    r => return Err(Error::Usage(format!("sst: --role {r:?}: joiner or donor"))),
                })
            }
            "--address" => job.address = value.trim().to_string(),
            "--datadir" => job.datadir = PathBuf::from(value),
            "--defaults-file" => job.defaults.file = Some(value.into()),
            "--defaults-extra-file" => job.defaults.extra_file = Some(value.into()),
            "--defaults-group-suffix" => job.defaults.group_suffix = Some(value),
            "--socket" => job.socket = Some(value.into()),
            "--gtid" => job.gtid = Some(value),
            "--gtid-domain-id" => job.gtid_domain = Some(value),
            "--parent" => {
                job.parent = Some(value.parse().map_err(|_| {
                    Error::Usage(format!("sst: --parent {value:?} is not a process id"))
                })?)
            }
            _ => {} // the server's other options: not needed by haul
        }
    }
    job.role = role.ok_or_else(|| Error::Usage("sst: --role joiner|donor is missing".into()))?;
    if job.datadir.as_os_str().is_empty() {
        return Err(Error::Usage("sst: --datadir is missing".into()));
    }
    if job.address.is_empty() {
        return Err(Error::Usage("sst: --address is missing".into()));
    }
    if job.role == SstRole::Donor && job.gtid.is_none() {
        return Err(Error::Usage(
            "sst: the donor needs --gtid UUID:SEQNO".into(),
        ));
    }
    Ok(job)
}

/// The joiner's listening address from its `--address`: `HOST`, `HOST:PORT`,
/// `[V6]`, `[V6]:PORT`, anything after a `/` dropped; the port defaults to 4444.
pub fn listen_address(address: &str) -> Result<(String, u16)> {
    let bad = || {
        Error::Usage(format!(
            "sst: cannot read the address {address:?} (HOST[:PORT])"
        ))
    };
    let head = address.split('/').next().unwrap_or_default();
    let (host, port) = match head.strip_prefix('[') {
        Some(rest) => {
            let (host, tail) = rest.split_once(']').ok_or_else(bad)?;
            (host, tail.strip_prefix(':'))
        }
        None => match head.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (head, None),
        },
    };
    if host.is_empty() {
        return Err(bad());
    }
    let port = match port {
        Some(p) => p.parse().map_err(|_| bad())?,
        None => DEFAULT_SST_PORT,
    };
    Ok((host.to_string(), port))
}

/// Reads the `[sst]` options from `my_print_defaults sst`'s output (`--key=value` a line;
/// `-` and `_` alike in keys, as the server reads them).
pub fn sst_options(printed: &str) -> Result<SstOptions> {
    let mut o = SstOptions::default();
    for line in printed.lines() {
        let Some(opt) = line.trim().strip_prefix("--") else {
            continue;
        };
        let (key, value) = opt.split_once('=').unwrap_or((opt, ""));
        let value = value.trim().to_string();
        let bad = |what: &str| Error::Usage(format!("[sst] {key}={value}: {what}"));
        match key.replace('_', "-").as_str() {
            "streams" => {
                o.streams = Some(
                    value
                        .parse()
                        .ok()
                        .filter(|n| (1..=64).contains(n))
                        .ok_or_else(|| bad("a number of streams, 1 to 64"))?,
                )
            }
            "rlimit" | "limit" => {
                parse_limit(&value, 1).map_err(|_| bad("a rate such as 100M or 1G"))?;
                o.limit = Some(value);
            }
            "compress" => o.compress = Some(value),
            "haul-timeout" => {
                o.timeout = Some(value.parse().map_err(|_| bad("seconds"))?);
            }
            _ => {}
        }
    }
    Ok(o)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<OsString> {
        s.split_whitespace().map(OsString::from).collect()
    }

    #[test]
    fn reads_a_joiner_as_mariadbd_starts_it() {
        let job = sst_job(&args(
            "--role joiner --address 10.0.0.2 --datadir /var/lib/mysql/ \
             --defaults-file /etc/mysql/my.cnf --parent 1234 --progress 0 \
             --mysqld-args --basedir=/usr --wsrep-on=ON",
        ))
        .unwrap();
        assert_eq!(job.role, SstRole::Joiner);
        assert_eq!(job.address, "10.0.0.2");
        assert_eq!(job.parent, Some(1234));
        assert_eq!(job.defaults.args(), ["--defaults-file=/etc/mysql/my.cnf"]);
    }

    #[test]
    fn reads_a_donor_with_bypass_and_inline_values() {
        let job = sst_job(&args(
            "--role donor --address=10.0.0.2:4444/haul --socket /run/mysqld.sock \
             --datadir /d --gtid 6a1b:42 --gtid-domain-id 0 --bypass --binlog b",
        ))
        .unwrap();
        assert_eq!(job.role, SstRole::Donor);
        assert!(job.bypass);
        assert_eq!(job.gtid.as_deref(), Some("6a1b:42"));
        assert_eq!(job.gtid_domain.as_deref(), Some("0"));
    }

    #[test]
    fn refuses_what_cannot_work() {
        assert!(sst_job(&args("--address a --datadir /d")).is_err());
        assert!(sst_job(&args("--role donor --address a --datadir /d")).is_err());
        assert!(sst_job(&args("--role joiner --address a --datadir")).is_err());
        assert!(sst_job(&args("--role joiner --address a --datadir /d --parent x")).is_err());
    }

    #[test]
    fn listen_address_forms() {
        assert_eq!(
            listen_address("10.0.0.2").unwrap(),
            ("10.0.0.2".into(), 4444)
        );
        assert_eq!(
            listen_address("10.0.0.2:4500/x").unwrap(),
            ("10.0.0.2".into(), 4500)
        );
        assert_eq!(
            listen_address("[fd00::2]:9").unwrap(),
            ("fd00::2".into(), 9)
        );
        assert_eq!(
            listen_address("[fd00::2]").unwrap(),
            ("fd00::2".into(), 4444)
        );
        assert!(listen_address(":4444").is_err());
        assert!(listen_address("h:port").is_err());
    }

    #[test]
    fn sst_section_options() {
        let o = sst_options("--streams=4\n--rlimit=100M\n--compress=lz4\n--encrypt=4\n").unwrap();
        assert_eq!(o.streams, Some(4));
        assert_eq!(o.limit.as_deref(), Some("100M"));
        assert_eq!(o.compress.as_deref(), Some("lz4"));
        assert!(sst_options("--streams=0\n").is_err());
        assert!(sst_options("--haul_timeout=x\n").is_err());
        assert_eq!(sst_options("--haul_timeout=5").unwrap().timeout, Some(5));
    }
}
