//! The filter options (`--exclude`, `--include`, their `-from` files, `--files-from`, `-L`,
//! `--copy-unsafe-links`, `-x`) made into the walk's `Selection`. The `-from` files are read
//! here, once, on this host: a pull carries their contents to the far end, as rsync does.

use std::ffi::OsStr;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use crate::cli::{FilterArgs, RuleArg};
use crate::error::{Error, Result};
use crate::plan::select::{FileList, Links, Selection};
use crate::protocol::{FilterRule, MAX_PATTERN, MAX_RULES};

/// The selection `a` asks for. `delete`: `--delete` is on, which `--files-from` refuses
/// (rsync would delete in the listed directories' parents what was not listed).
pub(super) fn selection(a: &FilterArgs, delete: bool) -> Result<Selection> {
    let sep = if a.from0 { 0 } else { b'\n' };
    let mut rules = Vec::new();
    for r in &a.order {
        match r {
            RuleArg::Exclude(p) => rules.extend(rule(p.as_bytes(), false)?),
            RuleArg::Include(p) => rules.extend(rule(p.as_bytes(), true)?),
            RuleArg::ExcludeFrom(f) | RuleArg::IncludeFrom(f) => {
                let include = matches!(r, RuleArg::IncludeFrom(_));
                let text = read_list(f)?;
                for line in text.split(|&b| b == sep) {
                    let line = line.strip_suffix(b"\r").unwrap_or(line);
                    if line.starts_with(b"#") || line.starts_with(b";") {
                        continue;
                    }
                    rules.extend(rule(line, include)?);
                }
            }
        }
    }
    if rules.len() > MAX_RULES {
        return Err(Error::Usage(format!(
            "more than {MAX_RULES} include/exclude rules"
        )));
    }
    let files_from = match &a.files_from {
        Some(f) if delete => {
            return Err(Error::Usage(format!(
                "--delete with --files-from {} is not supported: it could remove what the \
                 list leaves out",
                f.display()
            )))
        }
        Some(f) => Some(FileList::parse(&read_list(f)?, a.from0, a.recursive)),
        None => None,
    };
    Ok(Selection {
        filter: rules.into(),
        files_from,
        links: match (a.copy_links, a.copy_unsafe_links) {
            (true, _) => Links::CopyAll,
            (false, true) => Links::CopyUnsafe,
            (false, false) => Links::Keep,
        },
        one_file_system: a.one_file_system,
        quiet: false,
        shard: None,
        no_xattrs: a.no_xattrs,
        // Set by `transfer` (an option of --delete's, not of the walk).
        delete_excluded: false,
    })
}

/// One pattern as a rule (`None`: blank), refusing what rsync means differently.
fn rule(pattern: &[u8], include: bool) -> Result<Option<FilterRule>> {
    if pattern == b"!" {
        return Err(Error::Usage(
            "the `!` rule (clear the list) is not supported; leave out the rules instead".into(),
        ));
    }
    if pattern.len() > MAX_PATTERN {
        return Err(Error::Usage(format!(
            "a pattern longer than {MAX_PATTERN} bytes"
        )));
    }
    Ok(FilterRule::parse(pattern, include))
}

/// The contents of a list file; `-` is standard input.
fn read_list(f: &Path) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    let r = if f.as_os_str() == OsStr::new("-") {
        std::io::stdin().lock().read_to_end(&mut out).map(|_| ())
    } else {
        std::fs::File::open(f).and_then(|mut h| h.read_to_end(&mut out).map(|_| ()))
    };
    r.map_err(|e| Error::Usage(format!("cannot read {}: {e}", f.display())))?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use crate::config::{Command, Config};

    fn select(args: &[&str]) -> crate::error::Result<crate::plan::select::Selection> {
        let mut all = vec!["haul", "copy"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["/src", "/dst"]);
        let c = Config::from_cli(crate::cli::parse_from(all).unwrap())?;
        match c.command {
            Command::Copy { transfer, .. } => Ok(transfer.select),
            _ => panic!(),
        }
    }

    #[test]
    fn rules_keep_command_line_order_across_options() {
        let dir = tempfile::tempdir().unwrap();
        let list = dir.path().join("ex");
        std::fs::write(&list, "# comment\n*.tmp\n+ keep.tmp\n").unwrap();
        let s = select(&[
            "--include",
            "*/",
            "--exclude-from",
            list.to_str().unwrap(),
            "--exclude=*.log",
        ])
        .unwrap();
        // keep.tmp comes after *.tmp in the file: *.tmp wins.
        assert!(s.filter.excluded(b"a/keep.tmp", false));
        assert!(s.filter.excluded(b"a/x.log", false));
        assert!(!s.filter.excluded(b"a", true));
        let s = select(&["--include", "keep.tmp", "--exclude", "*.tmp"]).unwrap();
        assert!(!s.filter.excluded(b"keep.tmp", false));
        let s = select(&["--exclude", "*.tmp", "--include", "keep.tmp"]).unwrap();
        assert!(s.filter.excluded(b"keep.tmp", false));
    }

    #[test]
    fn refusals() {
        let dir = tempfile::tempdir().unwrap();
        let list = dir.path().join("l");
        std::fs::write(&list, "a\n").unwrap();
        for args in [
            vec!["--exclude", "!"],
            vec!["--exclude-from", "/nonexistent/list"],
            vec!["--delete", "--files-from", list.to_str().unwrap()],
        ] {
            let e = select(&args).unwrap_err();
            assert_eq!(e.exit_code(), crate::error::exit::USAGE, "{args:?}");
        }
        assert!(
            select(&["-L", "--copy-unsafe-links", "-x"])
                .unwrap()
                .one_file_system
        );
    }
}
