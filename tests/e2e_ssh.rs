//! End-to-end remote copies over a real OpenSSH server (`support::sshd`, on a loopback port
//! with throwaway keys): push, pull, remote to remote, a custom `-e` command, the
//! zero-install path (no usable haul on the far host; its cache there), a blocked data port
//! (fallback through ssh), far-end errors with the host name and the right exit code, and
//! the ticket staying out of every process listing.
//!
//! Each test prints `SKIPPED` when this machine cannot run sshd (not root, or not
//! installed); under CI that is a failure instead.

mod support;

use std::ffi::OsStr;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use support::sshd::Sshd;
use support::*;

/// `haul copy -e RSH --remote-haul HAUL --block-size 1M ARGS...`, run to completion.
fn remote_copy(sshd: &Sshd, args: &[&OsStr]) -> Outcome {
    remote_copy_with(sshd, haul_bin(), args)
}

fn remote_copy_with(sshd: &Sshd, remote_haul: &str, args: &[&OsStr]) -> Outcome {
    let rsh = sshd.rsh();
    let mut all: Vec<&OsStr> = vec![
        OsStr::new("copy"),
        OsStr::new("-e"),
        OsStr::new(&rsh),
        OsStr::new("--remote-haul"),
        OsStr::new(remote_haul),
        OsStr::new("--block-size"),
        OsStr::new(BLOCK_SIZE_ARG),
    ];
    all.extend_from_slice(args);
    let out = Haul::new().run(&all);
    if out.code() != Some(0) {
        eprintln!("--- sshd log ---\n{}", sshd.log());
    }
    out
}

/// `host:path` as an argument.
fn at(host: &str, path: &Path) -> PathBuf {
    PathBuf::from(format!("{host}:{}", path.display()))
}

fn os(p: &Path) -> &OsStr {
    p.as_os_str()
}

#[test]
fn push_copies_a_tree_to_the_far_host() {
    let Some(sshd) = Sshd::start("push_copies_a_tree_to_the_far_host") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let src = build_tree(tmp.path(), "src", &TreeOptions::small());
    let dest = tmp.path().join("dest");
    let out = remote_copy(&sshd, &[os(&src), os(&at("127.0.0.1", &dest))]);
    out.assert_code(0);
    assert_eq!(dir_names(&dest), vec![b"src".to_vec()]);
    assert_trees_equal(&src, &dest.join("src"));
    assert_no_part_files(&dest);
    assert!(out.stdout.is_empty(), "{}", out.describe());
    assert!(!out.stderr.contains("ssh instead"), "{}", out.describe());
}

#[test]
fn pull_copies_a_tree_from_the_far_host() {
    let Some(sshd) = Sshd::start("pull_copies_a_tree_from_the_far_host") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let src = build_tree(tmp.path(), "src", &TreeOptions::small());
    let dest = tmp.path().join("dest");
    // Contents form (`src/`) and a user name.
    let from = PathBuf::from(format!("root@127.0.0.1:{}/", src.display()));
    let out = remote_copy(&sshd, &[os(&from), os(&dest)]);
    out.assert_code(0);
    assert_trees_equal(&src, &dest);
    assert_no_part_files(&dest);
}

#[test]
fn remote_to_remote_goes_directly_between_the_far_ends() {
    let Some(sshd) = Sshd::start("remote_to_remote_goes_directly_between_the_far_ends") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let src = build_tree(tmp.path(), "src", &TreeOptions::small());
    let dest = tmp.path().join("dest");
    // Two names for the same server, so the two far ends are separate sessions.
    let out = remote_copy(
        &sshd,
        &[os(&at("127.0.0.1", &src)), os(&at("localhost", &dest))],
    );
    out.assert_code(0);
    assert_trees_equal(&src, &dest.join("src"));
    assert!(
        out.stderr.contains("copied 127.0.0.1 -> localhost"),
        "{}",
        out.describe()
    );
}

#[test]
fn single_file_takes_the_destination_name_on_every_route() {
    let Some(sshd) = Sshd::start("single_file_takes_the_destination_name_on_every_route") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let f = tmp.path().join("f");
    write_random_file(&f, 3 * MIB + 17, 7);
    let cases = [
        (f.clone(), at("127.0.0.1", &tmp.path().join("pushed"))),
        (at("127.0.0.1", &f), tmp.path().join("pulled")),
        (
            at("127.0.0.1", &f),
            at("localhost", &tmp.path().join("between")),
        ),
    ];
    for (from, to) in &cases {
        remote_copy(&sshd, &[os(from), os(to)]).assert_code(0);
    }
    for name in ["pushed", "pulled", "between"] {
        assert_contents_equal(&f, &tmp.path().join(name));
    }
}

#[test]
fn custom_rsh_from_env_with_quoted_words_is_used() {
    let Some(sshd) = Sshd::start("custom_rsh_from_env_with_quoted_words_is_used") else {
        return;
    };
    // A wrapper whose path has a space, named through HAUL_RSH with quotes.
    let wrapper_dir = sshd.dir().join("my bin");
    std::fs::create_dir_all(&wrapper_dir).unwrap();
    let wrapper = wrapper_dir.join("myssh");
    let log = sshd.dir().join("rsh.log");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\necho \"$@\" >> '{}'\nexec {} \"$@\"\n",
            log.display(),
            sshd.rsh()
        ),
    )
    .unwrap();
    std::fs::set_permissions(
        &wrapper,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let src = build_tree(tmp.path(), "src", &TreeOptions::small());
    let dest = tmp.path().join("dest");
    let mut cmd = Haul::new().command("copy");
    cmd.env(
        "HAUL_RSH",
        format!("'{}' -o ServerAliveInterval=5", wrapper.display()),
    )
    .arg("--remote-haul")
    .arg(haul_bin())
    .arg(&src)
    .arg(at("127.0.0.1", &dest));
    let out = Running::spawn("copy", cmd).wait();
    out.assert_code(0);
    assert_trees_equal(&src, &dest.join("src"));
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(
        logged.contains("-o ServerAliveInterval=5") && logged.contains("127.0.0.1"),
        "{logged}"
    );
}

/// Every directory under `dir`.
fn subdirs(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .map(|it| it.flatten().map(|e| e.path()).collect())
        .unwrap_or_default()
}

#[test]
fn zero_install_uploads_this_binary_and_cleans_up() {
    let Some(sshd) = Sshd::start("zero_install_uploads_this_binary_and_cleans_up") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let far_tmp = tmp.path().join("far-tmp");
    std::fs::create_dir(&far_tmp).unwrap();
    let src = build_tree(tmp.path(), "src", &TreeOptions::small());
    let dest = tmp.path().join("dest");
    // The far end's TMPDIR (sshd accepts it), so the test can see the upload's directory.
    let rsh = format!("{} -o SetEnv=TMPDIR={}", sshd.rsh(), far_tmp.display());
    let mut cmd = Haul::new().command("copy");
    cmd.args(["-e", &rsh, "--remote-haul", "/nonexistent/haul"])
        .arg(&src)
        .arg(at("127.0.0.1", &dest));
    let out = Running::spawn("copy", cmd).wait();
    out.assert_code(0);
    assert_trees_equal(&src, &dest.join("src"));
    // What the far end creates gets the login's umask, not the upload directory's 077.
    let mode = fs::metadata(&dest).unwrap().mode() & 0o777;
    assert_eq!(mode, 0o755, "destination created {mode:o}");
    let said: Vec<&str> = out
        .stderr
        .lines()
        .filter(|l| l.contains("no usable haul"))
        .collect();
    assert_eq!(said.len(), 1, "says so in one line\n{}", out.describe());
    assert!(said[0].contains("127.0.0.1"), "{}", said[0]);
    assert!(
        subdirs(&far_tmp).is_empty(),
        "upload left behind: {:?}",
        subdirs(&far_tmp)
    );
}

/// A push to a far host without haul, through the far user's cache; its stderr.
fn cached_push(sshd: &Sshd, tmp: &Path, run: &str, extra: &[&str]) -> String {
    let src = build_tree(tmp, run, &TreeOptions::small());
    let dest = tmp.join(format!("dest-{run}"));
    let mut cmd = Haul::new().command("copy");
    cmd.args(["-e", &sshd.rsh(), "--remote-haul", "/nonexistent/haul"])
        .args(extra)
        .arg(&src)
        .arg(at("127.0.0.1", &dest));
    let out = Running::spawn("copy", cmd).wait();
    out.assert_code(0);
    assert_trees_equal(&src, &dest.join(run));
    out.stderr
}

/// The cached copies under the far user's cache: (path, mode) of each `haul`.
fn cached_copies(sshd: &Sshd) -> Vec<(PathBuf, u32)> {
    subdirs(&sshd.far_cache().join("haul"))
        .into_iter()
        .map(|d| d.join("haul"))
        .filter_map(|f| {
            fs::symlink_metadata(&f)
                .ok()
                .map(|m| (f, m.mode() & 0o7777))
        })
        .collect()
}

#[test]
fn zero_install_caches_the_upload_and_reuses_it() {
    let Some(sshd) = Sshd::start("zero_install_caches_the_upload_and_reuses_it") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let first = cached_push(&sshd, tmp.path(), "one", &[]);
    assert!(first.contains("to your cache there"), "{first}");
    let copies = cached_copies(&sshd);
    assert_eq!(copies.len(), 1, "{copies:?}");
    let (cached, mode) = copies[0].clone();
    assert_eq!(mode, 0o700);
    let size = fs::metadata(haul_bin()).unwrap().len();
    assert_eq!(fs::metadata(&cached).unwrap().len(), size);
    // The second run uploads nothing.
    let second = cached_push(&sshd, tmp.path(), "two", &[]);
    assert!(second.contains("cached there"), "{second}");
    assert!(!second.contains("copying"), "uploaded again: {second}");
    // A cached copy someone changed is found out, not run, and replaced.
    let marker = tmp.path().join("tampered-copy-ran");
    let evil = format!(
        "#!/bin/sh
touch '{}'
",
        marker.display()
    );
    fs::write(&cached, evil).unwrap();
    let third = cached_push(&sshd, tmp.path(), "three", &[]);
    assert!(!marker.exists(), "the tampered copy was run");
    assert!(third.contains("damaged"), "{third}");
    assert!(third.contains("to your cache there"), "{third}");
    assert_eq!(fs::metadata(&cached).unwrap().len(), size, "replaced");
}

#[test]
fn zero_install_with_no_cache_writes_no_cache() {
    let Some(sshd) = Sshd::start("zero_install_with_no_cache_writes_no_cache") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let said = cached_push(&sshd, tmp.path(), "one", &["--no-cache"]);
    assert!(said.contains("temporary directory"), "{said}");
    assert!(
        !sshd.far_cache().join("haul").exists(),
        "--no-cache wrote the cache"
    );
}

#[test]
fn zero_install_replaces_a_far_haul_of_another_version() {
    let Some(sshd) = Sshd::start("zero_install_replaces_a_far_haul_of_another_version") else {
        return;
    };
    // A "haul" that answers the probe with another version (and would fail if run).
    let fake = sshd.dir().join("old-haul");
    std::fs::write(&fake, "#!/bin/sh\necho 'haul-serve 99 1'\nexit 3\n").unwrap();
    std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let src = build_tree(tmp.path(), "src", &TreeOptions::small());
    let dest = tmp.path().join("dest");
    let out = remote_copy_with(
        &sshd,
        fake.to_str().unwrap(),
        &[os(&at("127.0.0.1", &src)), os(&dest)],
    );
    out.assert_code(0);
    assert!(out.stderr.contains("no usable haul"), "{}", out.describe());
    assert_trees_equal(&src, &dest.join("src"));
}

#[test]
fn blocked_data_port_falls_back_to_ssh_both_ways() {
    let Some(sshd) = Sshd::start("blocked_data_port_falls_back_to_ssh_both_ways") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let src = build_tree(tmp.path(), "src", &TreeOptions::small());
    // The far end advertises an address nobody can reach (TEST-NET-1, RFC 5737): the direct
    // connection fails as it would behind a firewall.
    let blocked = ["--remote-advertise", "192.0.2.1"].map(OsStr::new);
    let pushed = tmp.path().join("pushed");
    let to = at("127.0.0.1", &pushed);
    let mut args = blocked.to_vec();
    args.extend([os(&src), os(&to)]);
    let out = remote_copy(&sshd, &args);
    out.assert_code(0);
    assert!(
        out.stderr.contains("cannot connect directly") && out.stderr.contains("through ssh"),
        "{}",
        out.describe()
    );
    assert_trees_equal(&src, &pushed.join("src"));

    let pulled = tmp.path().join("pulled");
    let mut args = blocked.to_vec();
    let from = at("127.0.0.1", &src);
    args.extend([os(&from), os(&pulled)]);
    let out = remote_copy(&sshd, &args);
    out.assert_code(0);
    assert!(out.stderr.contains("through ssh"), "{}", out.describe());
    assert_trees_equal(&src, &pulled.join("src"));

    // Remote to remote has no fallback (it would route the data through this host): a
    // clear network error naming both hosts.
    let between = at("localhost", &tmp.path().join("between"));
    let mut args = blocked.to_vec();
    args.extend([os(&from), os(&between)]);
    let out = remote_copy(&sshd, &args);
    out.assert_code(5);
    assert!(
        out.stderr
            .contains("127.0.0.1 must reach localhost directly for a remote-to-remote copy"),
        "{}",
        out.describe()
    );
}

#[test]
fn via_ssh_forces_the_tunnel() {
    let Some(sshd) = Sshd::start("via_ssh_forces_the_tunnel") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let src = build_tree(tmp.path(), "src", &TreeOptions::small());
    let dest = tmp.path().join("dest");
    let out = remote_copy(
        &sshd,
        &[
            OsStr::new("--via-ssh"),
            os(&src),
            os(&at("127.0.0.1", &dest)),
        ],
    );
    out.assert_code(0);
    assert_trees_equal(&src, &dest.join("src"));
    // Forced: no failed direct attempt to report.
    assert!(
        !out.stderr.contains("cannot connect directly"),
        "{}",
        out.describe()
    );
}

#[test]
fn far_end_errors_carry_the_host_name_and_exit_code() {
    let Some(sshd) = Sshd::start("far_end_errors_carry_the_host_name_and_exit_code") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let src = build_tree(tmp.path(), "src", &TreeOptions::small());
    // Missing source on the far host: 3.
    let out = remote_copy(
        &sshd,
        &[
            os(&at("127.0.0.1", &tmp.path().join("missing"))),
            os(&tmp.path().join("d1")),
        ],
    );
    out.assert_code(3);
    let err_line: Vec<&str> = out.stderr.lines().filter(|l| l.contains("error")).collect();
    assert_eq!(err_line.len(), 1, "{}", out.describe());
    assert!(
        err_line[0].starts_with("haul: error: 127.0.0.1: ") && err_line[0].contains("missing"),
        "{}",
        out.describe()
    );
    // Unwritable destination on the far host (a regular file in the way): 4.
    let file = tmp.path().join("a-file");
    std::fs::write(&file, b"x").unwrap();
    let out = remote_copy(
        &sshd,
        &[os(&src), os(&at("127.0.0.1", &file.join("below")))],
    );
    out.assert_code(4);
    assert!(
        out.stderr
            .contains("haul: error: 127.0.0.1: cannot write destination"),
        "{}",
        out.describe()
    );
    // The same from remote to remote: the receiving host is named.
    let out = remote_copy(
        &sshd,
        &[
            os(&at("127.0.0.1", &src)),
            os(&at("localhost", &file.join("below"))),
        ],
    );
    out.assert_code(4);
    assert!(
        out.stderr
            .contains("haul: error: localhost: cannot write destination"),
        "{}",
        out.describe()
    );
    // No ssh server there: 5, ssh's own message shown with the host name.
    let out = Haul::new().run(&[
        OsStr::new("copy"),
        OsStr::new("-e"),
        OsStr::new(
            &sshd
                .rsh()
                .replace(&sshd.port.to_string(), &free_port().to_string()),
        ),
        os(&src),
        os(&at("127.0.0.1", &tmp.path().join("d2"))),
    ]);
    out.assert_code(5);
    assert!(
        out.stderr.contains("haul: 127.0.0.1: ssh"),
        "{}",
        out.describe()
    );
    assert!(
        out.stderr.contains("haul: error: 127.0.0.1: ssh failed"),
        "{}",
        out.describe()
    );
}

/// Every process's command line on this machine (both "hosts" of these tests).
fn all_cmdlines() -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        if let Ok(b) = std::fs::read(e.path().join("cmdline")) {
            out.push(String::from_utf8_lossy(&b).replace('\0', " "));
        }
    }
    out
}

#[test]
fn tickets_never_appear_in_process_listings() {
    let Some(sshd) = Sshd::start("tickets_never_appear_in_process_listings") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    std::fs::create_dir(&src).unwrap();
    for i in 0..24 {
        write_random_file(&src.join(format!("f{i}")), 4 * MIB, i);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let (mut leaks, mut serves) = (Vec::new(), 0usize);
            while !stop.load(Ordering::Relaxed) {
                // Only this checkout's processes (ours, ssh and the far ends all name this
                // binary): other checkouts' tests may run on the same machine.
                for c in all_cmdlines()
                    .into_iter()
                    .filter(|c| c.contains(haul_bin()))
                {
                    if c.contains("haul1-") {
                        leaks.push(c.clone());
                    }
                    if c.contains(" serve") && c.contains("haul") {
                        serves += 1;
                    }
                }
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            (leaks, serves)
        })
    };
    // Pull and remote to remote: the two ways a ticket goes to a far end or comes back.
    let out = remote_copy(
        &sshd,
        &[os(&at("127.0.0.1", &src)), os(&tmp.path().join("a"))],
    );
    out.assert_code(0);
    let out = remote_copy(
        &sshd,
        &[
            os(&at("127.0.0.1", &src)),
            os(&at("localhost", &tmp.path().join("b"))),
        ],
    );
    out.assert_code(0);
    stop.store(true, Ordering::Relaxed);
    let (leaks, serves) = watcher.join().unwrap();
    assert!(leaks.is_empty(), "ticket in a command line: {leaks:?}");
    assert!(serves > 0, "the watcher never saw a far end running");
}

#[test]
fn push_across_the_netns_test_bed() {
    let test = "push_across_the_netns_test_bed";
    if !support::sshd::available(test) {
        return;
    }
    let Some(mut bed) = support::netbed::Netbed::new("haulssh", "198.18.7") else {
        println!("SKIPPED: {test}: the netlab test bed is not usable here (needs root and ip)");
        eprintln!("SKIPPED: {test}: the netlab test bed is not usable here (needs root and ip)");
        return;
    };
    let up = bed.up();
    if !up.status.success() {
        let why = String::from_utf8_lossy(&up.stderr);
        println!("SKIPPED: {test}: netlab up failed: {why}");
        eprintln!("SKIPPED: {test}: netlab up failed: {why}");
        return;
    }
    let sshd = Sshd::start_at("198.18.7.2", Some("haulssh-b"));
    let tmp = tempfile::tempdir().unwrap();
    let src = build_tree(tmp.path(), "src", &TreeOptions::small());
    let dest = tmp.path().join("dest");
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", "haulssh-a", haul_bin(), "copy", "-e"])
        .arg(sshd.rsh())
        .arg("--remote-haul")
        .arg(haul_bin())
        .arg(&src)
        .arg(at("198.18.7.2", &dest));
    let out = Running::spawn("copy", cmd).wait();
    if out.code() != Some(0) {
        eprintln!("--- sshd log ---\n{}", sshd.log());
    }
    out.assert_code(0);
    assert!(!out.stderr.contains("through ssh"), "{}", out.describe());
    assert_trees_equal(&src, &dest.join("src"));
}

#[test]
fn push_passes_the_receivers_policy_to_the_far_end() {
    let Some(sshd) = Sshd::start("push_passes_the_receivers_policy_to_the_far_end") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    fs::create_dir(&src).unwrap();
    let f = src.join("suid");
    fs::write(&f, b"x").unwrap();
    std::os::unix::fs::chown(&f, Some(1234), Some(2345)).unwrap();
    fs::set_permissions(&f, fs::Permissions::from_mode(0o4755)).unwrap();
    let dest = tmp.path().join("dest");
    let out = remote_copy(
        &sshd,
        &[
            OsStr::new("--no-owner"),
            os(&src),
            os(&at("127.0.0.1", &dest)),
        ],
    );
    out.assert_code(0);
    let m = fs::metadata(dest.join("src/suid")).unwrap();
    assert_eq!(m.uid(), 0, "{}", out.describe());
    assert_eq!(m.mode() & 0o7777, 0o755, "{:o}", m.mode());
}

/// `--stats` of a remote-to-remote copy prints the far sender's totals, the same lines a
/// push of the same tree prints (before, it printed nothing); its dry run says it is one.
#[test]
fn remote_to_remote_stats_say_what_a_push_says() {
    let Some(sshd) = Sshd::start("remote_to_remote_stats_say_what_a_push_says") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    fs::create_dir_all(src.join("sub")).unwrap();
    for (name, len) in [("a", 100u64), ("b", 200), ("sub/c", 300)] {
        write_random_file(&src.join(name), len, len);
    }
    let stats = |to: &Path, remote_source: bool| {
        let from = match remote_source {
            true => at("127.0.0.1", &src),
            false => src.clone(),
        };
        let out = remote_copy(
            &sshd,
            &[
                os(&from),
                os(&at("localhost", to)),
                os(Path::new("--stats")),
            ],
        );
        out.assert_code(0);
        // The wire's bytes depend on the codec's choices; the totals do not.
        let lines: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| !l.starts_with("Total bytes on the wire") && !l.contains("speedup"))
            .map(str::to_string)
            .collect();
        (lines, out)
    };
    let (between, out) = stats(&tmp.path().join("between"), true);
    assert!(
        between
            .iter()
            .any(|l| l == "Number of regular files transferred: 3"),
        "{}",
        out.describe()
    );
    assert!(
        between.iter().any(|l| l == "Total file size: 600 bytes"),
        "{}",
        out.describe()
    );
    let (pushed, _) = stats(&tmp.path().join("pushed"), false);
    assert_eq!(between, pushed);
    assert_trees_equal(&src, &tmp.path().join("between").join("src"));
    // A dry run between two far ends says so (before, it said "copied 3 files").
    let dry = tmp.path().join("dry");
    let out = remote_copy(
        &sshd,
        &[
            os(&at("127.0.0.1", &src)),
            os(&at("localhost", &dry)),
            os(Path::new("-n")),
        ],
    );
    out.assert_code(0);
    assert!(
        out.stderr.contains("dry run: would send 3 files"),
        "{}",
        out.describe()
    );
    assert!(!dry.join("src").exists());
}
