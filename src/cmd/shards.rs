//! `haul plan`: walks the sources once, as `copy` would, splits what it found into N
//! balanced shards (`plan::balance`) and writes one shard file each (`plan::shard`);
//! `haul plan --check DIR DST`: confirms that every shard of a plan arrived.
//!
//! Not here: moving a shard (`copy --shard`/`send --shard` are ordinary transfers whose
//! walk takes only the shard's entries: `plan::select`).

use std::collections::HashSet;
use std::ffi::OsStr;
use std::io::BufWriter;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use rustix::fs::{Mode, OFlags};

use crate::config::{read_shard_file, Config, PlanJob};
use crate::error::{Error, Result};
use crate::plan::balance::{Found, Plan};
use crate::plan::layout::dest_layout;
use crate::plan::select::Selection;
use crate::plan::shard::{Header, Kind, Record, ShardFile, Writer};
use crate::plan::walk::{self, root_rel, Source};
use crate::progress::{escape, escape_bytes, human, json_string, warn};
use crate::protocol::{EntryKind, SafeRelPath};

/// Runs `haul plan`.
pub fn run(job: &PlanJob, cfg: &Config) -> Result<()> {
    match job {
        PlanJob::Make {
            sources,
            shards,
            out,
            select,
        } => make(sources, *shards, out, select, cfg),
        PlanJob::Check { dir, dest } => check(dir, dest, cfg),
    }
}

/// The file name of shard `i`.
fn shard_name(i: u32) -> String {
    format!("shard-{i}")
}

fn make(
    sources: &[PathBuf],
    shards: u32,
    out: &Path,
    select: &Selection,
    cfg: &Config,
) -> Result<()> {
    let started = Instant::now();
    let cwd = std::env::current_dir().map_err(|e| Error::io("finding the current directory", e))?;
    // Absolute, but as given otherwise: `dir/` keeps its slash, so it keeps its meaning
    // for a task started in another directory.
    let abs: Vec<Vec<u8>> = sources
        .iter()
        .map(|s| match s.is_absolute() {
            true => s.as_os_str().as_bytes().to_vec(),
            false => [cwd.as_os_str().as_bytes(), b"/", s.as_os_str().as_bytes()].concat(),
        })
        .collect();
    let srcs: Vec<Source> = abs
        .iter()
        .map(|p| Source::from_arg(Path::new(OsStr::from_bytes(p))))
        .collect();
    walk::check_sources(&srcs)?;
    let dir = open_out(out)?;
    // The plan lists entries; their extended attributes travel with the tasks.
    let select = Selection {
        quiet: cfg.quiet,
        no_xattrs: true,
        ..select.clone()
    };
    let mut plan = Plan::default();
    let (mut failed, mut first) = (0u64, String::new());
    walk::walk_from(
        &srcs,
        &select,
        |origin, w| {
            let e = &w.entry;
            let (kind, size, data, link) = match &e.kind {
                EntryKind::Dir => (Kind::Dir, 0, 0, None),
                EntryKind::File { size, data_bytes } => (Kind::File, *size, *data_bytes, None),
                EntryKind::Hardlink { target } => (Kind::Hardlink, 0, 0, Some(target.clone())),
                EntryKind::Symlink { .. } => (Kind::Symlink, 0, 0, None),
                EntryKind::Fifo => (Kind::Fifo, 0, 0, None),
                EntryKind::Device { block: true, .. } => (Kind::Block, 0, 0, None),
                EntryKind::Device { block: false, .. } => (Kind::Char, 0, 0, None),
            };
            plan.push(Found {
                source: origin.source as u32,
                rel: &e.path,
                base: origin.base,
                kind,
                size,
                data,
                link_to: link,
            });
            true
        },
        |sk| {
            failed += 1;
            let line = format!("{}: {}", escape(&sk.path.display().to_string()), sk.error);
            if !cfg.quiet {
                warn(&format!("cannot read {line}; left out of the plan"));
            }
            if first.is_empty() {
                first = line;
            }
        },
    )?;
    let memory = plan.memory();
    let totals = plan.assign(shards);
    let (entries, bytes) = totals.iter().fold((0, 0), |(e, b), t| (e + t.0, b + t.1));
    let id = plan_id()?;
    for s in 0..shards {
        let header = Header {
            plan: id.clone(),
            index: s,
            count: shards,
            links: select.links,
            total_entries: entries,
            total_bytes: bytes,
            sources: abs.clone(),
            entries: totals[s as usize].0,
            bytes: totals[s as usize].1,
        };
        write_shard(&dir, out, s, &header, &plan)?;
    }
    rustix::fs::fsync(&dir).map_err(|e| Error::destination(out, e.into()))?;
    let files = (0..shards)
        .flat_map(|s| plan.shard(s))
        .filter(|e| e.kind == Kind::File)
        .count();
    let peak = peak_memory();
    let secs = started.elapsed().as_secs_f64();
    if cfg.json {
        let j = format!(
            "{{\"plan\":{},\"shards\":{shards},\"entries\":{entries},\"files\":{files},\
             \"bytes\":{bytes},\"seconds\":{secs:.3},\"plan_memory_bytes\":{memory},\
             \"peak_rss_bytes\":{peak}}}",
            json_string(&id)
        );
        super::json_out::hold(j, false);
    }
    if !cfg.quiet {
        eprintln!(
            "planned {shards} shards in {}: {entries} entries, {files} files, {} in {secs:.1} s, \
             peak memory {}",
            escape(&out.display().to_string()),
            human(bytes),
            human(peak)
        );
    }
    match failed {
        0 => Ok(()),
        count => Err(Error::Partial { count, first }),
    }
}

/// Opens (creating it if missing) the directory the shards go into, refusing one that
/// already holds shard files: two plans' shards must never mix.
fn open_out(out: &Path) -> Result<OwnedFd> {
    std::fs::create_dir_all(out).map_err(|e| Error::destination(out, e))?;
    let dir = rustix::fs::open(
        out,
        OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| Error::destination(out, e.into()))?;
    let listing = std::fs::read_dir(out).map_err(|e| Error::destination(out, e))?;
    for name in listing.flatten().map(|d| d.file_name()) {
        let n = name.as_bytes();
        if n.strip_prefix(b"shard-")
            .is_some_and(|d| !d.is_empty() && d.iter().all(u8::is_ascii_digit))
        {
            return Err(Error::Usage(format!(
                "{} already holds a plan ({}); write the new one into an empty directory",
                escape(&out.display().to_string()),
                escape_bytes(n)
            )));
        }
    }
    Ok(dir)
}

/// Writes shard `s` as a temporary file in `dir`, fsyncs it and renames it into place,
/// so a shard file is whole or absent.
fn write_shard(dir: &OwnedFd, out: &Path, s: u32, header: &Header, plan: &Plan) -> Result<()> {
    let name = shard_name(s);
    let tmp = format!(".{name}.{}.tmp", header.plan);
    let err = |e: std::io::Error| Error::destination(out.join(&name), e);
    let fd = rustix::fs::openat(
        dir,
        tmp.as_str(),
        OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o644),
    )
    .map_err(|e| err(e.into()))?;
    let mut w = Writer::new(
        BufWriter::with_capacity(1 << 20, std::fs::File::from(fd)),
        header,
    );
    for e in plan.shard(s) {
        let path = SafeRelPath::parse(e.path).map_err(|x| {
            Error::io(
                "planning",
                std::io::Error::other(format!("walked path: {x}")),
            )
        })?;
        w.record(&Record {
            kind: e.kind,
            size: e.size,
            source: e.source,
            path,
        });
    }
    let file = w
        .finish()
        .and_then(|b| b.into_inner().map_err(|e| e.into_error()))
        .map_err(err)?;
    file.sync_all().map_err(err)?;
    rustix::fs::renameat(dir, tmp.as_str(), dir, name.as_str()).map_err(|e| err(e.into()))
}

/// A fresh random plan id: 128 bits, hex.
fn plan_id() -> Result<String> {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b)
        .map_err(|e| Error::io("getting random bytes", std::io::Error::other(e.to_string())))?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

/// This process's peak resident memory (VmHWM), in bytes; 0 if unknown.
fn peak_memory() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kib| kib * 1024)
}

/// Most problems named in the error line.
const NAMED: usize = 5;

/// `plan --check DIR DST`.
fn check(dir: &Path, dest: &Path, cfg: &Config) -> Result<()> {
    let first = read_shard_file(&dir.join(shard_name(0)))?;
    let count = first.header.count;
    let mut shards = vec![first];
    for i in 1..count {
        let f = read_shard_file(&dir.join(shard_name(i)))?;
        let h = &f.header;
        let first = &shards[0].header;
        if let Some(what) = h.mismatch(first, i) {
            return Err(Error::Usage(format!(
                "{} (shard {} of {} of plan {}) differs from shard-0 in its {what}, \
                 expected shard {i} of {count} of plan {}: shard files of two plans are \
                 mixed, or one was edited",
                escape(&dir.join(shard_name(i)).display().to_string()),
                h.index,
                h.count,
                h.plan,
                first.plan
            )));
        }
        shards.push(f);
    }
    let head = shards[0].header.clone();
    let mut problems = Problems::default();
    let (entries, bytes) = shards.iter().fold((0u64, 0u64), |(e, b), f| {
        (e + f.records.len() as u64, b + f.header.bytes)
    });
    if (entries, bytes) != (head.total_entries, head.total_bytes) {
        problems.add(format!(
            "the shards hold {entries} entries ({bytes} bytes), the plan {} ({} bytes)",
            head.total_entries, head.total_bytes
        ));
    }
    let roots = layout(&head, &shards, dest);
    let mut seen: HashSet<[u8; 16]> = HashSet::new();
    for f in &shards {
        let i = f.header.index;
        for r in &f.records {
            let mut key = blake3::Hasher::new();
            key.update(&r.source.to_le_bytes())
                .update(r.path.as_bytes());
            let mut k = [0u8; 16];
            k.copy_from_slice(&key.finalize().as_bytes()[..16]);
            let shown = || show(&roots, r);
            if !seen.insert(k) {
                problems.add(format!("shard {i}: {} is listed twice", shown()));
                continue;
            }
            if let Some(what) = differs(&roots, r) {
                problems.add(format!("shard {i}: {} ({what})", shown()));
            }
        }
    }
    if problems.count > 0 {
        return Err(Error::Incomplete {
            count: problems.count,
            first: problems.named.join("; "),
        });
    }
    if cfg.json {
        let j = format!(
            "{{\"plan\":{},\"shards\":{count},\"entries\":{entries},\"bytes\":{bytes},\"missing\":0}}",
            json_string(&head.plan)
        );
        super::json_out::hold(j, false);
    }
    if !cfg.quiet {
        eprintln!(
            "plan {}: all {count} shards arrived in {}: {entries} entries, {}",
            head.plan,
            escape(&dest.display().to_string()),
            human(bytes)
        );
    }
    Ok(())
}

#[derive(Default)]
struct Problems {
    count: u64,
    named: Vec<String>,
}

impl Problems {
    fn add(&mut self, what: String) {
        self.count += 1;
        if self.named.len() < NAMED {
            self.named.push(what);
        } else if self.named.len() == NAMED {
            self.named.push("…".into());
        }
    }
}

/// Where each source's entries are at `dest`, by `copy`'s rules (the rename rule for a
/// single non-directory source included), judged from the plan, not from the sources,
/// which need not exist where the check runs.
fn layout(head: &Header, shards: &[ShardFile], dest: &Path) -> Vec<PathBuf> {
    let root_kind = |s: usize| {
        shards
            .iter()
            .flat_map(|f| &f.records)
            .find(|r| r.source as usize == s && r.path.is_root())
            .map(|r| r.kind)
    };
    let single_file = head.sources.len() == 1 && root_kind(0).is_some_and(|k| k != Kind::Dir);
    let (root, rename) = dest_layout(single_file, dest);
    head.sources
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let mut src = Source::from_arg(Path::new(OsStr::from_bytes(s)));
            if let Some(name) = &rename {
                src.dest_name = Some(name.clone());
            }
            let is_dir = root_kind(i).is_none_or(|k| k == Kind::Dir);
            root.join(OsStr::from_bytes(&root_rel(&src, is_dir)))
        })
        .collect()
}

/// The record's path at the destination, escaped.
fn show(roots: &[PathBuf], r: &Record) -> String {
    match at(roots, r) {
        Some(p) => escape(&p.display().to_string()),
        None => format!("source {} (not in the plan)", r.source),
    }
}

/// Where the record is at the destination; `None` for a source the plan does not have
/// (the headers were checked to agree, so only a bug gets here).
fn at(roots: &[PathBuf], r: &Record) -> Option<PathBuf> {
    let root = roots.get(r.source as usize)?;
    Some(match r.path.is_root() {
        true => root.clone(),
        false => root.join(r.path.as_path()),
    })
}

/// How the destination's entry differs from the record (`None`: it matches).
fn differs(roots: &[PathBuf], r: &Record) -> Option<String> {
    let Some(path) = at(roots, r) else {
        return Some("its source is not in the plan".into());
    };
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Some("missing".into()),
        Err(e) => return Some(e.to_string()),
    };
    let ft = meta.file_type();
    let (found, name) = match () {
        _ if ft.is_dir() => (Kind::Dir, "a directory"),
        _ if ft.is_file() => (Kind::File, "a file"),
        _ if ft.is_symlink() => (Kind::Symlink, "a symlink"),
        _ if ft.is_fifo() => (Kind::Fifo, "a FIFO"),
        _ if ft.is_char_device() => (Kind::Char, "a character device"),
        _ if ft.is_block_device() => (Kind::Block, "a block device"),
        _ => return Some("a socket".into()),
    };
    let planned = match r.kind {
        Kind::Hardlink => Kind::File,
        k => k,
    };
    if found != planned {
        return Some(format!("{name}, planned {}", r.kind.letter()));
    }
    if r.kind == Kind::File && meta.len() != r.size {
        return Some(format!("size {}, planned {}", meta.len(), r.size));
    }
    None
}
