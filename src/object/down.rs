//! A download: read the manifest, make the directories, fetch each file whose local copy
//! does not already have its size and BLAKE3 (N at once, a large one by parallel range
//! reads) into a new file beside its name, check it, give it its metadata and only then
//! its name; then links, then the directories' metadata, deepest first.

use std::ffi::OsStr;
use std::fs::File;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use opendal::Operator;
use rustix::fs::{self as rfs, AtFlags, FileType, Mode, OFlags, Timespec, Timestamps};
use rustix::io::Errno;
use tokio::task::JoinSet;

use super::bucket::{object_error, Bucket, Side};
use super::common::{bad_manifest, manifest_key, Report, PART};
use super::manifest::{Entry, Kind, Manifest, MANIFEST_NAME, MAX_MANIFEST};
use super::walk::join;
use crate::config::ObjectUrl;
use crate::error::{exit, Error, Result};

/// Bytes asked for in one go of a large object (split into `PART` range reads in flight).
const WINDOW: u64 = 64 << 20;
/// Blocks of this size that are all zero are left as holes.
const HOLE: usize = 64 << 10;

/// Downloads `source` to `dest` (see README, *Object stores*, for the naming rules).
pub fn download(
    source: &ObjectUrl,
    dest: &Path,
    bucket: &Bucket,
    streams: usize,
) -> Result<Report> {
    let dest_is_dir = dest.as_os_str().as_bytes().ends_with(b"/") || dest.is_dir();
    let (prefix, sel, bytes) = locate(bucket, &source.key)?;
    let name = source
        .key
        .trim_end_matches('/')
        .rsplit('/')
        .next()
        .unwrap_or_default();
    let (base, top) = match (source.is_prefix(), dest_is_dir, dest.file_name()) {
        // `s3://b/p/`: the contents of p into DEST.
        (true, _, _) => (dest.to_path_buf(), Vec::new()),
        // `s3://b/p/x` to a new name.
        (false, false, Some(n)) => (
            dest.parent()
                .filter(|p| !p.as_os_str().is_empty())
                .unwrap_or(Path::new("."))
                .to_path_buf(),
            n.as_bytes().to_vec(),
        ),
        // Into DEST, under its own name.
        _ => (dest.to_path_buf(), name.as_bytes().to_vec()),
    };
    let mkey = manifest_key(&prefix);
    let m = Manifest::decode(&bytes).map_err(|e| bad_manifest(bucket, &mkey, e))?;
    let mut chosen: Vec<(Vec<u8>, &Entry)> = Vec::new();
    for e in &m.entries {
        let rest = match e.path.strip_prefix(&sel[..]) {
            Some(r) if sel.is_empty() => r,
            Some(r) if r.is_empty() || r.starts_with(b"/") => r.strip_prefix(b"/").unwrap_or(r),
            _ => continue,
        };
        chosen.push((join(&top, rest), e));
    }
    if chosen.is_empty() {
        return Err(Error::Object {
            message: format!("{source}: not found in {}/{mkey}", bucket.name()),
            code: exit::SOURCE,
        });
    }
    std::fs::create_dir_all(&base).map_err(|e| Error::destination(&base, e))?;
    let root = rfs::open(
        &base,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| Error::destination(&base, e.into()))?;
    let root = Arc::new(root);
    let owners = rustix::process::geteuid().is_root();
    let mut report = Report {
        entries: chosen.len() as u64,
        ..Report::default()
    };
    let mut set: JoinSet<Result<Option<u64>>> = JoinSet::new();
    let mut results = Vec::new();
    for (rel, e) in &chosen {
        let de =
            |err: std::io::Error| Error::destination(PathBuf::from(OsStr::from_bytes(rel)), err);
        match &e.kind {
            Kind::Dir if rel.is_empty() => {}
            Kind::Dir => make_dir(&root, rel).map_err(de)?,
            Kind::File { size, blake3, key } => {
                if set.len() >= streams {
                    results.push(bucket.run(set.join_next()));
                }
                let job = Fetch {
                    op: bucket.op().clone(),
                    shown: format!("{}/{prefix}{key}", bucket.name()),
                    key: format!("{prefix}{key}"),
                    root: root.clone(),
                    rel: rel.clone(),
                    entry: (*e).clone(),
                    size: *size,
                    blake3: *blake3,
                    owners,
                    streams,
                };
                bucket.spawn(&mut set, job.run());
            }
            _ => {}
        }
    }
    while let Some(r) = bucket.run(set.join_next()) {
        results.push(Some(r));
    }
    for r in results {
        match r {
            Some(Ok(Ok(Some(n)))) => {
                (report.sent_objects, report.sent_bytes) =
                    (report.sent_objects + 1, report.sent_bytes + n)
            }
            Some(Ok(Ok(None))) => report.unchanged += 1,
            Some(Ok(Err(e))) => return Err(e),
            Some(Err(e)) => {
                return Err(Error::io(
                    "a download task",
                    std::io::Error::other(e.to_string()),
                ))
            }
            None => {}
        }
    }
    for (rel, e) in &chosen {
        let de =
            |err: std::io::Error| Error::destination(PathBuf::from(OsStr::from_bytes(rel)), err);
        match &e.kind {
            Kind::Symlink { target } => make_symlink(&root, rel, target, e, owners).map_err(de)?,
            Kind::Hardlink { to } => {
                // The file's name here: `to` mapped as every chosen path was.
                let Some((to_rel, _)) = chosen.iter().find(|(_, f)| &f.path == to) else {
                    return Err(Error::Object {
                        message: format!("{source}: a hardlink's file is outside what was asked for; download its directory"),
                        code: exit::SOURCE,
                    });
                };
                make_link(&root, to_rel, rel).map_err(de)?
            }
            _ => {}
        }
    }
    for (rel, e) in chosen.iter().rev() {
        if e.kind == Kind::Dir {
            let fd = crate::resolve::open(
                root.as_fd(),
                rel,
                OFlags::RDONLY | OFlags::DIRECTORY,
                Mode::empty(),
            )
            .map_err(|err| Error::destination(PathBuf::from(OsStr::from_bytes(rel)), err.into()))?;
            apply_meta(&fd, e, owners)
                .map_err(|err| Error::destination(PathBuf::from(OsStr::from_bytes(rel)), err))?;
        }
    }
    Ok(report)
}

/// The manifest that holds `key` (a file or directory beneath its prefix, or the prefix
/// itself): the nearest one at or above it. Returns the manifest's prefix, the path of
/// `key` beneath it (`""`: all of it) and the manifest's bytes.
fn locate(bucket: &Bucket, key: &str) -> Result<(String, Vec<u8>, Vec<u8>)> {
    let trimmed = key.trim_end_matches('/');
    let parts: Vec<&str> = trimmed.split('/').filter(|p| !p.is_empty()).collect();
    // At most one request per part of a key of at most 1024 bytes.
    for i in (0..=parts.len()).rev() {
        let prefix = match i {
            0 => String::new(),
            _ => format!("{}/", parts[..i].join("/")),
        };
        if let Some(b) = bucket.get_small(&manifest_key(&prefix), MAX_MANIFEST, Side::Source)? {
            return Ok((prefix, parts[i..].join("/").into_bytes(), b));
        }
    }
    Err(Error::Object {
        message: format!(
            "{}/{key}: no {MANIFEST_NAME} at or above it: haul downloads what haul uploaded \
             (the manifest holds each object's BLAKE3)",
            bucket.name()
        ),
        code: exit::SOURCE,
    })
}

/// One file to fetch.
struct Fetch {
    op: Operator,
    key: String,
    shown: String,
    root: Arc<OwnedFd>,
    rel: Vec<u8>,
    entry: Entry,
    size: u64,
    blake3: [u8; 32],
    owners: bool,
    streams: usize,
}

impl Fetch {
    /// Fetches, checks and places the file: its size, or None when the local one already
    /// matched.
    async fn run(self) -> Result<Option<u64>> {
        let de = |err: std::io::Error| {
            Error::destination(PathBuf::from(OsStr::from_bytes(&self.rel)), err)
        };
        let (dir, name) = parent_and_name(&self.root, &self.rel).map_err(de)?;
        if let Some(f) = same_file(&dir, name, self.size, &self.blake3) {
            apply_meta(&f, &self.entry, self.owners).map_err(de)?;
            return Ok(None);
        }
        let tmp = format!(
            ".haul-{}.part",
            &blake3::hash(name.as_bytes()).to_hex()[..16]
        );
        let _ = rfs::unlinkat(&dir, tmp.as_str(), AtFlags::empty());
        let fd = rfs::openat(
            &dir,
            tmp.as_str(),
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )
        .map_err(|e| de(e.into()))?;
        let file = File::from(fd);
        let r = self.fill(&file).await;
        let placed = r.and_then(|()| {
            apply_meta(&file, &self.entry, self.owners).map_err(de)?;
            file.sync_all().map_err(de)?;
            rfs::renameat(&dir, tmp.as_str(), &dir, name).map_err(|e| de(e.into()))
        });
        if placed.is_err() {
            let _ = rfs::unlinkat(&dir, tmp.as_str(), AtFlags::empty());
        }
        placed.map(|()| Some(self.size))
    }

    /// Writes the object into `file` (zero blocks left as holes), checking its length and
    /// BLAKE3 against the manifest.
    async fn fill(&self, file: &File) -> Result<()> {
        let de = |err: std::io::Error| {
            Error::destination(PathBuf::from(OsStr::from_bytes(&self.rel)), err)
        };
        let oe = |e: opendal::Error| object_error(&self.shown, "read", &e, Side::Source);
        let mut hasher = blake3::Hasher::new();
        let mut off = 0u64;
        if self.size <= PART as u64 {
            let buf = self.op.read(&self.key).await.map_err(oe)?.to_bytes();
            if buf.len() as u64 != self.size {
                return Err(self.mismatch("its length differs from the manifest's"));
            }
            hasher.update(&buf);
            write_sparse(file, &buf, 0).map_err(de)?;
        } else {
            let meta = self.op.stat(&self.key).await.map_err(oe)?;
            if meta.content_length() != self.size {
                return Err(self.mismatch("its length differs from the manifest's"));
            }
            let reader = self
                .op
                .reader_with(&self.key)
                .chunk(PART)
                .concurrent(self.streams)
                .await
                .map_err(oe)?;
            while off < self.size {
                let end = (off + WINDOW).min(self.size);
                let buf = reader.read(off..end).await.map_err(oe)?;
                if buf.len() as u64 != end - off {
                    return Err(self.mismatch("it is shorter than the manifest says"));
                }
                for chunk in buf {
                    hasher.update(&chunk);
                    write_sparse(file, &chunk, off).map_err(de)?;
                    off += chunk.len() as u64;
                }
            }
        }
        if hasher.finalize().as_bytes() != &self.blake3 {
            return Err(self.mismatch("its content does not match the BLAKE3 the manifest holds"));
        }
        file.set_len(self.size).map_err(de)
    }

    fn mismatch(&self, what: &str) -> Error {
        Error::Object {
            message: format!(
                "{}: {what} (changed or corrupted in the bucket); {} was not written",
                self.shown,
                crate::progress::escape_bytes(&self.rel)
            ),
            code: exit::INTEGRITY,
        }
    }
}

/// Writes `buf` at `off`, leaving `HOLE`-aligned blocks of zeros unwritten.
fn write_sparse(file: &File, buf: &[u8], off: u64) -> std::io::Result<()> {
    let mut i = 0usize;
    while i < buf.len() {
        // Up to the next HOLE boundary of the file's offsets.
        let at = off + i as u64;
        let n = ((HOLE as u64 - at % HOLE as u64) as usize).min(buf.len() - i);
        let block = &buf[i..i + n];
        if block.iter().any(|&b| b != 0) {
            file.write_all_at(block, at)?;
        }
        i += n;
    }
    Ok(())
}

/// The local file `name` in `dir`, opened, when it is a regular file of `size` bytes whose
/// BLAKE3 is `hash`.
fn same_file(dir: &OwnedFd, name: &OsStr, size: u64, hash: &[u8; 32]) -> Option<File> {
    let fd = rfs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .ok()?;
    let st = rfs::fstat(&fd).ok()?;
    if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile || st.st_size as u64 != size {
        return None;
    }
    let f = File::from(fd);
    let mut h = blake3::Hasher::new();
    let mut buf = vec![0u8; PART.min(size.max(1) as usize)];
    let mut off = 0u64;
    while off < size {
        let n = (size - off).min(buf.len() as u64) as usize;
        f.read_exact_at(&mut buf[..n], off).ok()?;
        h.update(&buf[..n]);
        off += n as u64;
    }
    (h.finalize().as_bytes() == hash).then_some(f)
}

/// The directory holding `rel` beneath `root` (opened following no symlink) and its name.
fn parent_and_name<'a>(root: &OwnedFd, rel: &'a [u8]) -> std::io::Result<(OwnedFd, &'a OsStr)> {
    let (parent, name) = match rel.iter().rposition(|&b| b == b'/') {
        Some(i) => (&rel[..i], &rel[i + 1..]),
        None => (&b""[..], rel),
    };
    let dir = crate::resolve::open(
        root.as_fd(),
        parent,
        OFlags::RDONLY | OFlags::DIRECTORY,
        Mode::empty(),
    )?;
    Ok((dir, OsStr::from_bytes(name)))
}

/// Makes the directory `rel` (an existing one is kept; anything else is an error).
fn make_dir(root: &OwnedFd, rel: &[u8]) -> std::io::Result<()> {
    let (dir, name) = parent_and_name(root, rel)?;
    match rfs::mkdirat(&dir, name, Mode::from_raw_mode(0o700)) {
        Err(Errno::EXIST) => {
            let st = rfs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW)?;
            match FileType::from_raw_mode(st.st_mode) {
                FileType::Directory => Ok(()),
                _ => Err(std::io::Error::new(
                    std::io::ErrorKind::AlreadyExists,
                    "exists and is not a directory",
                )),
            }
        }
        r => Ok(r?),
    }
}

/// Makes the symlink `rel` (replacing what had the name, unless a directory) with its owner
/// and mtime.
fn make_symlink(
    root: &OwnedFd,
    rel: &[u8],
    target: &[u8],
    e: &Entry,
    owners: bool,
) -> std::io::Result<()> {
    let (dir, name) = parent_and_name(root, rel)?;
    match rfs::readlinkat(&dir, name, Vec::new()) {
        Ok(t) if t.as_bytes() == target => {}
        _ => {
            remove_file(&dir, name)?;
            rfs::symlinkat(OsStr::from_bytes(target), &dir, name)?;
        }
    }
    if owners {
        rfs::chownat(
            &dir,
            name,
            Some(rfs::Uid::from_raw(e.uid)),
            Some(rfs::Gid::from_raw(e.gid)),
            AtFlags::SYMLINK_NOFOLLOW,
        )?;
    }
    rfs::utimensat(&dir, name, &times(e), AtFlags::SYMLINK_NOFOLLOW)?;
    Ok(())
}

/// Makes `rel` another name of the file at `to` (both beneath `root`).
fn make_link(root: &OwnedFd, to: &[u8], rel: &[u8]) -> std::io::Result<()> {
    let (from_dir, from_name) = parent_and_name(root, to)?;
    let (dir, name) = parent_and_name(root, rel)?;
    let a = rfs::statat(&from_dir, from_name, AtFlags::SYMLINK_NOFOLLOW)?;
    if let Ok(b) = rfs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        if (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino) {
            return Ok(());
        }
    }
    remove_file(&dir, name)?;
    Ok(rfs::linkat(
        &from_dir,
        from_name,
        &dir,
        name,
        AtFlags::empty(),
    )?)
}

/// Removes the non-directory `name` in `dir`, if there is one.
fn remove_file(dir: &OwnedFd, name: &OsStr) -> std::io::Result<()> {
    match rfs::unlinkat(dir, name, AtFlags::empty()) {
        Ok(()) | Err(Errno::NOENT) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Owner (as root), mode and mtime, through the descriptor.
fn apply_meta(fd: impl AsFd, e: &Entry, owners: bool) -> std::io::Result<()> {
    let fd = fd.as_fd();
    if owners {
        // Before chmod: chown clears the set-id bits.
        rfs::fchown(
            fd,
            Some(rfs::Uid::from_raw(e.uid)),
            Some(rfs::Gid::from_raw(e.gid)),
        )?;
    }
    rfs::fchmod(fd, Mode::from_raw_mode(e.mode & 0o7777))?;
    rfs::futimens(fd, &times(e))?;
    Ok(())
}

fn times(e: &Entry) -> Timestamps {
    let t = Timespec {
        tv_sec: e.mtime,
        tv_nsec: i64::from(e.mtime_nsec.min(999_999_999)),
    };
    Timestamps {
        last_access: t,
        last_modification: t,
    }
}
