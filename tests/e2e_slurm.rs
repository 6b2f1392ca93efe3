//! Shards through a real scheduler: a single-node Slurm cluster (munged, slurmctld and
//! slurmd started by the test with its own slurm.conf in a temporary directory, as root,
//! without cgroups), a plan of 8 shards of the hostile tree, and a job array whose tasks
//! each run `haul copy --shard shard-$SLURM_ARRAY_TASK_ID HOST:DST` from one network
//! namespace of the netlab test bed to an sshd in the other (a local DST where netlab is
//! not usable). Then the same with one task that kills its haul mid-transfer on its first
//! attempt: the array fails, the test resubmits that index (what a scheduler's retry does),
//! and the tree is still identical. `haul plan --check` must pass after each.
//!
//! Needs root and the Debian packages slurm-wlm and munge (`.ci/run` installs them); prints
//! `SKIPPED: …` without them, and fails instead when `CI` is set.

mod support;

use std::ffi::OsStr;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use support::sshd::Sshd;
use support::*;

/// The job script of the recipe in docs/shards.md, with `$HAUL` for the binary under test
/// (and, in the test, `ip netns exec` before it) and `$HAUL_ARGS` for the test bed's
/// options.
const JOB: &str = r#"#!/bin/sh
#SBATCH --job-name=haul-shards
# One array task: moves shard $SLURM_ARRAY_TASK_ID of the plan in $PLAN to $DST.
# A task that failed is retried by submitting its index again: haul resumes.
exec $HAUL copy --shard "$PLAN/shard-$SLURM_ARRAY_TASK_ID" $HAUL_ARGS "$DST"
"#;

/// The same, except that task 0's first attempt kills its haul once the receiver has
/// journaled part of the big file (a node lost mid-transfer), and fails. One stream and
/// small blocks, slowed down, so the journal records ranges before the file completes.
const JOB_KILLED_ONCE: &str = r#"#!/bin/sh
if [ "$SLURM_ARRAY_TASK_ID" = 0 ] && mkdir "$PLAN.killed" 2>/dev/null; then
  $HAUL copy --shard "$PLAN/shard-0" $HAUL_ARGS --streams 1 --block-size 1M --limit 4M "$DST" &
  pid=$!
  n=0
  until find "$DST_LOCAL" -name '.haul-*.journal' -size +64c 2>/dev/null | grep -q .; do
    n=$((n + 1)); [ $n -lt 600 ] || break
    sleep 0.05
  done
  kill -9 $pid
  echo "killed task 0's haul"
  exit 1
fi
exec $HAUL copy --shard "$PLAN/shard-$SLURM_ARRAY_TASK_ID" $HAUL_ARGS "$DST"
"#;

/// Whether this machine can run the test; prints why not (or panics under CI).
fn available(test: &str) -> bool {
    let have = |p: &str| Path::new(p).is_file();
    let why = if !is_root() {
        Some("the tests do not run as root (slurmd and munged need it)")
    } else if !["/usr/sbin/slurmctld", "/usr/sbin/slurmd", "/usr/bin/sbatch"]
        .iter()
        .all(|p| have(p))
    {
        Some("Slurm is not installed (apt-get install -y slurm-wlm)")
    } else if !have("/usr/sbin/munged") {
        Some("munge is not installed (apt-get install -y munge)")
    } else {
        None
    };
    match why {
        None => true,
        Some(why) if std::env::var_os("CI").is_some() => {
            panic!("{test}: {why}; .ci/run should have installed it")
        }
        Some(why) => {
            println!("SKIPPED: {test}: {why}");
            eprintln!("SKIPPED: {test}: {why}");
            false
        }
    }
}

/// A one-node Slurm cluster of its own: munged, slurmctld, slurmd, all children of the
/// test, killed (and their jobs cancelled) when dropped, however the test ends.
struct Cluster {
    dir: tempfile::TempDir,
    daemons: Vec<(&'static str, Child)>,
}

impl Cluster {
    fn start() -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        for sub in ["state", "spool"] {
            fs::create_dir(d.join(sub)).unwrap();
        }
        let key = d.join("munge.key");
        fs::write(&key, support::tree::Rng::new(7).bytes(1024)).unwrap();
        fs::set_permissions(&key, fs::Permissions::from_mode(0o600)).unwrap();
        let host = String::from_utf8(Command::new("hostname").arg("-s").output().unwrap().stdout)
            .unwrap()
            .trim()
            .to_string();
        let conf = format!(
            "ClusterName=haultest\nSlurmctldHost={host}(127.0.0.1)\nSlurmctldPort={}\n\
             SlurmdPort={}\nSlurmUser=root\nSlurmdUser=root\nAuthType=auth/munge\n\
             AuthInfo=socket={d}/munge.sock\nCredType=cred/munge\nStateSaveLocation={d}/state\n\
             SlurmdSpoolDir={d}/spool\nSlurmctldPidFile={d}/slurmctld.pid\n\
             SlurmdPidFile={d}/slurmd.pid\nSlurmctldLogFile={d}/slurmctld.log\n\
             SlurmdLogFile={d}/slurmd.log\nProctrackType=proctrack/linuxproc\n\
             TaskPlugin=task/none\nJobAcctGatherType=jobacct_gather/none\n\
             AccountingStorageType=accounting_storage/none\nJobCompType=jobcomp/none\n\
             SchedulerType=sched/builtin\nSelectType=select/cons_tres\n\
             SelectTypeParameters=CR_CPU\nMpiDefault=none\nReturnToService=2\n\
             NodeName={host} NodeAddr=127.0.0.1 CPUs=2 State=UNKNOWN\n\
             PartitionName=test Nodes={host} Default=YES MaxTime=INFINITE State=UP\n",
            free_port(),
            free_port(),
            d = d.display()
        );
        // MinJobAge stays at its default (300 s): `sbatch --wait` then polls after 2, 10,
        // 42 s, but a shorter one (tried: 6, 21) loses a failed task's exit code.
        fs::write(d.join("slurm.conf"), conf).unwrap();
        let mut c = Cluster {
            dir,
            daemons: Vec::new(),
        };
        let d = c.dir.path().to_path_buf();
        let mut munged = Command::new("munged");
        munged
            .args(["-F", "-f"])
            .arg(format!("--socket={}/munge.sock", d.display()))
            .arg(format!("--key-file={}", key.display()))
            .arg(format!("--pid-file={}/munged.pid", d.display()))
            .arg(format!("--log-file={}/munged.log", d.display()))
            .arg(format!("--seed-file={}/munged.seed", d.display()));
        c.spawn("munged", munged);
        c.wait_for("munged's socket", || d.join("munge.sock").exists());
        let conf = d.join("slurm.conf");
        let mut ctld = Command::new("slurmctld");
        ctld.args(["-D", "-i", "-f"]).arg(&conf);
        c.spawn("slurmctld", ctld);
        let mut slurmd = Command::new("slurmd");
        slurmd.args(["-D", "-f"]).arg(&conf);
        c.spawn("slurmd", slurmd);
        let conf = d.join("slurm.conf");
        c.wait_for("the node to be idle", || {
            let out = Command::new("sinfo")
                .env("SLURM_CONF", &conf)
                .args(["-h", "-o", "%T"])
                .output();
            out.is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "idle")
        });
        c
    }

    fn spawn(&mut self, name: &'static str, mut cmd: Command) {
        let log = fs::File::create(self.dir.path().join(format!("{name}.out"))).unwrap();
        cmd.env("SLURM_CONF", self.dir.path().join("slurm.conf"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        self.daemons.push((name, cmd.spawn().unwrap()));
    }

    /// Waits (at most 60 s, against hangs) until `ready`; panics with the logs otherwise.
    fn wait_for(&mut self, what: &str, mut ready: impl FnMut() -> bool) {
        let until = Instant::now() + Duration::from_secs(60);
        while !ready() {
            let exited = self
                .daemons
                .iter_mut()
                .find_map(|(name, child)| Some((*name, child.try_wait().ok()??)));
            if let Some((name, status)) = exited {
                panic!("{name} exited ({status}) before {what}\n{}", self.logs());
            }
            assert!(
                Instant::now() < until,
                "no {what} after 60 s\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// A Slurm client command talking to this cluster.
    fn slurm(&self, program: &str) -> Command {
        let mut c = Command::new(program);
        c.env("SLURM_CONF", self.dir.path().join("slurm.conf"));
        c
    }

    /// `sbatch --wait` of `script` with `env`; its exit code and what the tasks printed.
    fn run_array(&self, script: &str, array: &str, env: &[(&str, String)]) -> (i32, String) {
        let d = self.dir.path();
        let file = d.join(format!("job-{}.sh", array.replace(['-', ','], "_")));
        fs::write(&file, script).unwrap();
        fs::set_permissions(&file, fs::Permissions::from_mode(0o755)).unwrap();
        let out_pattern = d.join(format!("out-{array}-%a.txt"));
        // The tasks get sbatch's environment (--export=ALL, the default).
        let out = self
            .slurm("sbatch")
            .envs(
                env.iter()
                    .filter(|(_, v)| !v.is_empty())
                    .map(|(k, v)| (k, v)),
            )
            .arg(format!("--array={array}"))
            .arg("--wait")
            .arg("-o")
            .arg(&out_pattern)
            .arg(&file)
            .output()
            .unwrap();
        let mut printed = String::from_utf8_lossy(&out.stdout).into_owned();
        printed.push_str(&String::from_utf8_lossy(&out.stderr));
        let mut outs: Vec<PathBuf> = fs::read_dir(d)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with(&format!("out-{array}-")))
            })
            .collect();
        outs.sort();
        for p in outs {
            printed.push_str(&format!("--- {}\n", p.display()));
            printed.push_str(&fs::read_to_string(&p).unwrap_or_default());
        }
        (out.status.code().unwrap_or(-1), printed)
    }

    fn logs(&self) -> String {
        let mut all = String::new();
        for name in [
            "munged.out",
            "slurmctld.log",
            "slurmd.log",
            "slurmctld.out",
            "slurmd.out",
        ] {
            let text = fs::read_to_string(self.dir.path().join(name)).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(15).collect();
            all.push_str(&format!("--- {name}\n"));
            for l in tail.into_iter().rev() {
                all.push_str(l);
                all.push('\n');
            }
        }
        all
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // Jobs first (their steps are slurmd's children), then the daemons, newest first.
        let _ = self
            .slurm("scancel")
            .args(["--full", "-u", "root"])
            .output();
        for (_, child) in self.daemons.iter_mut().rev() {
            let _ = Command::new("kill").arg(child.id().to_string()).status();
            let until = Instant::now() + Duration::from_secs(10);
            while matches!(child.try_wait(), Ok(None)) && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Where the tasks send to: `HOST:DST` through the test bed, or a local DST.
struct Route {
    haul: String,
    args: String,
    rsh: String,
    remote: bool,
    _sshd: Option<Sshd>,
    _net: Option<support::netbed::Netbed>,
}

impl Route {
    fn new(test: &str) -> Route {
        let local = |why: &str| {
            println!("NOTE: {test}: {why}: the tasks copy to a local DST");
            Route {
                haul: haul_bin().to_string(),
                args: String::new(),
                rsh: String::new(),
                remote: false,
                _sshd: None,
                _net: None,
            }
        };
        if !support::sshd::available(test) {
            return local("no sshd");
        }
        let Some(mut net) = support::netbed::Netbed::new("haulslurm", "198.18.9") else {
            return local("the netlab test bed is not usable here");
        };
        if !net.up().status.success() {
            return local("netlab up failed");
        }
        let sshd = Sshd::start_at("198.18.9.2", Some("haulslurm-b"));
        Route {
            haul: format!("ip netns exec haulslurm-a {}", haul_bin()),
            args: format!("--remote-haul {}", haul_bin()),
            rsh: sshd.rsh(),
            remote: true,
            _sshd: Some(sshd),
            _net: Some(net),
        }
    }

    fn dst(&self, dst: &Path) -> String {
        match self.remote {
            true => format!("198.18.9.2:{}", dst.display()),
            false => dst.display().to_string(),
        }
    }
}

/// `haul plan --check PLAN DST`.
fn check(plan: &Path, dst: &Path) -> Outcome {
    let args = [
        OsStr::new("plan"),
        OsStr::new("--check"),
        plan.as_os_str(),
        dst.as_os_str(),
    ];
    Haul::new().run(&args)
}

#[test]
fn slurm_job_array_moves_eight_shards_and_a_killed_task_is_retried() {
    let test = "slurm_job_array_moves_eight_shards_and_a_killed_task_is_retried";
    if !available(test) {
        return;
    }
    let cluster = Cluster::start();
    let route = Route::new(test);
    println!("tasks copy to {}", route.dst(Path::new("DST")));
    let tmp = tempfile::tempdir().unwrap();
    let src = build_tree(tmp.path(), "src", &TreeOptions::small());
    // The largest unit goes to shard 0: the file the second run's task 0 is killed in.
    support::tree::write_random_file(&src.join("big.bin"), 16 << 20, 11);
    let plan = tmp.path().join("plan");
    let mut cmd = Haul::new().command("plan");
    cmd.arg(&src).args(["--shards", "8", "--out"]).arg(&plan);
    process::Running::spawn("plan", cmd).wait().assert_code(0);

    for (case, script) in [("all", JOB), ("killed", JOB_KILLED_ONCE)] {
        let dst = tmp.path().join(format!("dst-{case}"));
        let env = [
            ("PLAN", plan.display().to_string()),
            ("DST", route.dst(&dst)),
            ("DST_LOCAL", dst.display().to_string()),
            ("HAUL", route.haul.clone()),
            ("HAUL_ARGS", route.args.clone()),
            ("HAUL_RSH", route.rsh.clone()),
        ];
        let started = Instant::now();
        let (code, printed) = cluster.run_array(script, "0-7", &env);
        let secs = started.elapsed().as_secs_f64();
        println!("--- sbatch --array=0-7 ({case}): exit {code} after {secs:.1} s\n{printed}");
        if case == "killed" {
            assert_ne!(code, 0, "task 0 was killed: the array must fail\n{printed}");
            assert!(printed.contains("killed task 0's haul"), "{printed}");
            check(&plan, &dst).assert_code(25);
            // The scheduler's retry: submit the failed index again.
            let started = Instant::now();
            let (code, printed) = cluster.run_array(script, "0", &env);
            let secs = started.elapsed().as_secs_f64();
            println!("--- sbatch --array=0 (retry): exit {code} after {secs:.1} s\n{printed}");
            assert_eq!(code, 0, "{printed}\n{}", cluster.logs());
        } else {
            assert_eq!(code, 0, "{printed}\n{}", cluster.logs());
        }
        assert_trees_equal(&src, &dst.join("src"));
        assert_no_part_files(&dst);
        let check = check(&plan, &dst);
        check.assert_code(0);
        println!("{}", check.stderr.trim());
    }
    let _ = fs::remove_dir(plan.with_extension("killed"));
}
