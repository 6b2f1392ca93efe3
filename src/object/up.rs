//! An upload: walk the sources, send each file whose object is not already there with the
//! same size and BLAKE3 (N objects, and N parts of a large one, in flight), then write the
//! manifest, last, so that a manifest only ever names objects that arrived.

use std::collections::HashMap;
use std::fs::File;
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;

use opendal::Operator;
use rustix::fs::{Mode, OFlags};
use tokio::task::JoinSet;

use super::bucket::{object_error, Bucket, Side};
use super::manifest::{Kind, Manifest, ManifestError, MAX_MANIFEST};

/// A sent (or found unchanged) file: its entry's index, its BLAKE3, whether it was sent.
type Sent = (usize, [u8; 32], bool);
/// A finished upload task, as the runtime hands it back.
type Joined = Option<std::result::Result<Result<Sent>, tokio::task::JoinError>>;
use super::common::{bad_manifest, manifest_key, Report, PART};
use super::walk::{walk, Pending, Walked};
use crate::config::ObjectUrl;
use crate::error::{Error, Result};

/// Uploads `sources` to `dest` (see README, *Object stores*, for the naming rules).
pub fn upload(
    sources: &[PathBuf],
    dest: &ObjectUrl,
    bucket: &Bucket,
    streams: usize,
) -> Result<Report> {
    let (prefix, rename) = match dest.is_prefix() {
        true => (dest.key.clone(), None),
        // `dir/` to `s3://b/p`: p is the prefix; `file` to `s3://b/p/obj`: obj's name is its own.
        false if sources.len() == 1 && sources[0].as_os_str().as_bytes().ends_with(b"/") => {
            (format!("{}/", dest.key), None)
        }
        false if sources.len() == 1 => match dest.key.rsplit_once('/') {
            Some((p, n)) => (format!("{p}/"), Some(n.as_bytes().to_vec())),
            None => (String::new(), Some(dest.key.as_bytes().to_vec())),
        },
        false => {
            return Err(Error::Usage(format!(
                "{dest}: several sources go to a prefix; end it with '/'"
            )))
        }
    };
    let mut walked = Walked::default();
    let mut links = HashMap::new();
    for s in sources {
        let contents = s.as_os_str().as_bytes().ends_with(b"/");
        let name = match (&rename, contents) {
            (_, true) => None,
            (Some(n), false) => Some(n.clone()),
            (None, false) => Some(
                s.file_name()
                    .map(|n| n.as_bytes().to_vec())
                    .unwrap_or_default(),
            ),
        };
        walk(s, name.as_deref(), &mut walked, &mut links)?;
    }
    let mkey = manifest_key(&prefix);
    let old_bytes = bucket.get_small(&mkey, MAX_MANIFEST, Side::Destination)?;
    let old = match &old_bytes {
        Some(b) => Manifest::decode(b).map_err(|e| bad_manifest(bucket, &mkey, e))?,
        None => Manifest::default(),
    };
    let sizes = bucket.sizes(&prefix)?;
    let old_files = old.files();
    let mut report = Report::default();
    let mut set = JoinSet::new();
    let mut done: Vec<(usize, [u8; 32], bool)> = Vec::new();
    for f in walked.files.drain(..) {
        let Kind::File { key, .. } = &walked.entries[f.index].kind else {
            continue;
        };
        let full = format!("{prefix}{key}");
        let before = old_files
            .get(&walked.entries[f.index].path[..])
            .filter(|(size, _, k)| *size == f.size && *k == key && sizes.get(&full) == Some(size))
            .map(|(_, h, _)| **h);
        if set.len() >= streams {
            done.push(joined(set.join_next_blocking(bucket))?);
        }
        let op = bucket.op().clone();
        let name = bucket.name().to_string();
        bucket.spawn(&mut set, async move {
            send_file(op, &name, full, f, before, streams).await
        });
    }
    while let Some(r) = set.join_next_blocking(bucket) {
        done.push(joined(Some(r))?);
    }
    for (index, hash, sent) in done {
        if let Kind::File { blake3, size, .. } = &mut walked.entries[index].kind {
            *blake3 = hash;
            match sent {
                true => {
                    (report.sent_objects, report.sent_bytes) =
                        (report.sent_objects + 1, report.sent_bytes + *size)
                }
                false => report.unchanged += 1,
            }
        }
    }
    report.entries = walked.entries.len() as u64;
    let merged = old.merged(&walked.names, walked.entries);
    let bytes = merged.encode();
    Manifest::decode(&bytes).map_err(|e| match e {
        ManifestError::Entry { index, why } => Error::Usage(format!(
            "{dest}: the sources do not make one tree (entry {index}, {}: {why})",
            crate::progress::escape_bytes(
                &merged
                    .entries
                    .get(index)
                    .map(|e| e.path.clone())
                    .unwrap_or_default()
            )
        )),
        e => bad_manifest(bucket, &mkey, e),
    })?;
    if old_bytes.as_deref() != Some(&bytes[..]) {
        bucket.put(&mkey, bytes)?;
        report.manifest_written = true;
    }
    Ok(report)
}

/// A task's outcome, a panic included.
fn joined(r: Joined) -> Result<Sent> {
    match r {
        Some(Ok(r)) => r,
        Some(Err(e)) => Err(Error::io(
            "an upload task",
            std::io::Error::other(e.to_string()),
        )),
        None => Err(Error::io(
            "an upload task",
            std::io::Error::other("vanished"),
        )),
    }
}

/// Blocking joins on the bucket's runtime.
trait JoinBlocking<T> {
    fn join_next_blocking(
        &mut self,
        b: &Bucket,
    ) -> Option<std::result::Result<T, tokio::task::JoinError>>;
}

impl<T: 'static> JoinBlocking<T> for JoinSet<T> {
    fn join_next_blocking(
        &mut self,
        b: &Bucket,
    ) -> Option<std::result::Result<T, tokio::task::JoinError>> {
        b.run(self.join_next())
    }
}

/// Sends one file as the object `key`, hashing what it reads; with `before` (the hash the
/// manifest holds for an object of the same size), hashes first and sends nothing if the
/// file still has it. Returns (index, BLAKE3, whether it was sent).
async fn send_file(
    op: Operator,
    bucket: &str,
    key: String,
    f: Pending,
    before: Option<[u8; 32]>,
    streams: usize,
) -> Result<Sent> {
    let src = |e: std::io::Error| Error::Source {
        path: f.shown.clone(),
        source: e,
    };
    let fd = crate::resolve::open(
        f.base.as_fd(),
        &f.rel,
        OFlags::RDONLY | OFlags::NOFOLLOW,
        Mode::empty(),
    )
    .map_err(|e| src(e.into()))?;
    let st = rustix::fs::fstat(&fd).map_err(|e| src(e.into()))?;
    if st.st_ino != f.ino || st.st_size as u64 != f.size {
        return Err(changed(&f));
    }
    let file = File::from(fd);
    if let Some(h) = before {
        if hash_file(&file, f.size).map_err(src)? == h {
            return Ok((f.index, h, false));
        }
    }
    let part = part_size(f.size);
    let mut hasher = blake3::Hasher::new();
    let err =
        |e: opendal::Error| object_error(bucket, &format!("write {key}"), &e, Side::Destination);
    if f.size <= part as u64 {
        let mut buf = vec![0u8; f.size as usize];
        read_exact(&file, &mut buf, 0, &f)?;
        hasher.update(&buf);
        op.write(&key, buf).await.map_err(err)?;
    } else {
        let mut w = op
            .writer_with(&key)
            .chunk(part)
            .concurrent(streams)
            .await
            .map_err(err)?;
        let mut off = 0u64;
        while off < f.size {
            let n = (f.size - off).min(part as u64) as usize;
            let mut buf = vec![0u8; n];
            let r = read_exact(&file, &mut buf, off, &f);
            if let Err(e) = r {
                let _ = w.abort().await;
                return Err(e);
            }
            hasher.update(&buf);
            if let Err(e) = w.write(buf).await {
                let _ = w.abort().await;
                return Err(err(e));
            }
            off += n as u64;
        }
        w.close().await.map_err(err)?;
    }
    let after = rustix::fs::fstat(&file).map_err(|e| src(e.into()))?;
    if after.st_size as u64 != f.size
        || after.st_mtime != st.st_mtime
        || after.st_mtime_nsec != st.st_mtime_nsec
    {
        return Err(changed(&f));
    }
    Ok((f.index, *hasher.finalize().as_bytes(), true))
}

/// Reads `buf.len()` bytes at `off`; a file shorter than the walk saw has changed.
fn read_exact(file: &File, buf: &mut [u8], off: u64, f: &Pending) -> Result<()> {
    file.read_exact_at(buf, off).map_err(|e| match e.kind() {
        std::io::ErrorKind::UnexpectedEof => changed(f),
        _ => Error::Source {
            path: f.shown.clone(),
            source: e,
        },
    })
}

/// BLAKE3 of a file's first `size` bytes.
fn hash_file(file: &File, size: u64) -> std::io::Result<[u8; 32]> {
    let mut h = blake3::Hasher::new();
    let mut buf = vec![0u8; PART.min(size.max(1) as usize)];
    let mut off = 0u64;
    while off < size {
        let n = (size - off).min(buf.len() as u64) as usize;
        file.read_exact_at(&mut buf[..n], off)?;
        h.update(&buf[..n]);
        off += n as u64;
    }
    Ok(*h.finalize().as_bytes())
}

/// The part size for an object of `size` bytes: 8 MiB, or more to stay within S3's
/// 10,000 parts (a 5 TiB object: 525 MiB parts), rounded up to a MiB.
pub fn part_size(size: u64) -> usize {
    let min = size.div_ceil(10_000).div_ceil(1 << 20) << 20;
    (min as usize).max(PART)
}

/// A file that changed while it was read.
fn changed(f: &Pending) -> Error {
    Error::Changed {
        count: 1,
        first: f.shown.display().to_string(),
    }
}
