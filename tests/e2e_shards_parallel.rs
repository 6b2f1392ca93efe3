//! The GNU parallel recipe of docs/shards.md, run with the real `parallel`: a plan of 8
//! shards of the hostile tree, each moved by its own `haul copy --shard {} HOST:DST` (the
//! test sshd on loopback), 4 at a time, with `--retries 3` and a `--joblog`; then the
//! same with one task whose first attempt kills its haul mid-transfer (a lost node), which
//! parallel retries and haul resumes. `haul plan --check` must pass after each, and the
//! tree be identical.
//!
//! Needs root (the test sshd) and the Debian package `parallel` (`.ci/run` installs it);
//! prints `SKIPPED: …` without them, and fails instead when `CI` is set.

mod support;

use std::ffi::OsStr;
use std::path::Path;
use std::process::Command;

use support::sshd::Sshd;
use support::*;

/// The recipe's line, with `$HAUL` for the binary under test and `$HAUL_ARGS` for the test
/// sshd's options (the ssh command itself is in `HAUL_RSH`).
const RECIPE: &str = r#"parallel -j 4 --retries 3 --joblog "$LOG" $HAUL copy --shard {} $HAUL_ARGS "$DST" ::: "$PLAN"/shard-*"#;

/// The same, each task through a script whose first attempt at shard 0 kills its haul
/// once the receiver journaled part of the big file, and fails.
const RECIPE_KILLED_ONCE: &str =
    r#"parallel -j 4 --retries 3 --joblog "$LOG" sh "$TASK" {} ::: "$PLAN"/shard-*"#;

const TASK: &str = r#"#!/bin/sh
if [ "$1" = "$PLAN/shard-0" ] && mkdir "$PLAN.killed" 2>/dev/null; then
  $HAUL copy --shard "$1" $HAUL_ARGS --streams 1 --block-size 1M --limit 4M "$DST" &
  pid=$!
  n=0
  until find "$DST_LOCAL" -name '.haul-*.journal' -size +64c 2>/dev/null | grep -q .; do
    n=$((n + 1)); [ $n -lt 600 ] || break
    sleep 0.05
  done
  kill -9 $pid
  echo "killed the haul of shard 0"
  exit 1
fi
exec $HAUL copy --shard "$1" $HAUL_ARGS "$DST"
"#;

/// Where GNU parallel is, if installed; prints why not (or panics under CI).
fn parallel_available(test: &str) -> bool {
    let found = ["/usr/bin/parallel", "/bin/parallel"]
        .iter()
        .any(|p| Path::new(p).is_file());
    if found {
        return true;
    }
    let why = "GNU parallel is not installed (apt-get install -y parallel)";
    assert!(
        std::env::var_os("CI").is_none(),
        "{test}: {why}; .ci/run should have installed it"
    );
    println!("SKIPPED: {test}: {why}");
    false
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
fn gnu_parallel_moves_eight_shards_and_retries_a_killed_task() {
    let test = "gnu_parallel_moves_eight_shards_and_retries_a_killed_task";
    if !parallel_available(test) {
        return;
    }
    let Some(sshd) = Sshd::start(test) else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let src = build_tree(tmp.path(), "src", &TreeOptions::small());
    // The largest unit goes to shard 0: the file the second run's first attempt dies in.
    write_random_file(&src.join("big.bin"), 16 * MIB, 17);
    let plan = tmp.path().join("plan");
    let mut cmd = Haul::new().command("plan");
    cmd.arg(&src).args(["--shards", "8", "--out"]).arg(&plan);
    Running::spawn("plan", cmd).wait().assert_code(0);
    let task = tmp.path().join("task.sh");
    std::fs::write(&task, TASK).unwrap();

    for (case, recipe) in [("all", RECIPE), ("killed", RECIPE_KILLED_ONCE)] {
        let dst = tmp.path().join(format!("dst-{case}"));
        let log = tmp.path().join(format!("{case}.log"));
        let mut cmd = Command::new("sh");
        cmd.args(["-c", recipe])
            .env("HOME", tmp.path())
            .env("PLAN", &plan)
            .env("DST", format!("127.0.0.1:{}", dst.display()))
            .env("DST_LOCAL", &dst)
            .env("LOG", &log)
            .env("TASK", &task)
            .env("HAUL", haul_bin())
            .env("HAUL_ARGS", format!("--remote-haul {}", haul_bin()))
            .env("HAUL_RSH", sshd.rsh());
        let out = Running::spawn("parallel", cmd).wait();
        let joblog = std::fs::read_to_string(&log).unwrap_or_default();
        let all = format!(
            "{}\n--- joblog ---\n{joblog}\n--- sshd log ---\n{}",
            out.describe(),
            sshd.log()
        );
        println!("--- parallel ({case}) ---\n{joblog}");
        assert_eq!(out.code(), Some(0), "{all}");
        // A header and one line per shard, each with exit value 0 (the 7th column).
        let jobs: Vec<&str> = joblog.lines().skip(1).collect();
        assert_eq!(jobs.len(), 8, "{all}");
        assert!(
            jobs.iter().all(|l| l.split('\t').nth(6) == Some("0")),
            "{all}"
        );
        if case == "killed" {
            assert!(
                plan_killed(&plan),
                "the first attempt at shard 0 was killed: {all}"
            );
        }
        assert_trees_equal(&src, &dst.join("src"));
        assert_no_part_files(&dst);
        let check = check(&plan, &dst);
        assert_eq!(check.code(), Some(0), "{}", check.describe());
        println!("{}", check.stderr.trim());
    }
    let _ = std::fs::remove_dir(plan.with_extension("killed"));
}

/// Whether the killing attempt ran (it leaves `PLAN.killed`).
fn plan_killed(plan: &Path) -> bool {
    plan.with_extension("killed").is_dir()
}
