//! Shards of a plan: `haul plan`'s configuration, and `--shard FILE` for `copy` and
//! `send`, whose file is read here, once (as the `-from` files are), so the sources come
//! from it and the walk gets its list.
//!
//! Not here: writing or checking shard files (`cmd`), the format (`plan::shard`).

use std::ffi::OsStr;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::cli::{Cli, CommandArgs, FilterArgs, PlanArgs};
use crate::error::{Error, Result};
use crate::plan::select::{Links, Selection, ShardList};
use crate::plan::shard::{self, MAX_SHARDS};

use super::location::{parse_location, Location};

/// What `haul plan` does.
#[derive(Debug, Clone)]
pub enum PlanJob {
    /// Walk `sources` and write `shards` shard files into `out`.
    Make {
        /// The sources, as given (made absolute when the plan is written).
        sources: Vec<PathBuf>,
        /// How many shards.
        shards: u32,
        /// Where the shard files go.
        out: PathBuf,
        /// What the walk takes (filters, -L, -x), as `copy` would.
        select: Selection,
    },
    /// Confirm that the plan in `dir` arrived in `dest`.
    Check {
        /// The directory holding shard-0 … shard-N-1.
        dir: PathBuf,
        /// The destination the shards were copied to.
        dest: PathBuf,
    },
}

/// A `--shard FILE` read: what the walk takes, and how it treats symlinks.
#[derive(Debug)]
pub(super) struct Shard {
    /// What the walk takes.
    pub list: ShardList,
    /// Which symlinks the plan followed.
    pub links: Links,
}

/// With `--shard FILE` on `copy` or `send`: reads it, puts the plan's sources before
/// `copy`'s DST (or as `send`'s paths) and returns the shard for [`attach`].
pub(super) fn take(mut cli: Cli) -> Result<(Cli, Option<Shard>)> {
    let (paths, transfer, is_copy) = match &mut cli.command {
        CommandArgs::Copy {
            paths,
            transfer,
            from_command,
            to_command,
            ..
        } => {
            if transfer.filter.shard.is_some() && (from_command.is_some() || to_command.is_some()) {
                return Err(Error::Usage("--shard moves files, not a stream".into()));
            }
            (paths, transfer, true)
        }
        CommandArgs::Send {
            paths,
            transfer,
            from_command,
            ..
        } => {
            if transfer.filter.shard.is_some() && from_command.is_some() {
                return Err(Error::Usage("--shard moves files, not a stream".into()));
            }
            (paths, transfer, false)
        }
        _ => return Ok((cli, None)),
    };
    let Some(file) = transfer.filter.shard.clone() else {
        return Ok((cli, None));
    };
    if transfer.sync.delete || transfer.sync.delete_excluded {
        return Err(Error::Usage(
            "--delete with --shard is refused: each shard holds part of the tree, so it \
             would delete what the other shards bring"
                .into(),
        ));
    }
    if has_selection(&transfer.filter) {
        return Err(Error::Usage(
            "--shard takes no filters, --files-from, -x, -L or --copy-unsafe-links: the \
             plan chose the entries (give those options to `haul plan`)"
                .into(),
        ));
    }
    match (is_copy, paths.len()) {
        (true, 1) | (false, 0) => {}
        (true, _) => return Err(Error::Usage("copy --shard FILE takes only DST".into())),
        (false, _) => return Err(Error::Usage("send --shard FILE takes no PATH".into())),
    }
    let parsed = read_shard_file(&file)?;
    let sources = parsed
        .header
        .sources
        .iter()
        .map(|s| PathBuf::from(OsStr::from_bytes(s)));
    paths.splice(0..0, sources);
    let shard = Shard {
        list: parsed.list(),
        links: parsed.header.links,
    };
    Ok((cli, Some(shard)))
}

/// Validates `haul plan`.
pub(super) fn plan_job(p: PlanArgs) -> Result<PlanJob> {
    if p.filter.shard.is_some() {
        return Err(Error::Usage("plan takes no --shard".into()));
    }
    if p.check {
        if has_selection(&p.filter) {
            return Err(Error::Usage(
                "plan --check takes no filters: the plan holds what was chosen".into(),
            ));
        }
        let [dir, dest] = <[PathBuf; 2]>::try_from(p.paths)
            .map_err(|_| Error::Usage("plan --check takes DIR DST".into()))?;
        for p in [&dir, &dest] {
            if let Ok(Location::Remote(r)) = parse_location(p.as_os_str()) {
                return Err(Error::Usage(format!(
                    "plan --check looks at this host only; {} is on {}: run `haul plan \
                     --check DIR {}` there, with the plan's DIR copied over (or write \
                     ./{0} for a local name with a colon)",
                    p.display(),
                    r.host,
                    String::from_utf8_lossy(&r.path)
                )));
            }
        }
        return Ok(PlanJob::Check { dir, dest });
    }
    if p.filter.files_from.is_some() {
        return Err(Error::Usage(
            "plan takes no --files-from: give the sources, and filters if needed".into(),
        ));
    }
    let shards = p.shards.unwrap_or(0);
    if !(1..=MAX_SHARDS).contains(&shards) {
        return Err(Error::Usage(format!(
            "--shards must be between 1 and {MAX_SHARDS}"
        )));
    }
    for s in &p.paths {
        if let Ok(Location::Remote(_)) = parse_location(s.as_os_str()) {
            return Err(Error::Usage(format!(
                "plan walks sources on this host; {} looks like host:path (write ./{0} for \
                 a local name with a colon)",
                crate::progress::escape(&s.display().to_string())
            )));
        }
    }
    Ok(PlanJob::Make {
        sources: p.paths,
        shards,
        out: p
            .out
            .ok_or_else(|| Error::Usage("plan needs --out DIR".into()))?,
        select: super::select::selection(&p.filter, false)?,
    })
}

/// Whether any option that chooses what the walk takes was given.
fn has_selection(f: &FilterArgs) -> bool {
    !f.order.is_empty()
        || !f.exclude.is_empty()
        || !f.include.is_empty()
        || f.files_from.is_some()
        || f.one_file_system
        || f.copy_links
        || f.copy_unsafe_links
}

/// Reads and decodes a shard file (at most [`shard::MAX_FILE`] bytes).
pub fn read_shard_file(file: &Path) -> Result<shard::ShardFile> {
    let shown = || crate::progress::escape(&file.display().to_string());
    let mut bytes = Vec::new();
    std::fs::File::open(file)
        .and_then(|f| f.take(shard::MAX_FILE + 1).read_to_end(&mut bytes))
        .map_err(|e| Error::Usage(format!("cannot read shard file {}: {e}", shown())))?;
    if bytes.len() as u64 > shard::MAX_FILE {
        return Err(Error::Usage(format!(
            "shard file {} is larger than a plan can make",
            shown()
        )));
    }
    shard::decode(&bytes).map_err(|e| Error::Usage(format!("shard file {}: {e}", shown())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Command, Config};

    fn cfg(args: &[&str]) -> Result<Config> {
        let mut all = vec!["haul"];
        all.extend_from_slice(args);
        Config::from_cli(crate::cli::parse_from(all).unwrap())
    }

    #[test]
    fn plan_options_are_checked() {
        let c = cfg(&["plan", "/a", "b/", "--shards", "8", "--out", "/s", "-x"]).unwrap();
        let Command::Plan(PlanJob::Make {
            sources,
            shards,
            select,
            ..
        }) = c.command
        else {
            panic!()
        };
        assert_eq!(
            (sources.len(), shards, select.one_file_system),
            (2, 8, true)
        );
        let c = cfg(&["plan", "--check", "/s", "/d"]).unwrap();
        assert!(matches!(c.command, Command::Plan(PlanJob::Check { .. })));
        for bad in [
            &["plan", "/a", "--shards", "0", "--out", "/s"][..],
            &["plan", "h:/a", "--shards", "2", "--out", "/s"],
            &["plan", "--check", "/s"],
            &["plan", "--check", "/s", "db1:shd"],
            &["plan", "--check", "db1:/s", "/d"],
            &["plan", "--check", "/s", "/d", "--exclude", "x"],
            &[
                "plan",
                "/a",
                "--shards",
                "2",
                "--out",
                "/s",
                "--files-from",
                "/l",
            ],
        ] {
            let e = cfg(bad).unwrap_err();
            assert_eq!(e.exit_code(), crate::error::exit::USAGE, "{bad:?}: {e}");
        }
    }

    #[test]
    fn shard_options_are_checked() {
        let d = tempfile::tempdir().unwrap();
        let h = shard::Header {
            plan: "0123456789abcdef0123456789abcdef".into(),
            index: 0,
            count: 1,
            links: Links::CopyAll,
            total_entries: 0,
            total_bytes: 0,
            sources: vec![b"/x/src".to_vec()],
            entries: 0,
            bytes: 0,
        };
        let f = d.path().join("shard-0");
        std::fs::write(&f, shard::encode(&h, &[])).unwrap();
        let f = f.to_str().unwrap();
        let c = cfg(&["copy", "--shard", f, "/dst"]).unwrap();
        let Command::Copy {
            sources, transfer, ..
        } = c.command
        else {
            panic!()
        };
        assert_eq!(sources, [PathBuf::from("/x/src")]);
        assert!(transfer.select.shard.is_some());
        assert_eq!(transfer.select.links, Links::CopyAll);
        let c = cfg(&["send", "--shard", f, "--to", "-"]).unwrap();
        assert!(matches!(c.command, Command::Send { .. }));
        let c = cfg(&["copy", "--shard", f, "h:/dst"]).unwrap();
        assert!(matches!(c.command, Command::Remote { .. }));
        for bad in [
            &["copy", "--shard", f, "/dst", "--delete"][..],
            &["copy", "--shard", f, "/a", "/dst"],
            &["copy", "--shard", f, "/dst", "--exclude", "x"],
            &["copy", "--shard", f, "-"],
            &["copy", "--shard", "/nonexistent/shard-0", "/dst"],
        ] {
            let e = cfg(bad).unwrap_err();
            assert_eq!(e.exit_code(), crate::error::exit::USAGE, "{bad:?}: {e}");
        }
    }
}
