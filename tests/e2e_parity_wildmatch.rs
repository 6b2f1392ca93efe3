//! `--include`/`--exclude` against rsync's wildmatch, rsync itself the oracle: a property
//! test builds a small random tree and a random list of rules from a grammar of rsync's
//! pattern syntax (anchored `/`, trailing `/`, `*`, `**`, `***`, `?`, `[...]` classes with
//! ranges, negation and `[:name:]`, `\` escapes, malformed classes, names with and without
//! slashes), runs `rsync -a RULES SRC DST/` and `haul copy RULES SRC DST/`, and compares
//! exit codes and the set of paths that arrived (with their types). SRC is the tree's
//! contents (`src/`) or the tree under its name (`src`: rules see `src/…`).
//!
//! Each case spawns both programs: the case count stays modest so that CI stays fast; a
//! failure is shrunk by proptest to a small tree and rule list.
//!
//! A case prints `SKIPPED` when rsync is not installed; under CI that is a failure.

mod support;

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::fs;
use std::path::Path;
use std::process::Command;

use proptest::prelude::*;
use support::*;

/// Names in the trees (and, as literals, in patterns): cases, digits, a dot, a star and
/// a bracket for escapes and classes to pick at, and the source's own name.
const NAMES: &[&str] = &[
    "a", "b", "ab", "bar", "foo", "Foo", "x.c", "x1", "a*", "b]", "-", "src",
];

/// Pattern pieces: literals, wildcards, classes (well-formed and not), escapes.
const ATOMS: &[&str] = &[
    "a",
    "b",
    "bar",
    "foo",
    "x",
    ".c",
    "src",
    "*",
    "**",
    "***",
    "?",
    "[ab]",
    "[!a]",
    "[^b]",
    "[a-c]",
    "[]b]",
    "[!]]",
    "[-x]",
    "[a-]",
    "[[:upper:]]",
    "[[:digit:]]",
    "[[:alpha:][:punct:]]",
    "[[:nope:]]",
    "[[:a]",
    "[a",
    "\\*",
    "\\a",
    "a\\",
    "*.c",
    "*o*",
];

/// A tree: paths of one to three names; the last one a directory or a file. A name used
/// both ways is a directory.
fn tree() -> impl Strategy<Value = Vec<(Vec<usize>, bool)>> {
    prop::collection::vec(
        (prop::collection::vec(0..NAMES.len(), 1..=3), any::<bool>()),
        1..14,
    )
}

/// One rule: include or exclude, an optional anchor, one to three components of one to
/// three atoms, an optional trailing `/`.
fn rule() -> impl Strategy<Value = (bool, String)> {
    let component = prop::collection::vec(0..ATOMS.len(), 1..=3)
        .prop_map(|atoms| atoms.iter().map(|&a| ATOMS[a]).collect::<String>());
    (
        any::<bool>(),
        any::<bool>(),
        prop::collection::vec(component, 1..=3),
        any::<bool>(),
    )
        .prop_map(|(include, anchored, parts, trailing)| {
            let mut p = String::new();
            if anchored {
                p.push('/');
            }
            p.push_str(&parts.join("/"));
            if trailing {
                p.push('/');
            }
            (include, p)
        })
}

fn build(root: &Path, tree: &[(Vec<usize>, bool)]) {
    fs::create_dir_all(root).unwrap();
    let path = |names: &[usize]| {
        names
            .iter()
            .fold(root.to_path_buf(), |p, &n| p.join(NAMES[n]))
    };
    let mut dirs = BTreeSet::new();
    for (names, is_dir) in tree {
        let upto = if *is_dir {
            names.len()
        } else {
            names.len() - 1
        };
        for i in 1..=upto {
            dirs.insert(path(&names[..i]));
        }
    }
    for d in &dirs {
        fs::create_dir_all(d).unwrap();
    }
    for (names, is_dir) in tree {
        let p = path(names);
        if !is_dir && !dirs.contains(&p) {
            fs::write(&p, NAMES[*names.last().unwrap()]).unwrap();
        }
    }
}

/// Every path below `dir`, `name/` for a directory.
fn paths(dir: &Path) -> BTreeSet<String> {
    fn walk(base: &Path, dir: &Path, out: &mut BTreeSet<String>) {
        for e in fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            let rel = p.strip_prefix(base).unwrap().display().to_string();
            if fs::symlink_metadata(&p).unwrap().is_dir() {
                out.insert(format!("{rel}/"));
                walk(base, &p, out);
            } else {
                out.insert(rel);
            }
        }
    }
    let mut out = BTreeSet::new();
    if dir.exists() {
        walk(dir, dir, &mut out);
    }
    out
}

fn rule_args(rules: &[(bool, String)]) -> Vec<String> {
    rules
        .iter()
        .flat_map(|(include, p)| {
            let opt = if *include { "--include" } else { "--exclude" };
            [opt.to_string(), p.clone()]
        })
        .collect()
}

/// Runs both and returns (exit code, paths) for rsync and for haul, and haul's output.
type Side = (Option<i32>, BTreeSet<String>);

fn run_both(tmp: &Path, src: &Path, rules: &[String]) -> (Side, Side, String) {
    let (r, h) = (tmp.join("r"), tmp.join("h"));
    let out = Command::new("rsync")
        .arg("-a")
        .args(rules)
        .arg(src)
        .arg(with_slash(&r))
        .output()
        .unwrap();
    let theirs = (out.status.code(), paths(&r));
    let mut all: Vec<&OsStr> = vec![OsStr::new("copy"), OsStr::new("-q")];
    all.extend(rules.iter().map(OsStr::new));
    all.push(src.as_os_str());
    let hs = with_slash(&h);
    all.push(hs.as_os_str());
    let got = Haul::new().run(&all);
    let ours = (got.code(), paths(&h));
    (theirs, ours, got.describe())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 48,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn random_rules_select_what_rsync_selects(
        tree in tree(),
        rules in prop::collection::vec(rule(), 1..=4),
        contents in any::<bool>(),
    ) {
        if !have_rsync() {
            return Ok(());
        }
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("src");
        build(&root, &tree);
        let src = match contents {
            true => with_slash(&root),
            false => root.clone(),
        };
        let args = rule_args(&rules);
        let (theirs, ours, haul_out) = run_both(tmp.path(), &src, &args);
        prop_assert_eq!(
            &ours,
            &theirs,
            "haul (left) and rsync (right) differ for {:?} {}\ntree: {:?}\n{}",
            args,
            src.display(),
            paths(&root),
            haul_out
        );
    }
}

/// The case of issue 39: `**/bar` also matches a top-level `bar`.
#[test]
fn a_leading_double_star_slash_matches_at_the_top() {
    if !have_rsync() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("src");
    for d in ["bar/in", "x/bar", "x/other"] {
        fs::create_dir_all(root.join(d)).unwrap();
    }
    for f in ["bar/f", "bar/in/g", "x/bar/h", "x/other/i", "top"] {
        fs::write(root.join(f), f).unwrap();
    }
    let rules: Vec<String> = [
        "--include",
        "*/",
        "--include",
        "**/bar/**",
        "--exclude",
        "*",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let (theirs, ours, out) = run_both(tmp.path(), &with_slash(&root), &rules);
    assert_eq!(ours, theirs, "haul (left) and rsync (right) differ\n{out}");
    let (r, h) = (tmp.path().join("r"), tmp.path().join("h"));
    for d in [&r, &h] {
        fs::remove_dir_all(d).unwrap();
    }
    let rules: Vec<String> = ["--exclude", "**/bar"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let (theirs, ours, out) = run_both(tmp.path(), &with_slash(&root), &rules);
    assert_eq!(ours, theirs, "haul (left) and rsync (right) differ\n{out}");
    assert!(!ours.1.contains("bar/"), "{:?}", ours.1);
}
