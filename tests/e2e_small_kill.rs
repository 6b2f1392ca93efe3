//! Small files under SIGKILL: a local copy of many small files (anonymous files made
//! durable in batches, then named) killed at random points leaves nothing under a final
//! name that is not complete, and a re-run completes the copy.

mod support;

use std::fs;
use std::path::Path;
use std::thread;
use std::time::Duration;

use support::*;

/// Directories and files per directory of the source.
const DIRS: usize = 8;
const FILES: usize = 300;

/// `DIRS` × `FILES` files of 1 byte to 64 KiB, random bytes, fixed seeds.
fn small_tree(root: &Path) {
    let mut rng = Rng::new(14);
    for d in 0..DIRS {
        let dir = root.join(format!("d{d}"));
        fs::create_dir_all(&dir).unwrap();
        for f in 0..FILES {
            let mut data = vec![0u8; 1 + (rng.next_u64() % (64 << 10)) as usize];
            rng.fill(&mut data);
            fs::write(dir.join(format!("f{f}")), data).unwrap();
        }
    }
}

/// Every regular file under `dst` is whole: it has its source's exact bytes. Anything
/// else there is a directory of the source (no partial or temporary names).
fn whole_or_absent(src: &Path, dst: &Path) -> usize {
    let mut whole = 0;
    let Ok(dirs) = fs::read_dir(dst) else {
        return 0;
    };
    for d in dirs {
        let d = d.unwrap();
        assert!(
            d.file_type().unwrap().is_dir(),
            "{:?} is not a directory",
            d.path()
        );
        for f in fs::read_dir(d.path()).unwrap() {
            let f = f.unwrap();
            let rel = f.path().strip_prefix(dst).unwrap().to_path_buf();
            let want = fs::read(src.join(&rel))
                .unwrap_or_else(|e| panic!("{rel:?} is not a source file ({e})"));
            assert_eq!(fs::read(f.path()).unwrap(), want, "{rel:?} is incomplete");
            whole += 1;
        }
    }
    whole
}

#[test]
fn small_files_killed_at_random_points_are_whole_or_absent() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    small_tree(&src);
    let dst = tmp.path().join("dst");
    let mut rng = Rng::new(99);
    let mut seen = Vec::new();
    for _ in 0..6 {
        let mut cmd = Haul::new().command("copy");
        cmd.arg(with_slash(&src)).arg(&dst);
        let run = Running::spawn("copy", cmd);
        thread::sleep(Duration::from_millis(rng.next_u64() % 600));
        let out = run.kill();
        seen.push(whole_or_absent(&src, &dst));
        // Killed (or done before the kill): nothing else is a valid outcome.
        assert!(
            out.code().is_none() || out.code() == Some(0),
            "{}",
            out.describe()
        );
    }
    println!("whole files after each kill: {seen:?}");
    copy(&[&with_slash(&src)], &dst, &[]).assert_code(0);
    assert_eq!(whole_or_absent(&src, &dst), DIRS * FILES);
    assert_trees_equal(&src, &dst);
    assert_no_part_files(&dst);
}
