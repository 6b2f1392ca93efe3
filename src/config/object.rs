//! `s3://bucket/prefix` as a copy's source or destination: parsed here, pure.
//!
//! What a copy with an object store moves and how is `object`'s business; this file only
//! says which way, between which paths and which bucket, through which endpoint.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use super::location::{parse_location, Location};
use crate::cli::{RemoteArgs, TransferArgs};
use crate::error::{Error, Result};

/// The scheme of an S3 location.
pub const S3_SCHEME: &str = "s3://";

/// Longest S3 key in bytes (S3's own limit).
pub const MAX_KEY: usize = 1024;

/// A location in a bucket: `s3://bucket/key`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectUrl {
    /// The bucket.
    pub bucket: String,
    /// The key or prefix, without a leading `/`; `""` is the bucket's root. Ends with
    /// `/` when the user wrote one (a prefix: "the contents of").
    pub key: String,
}

impl ObjectUrl {
    /// Whether `arg` names an object store location (and so is not a local path or
    /// `host:path`).
    pub fn is_one(arg: &OsStr) -> bool {
        arg.as_bytes().starts_with(S3_SCHEME.as_bytes())
    }

    /// Parses `s3://bucket[/key]`.
    pub fn parse(arg: &OsStr) -> Result<ObjectUrl> {
        let shown = arg.to_string_lossy();
        let bad = |why: &str| Error::Usage(format!("{shown}: {why} (expected s3://BUCKET/PREFIX)"));
        let s = arg.to_str().ok_or_else(|| bad("not UTF-8"))?;
        let rest = s.strip_prefix(S3_SCHEME).ok_or_else(|| bad("not s3://"))?;
        let (bucket, key) = rest.split_once('/').unwrap_or((rest, ""));
        let bucket_ok = (3..=63).contains(&bucket.len())
            && bucket
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.');
        if !bucket_ok {
            return Err(bad(
                "a bucket name is 3 to 63 lowercase letters, digits, '-' or '.'",
            ));
        }
        if key.len() > MAX_KEY {
            return Err(bad("a key is at most 1024 bytes"));
        }
        let dotted = key.split('/').any(|c| c == "." || c == "..");
        if dotted || key.starts_with('/') || key.contains("//") || key.chars().any(char::is_control)
        {
            return Err(bad(
                "a key has no empty, '.' or '..' parts and no control characters",
            ));
        }
        Ok(ObjectUrl {
            bucket: bucket.to_string(),
            key: key.to_string(),
        })
    }

    /// Whether the key names a prefix's contents (ends with `/`, or is the bucket's root).
    pub fn is_prefix(&self) -> bool {
        self.key.is_empty() || self.key.ends_with('/')
    }
}

impl std::fmt::Display for ObjectUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{S3_SCHEME}{}/{}", self.bucket, self.key)
    }
}

/// Which way a copy with an object store goes.
#[derive(Clone, Debug)]
pub enum ObjectPlan {
    /// Local sources (as given: `dir/` uploads the contents) to a bucket.
    Up {
        /// What to upload.
        sources: Vec<PathBuf>,
        /// Where.
        dest: ObjectUrl,
    },
    /// A key or prefix to a local destination.
    Down {
        /// What to download.
        source: ObjectUrl,
        /// Where to.
        dest: PathBuf,
    },
}

/// A copy to or from an object store, validated.
#[derive(Clone, Debug)]
pub struct ObjectCopy {
    /// Which way.
    pub plan: ObjectPlan,
    /// `--s3-endpoint` (None: the environment's or AWS's).
    pub endpoint: Option<String>,
    /// Objects (and parts of one object) in flight at once (`--streams`).
    pub streams: usize,
    /// `--timeout`: a request whose server says nothing this long fails (None: never).
    pub silence: Option<std::time::Duration>,
}

/// `copy PATH... DST` where a path is `s3://`: the plan, or None when none is.
pub fn object_copy(
    paths: &[PathBuf],
    endpoint: Option<String>,
    streams: usize,
    silence: Option<std::time::Duration>,
) -> Result<Option<ObjectCopy>> {
    if !paths.iter().any(|p| ObjectUrl::is_one(p.as_os_str())) {
        return Ok(None);
    }
    let Some((dst, srcs)) = paths.split_last() else {
        return Err(Error::Usage("copy needs SRC... DST".into()));
    };
    if let Some(e) = &endpoint {
        if !(e.starts_with("http://") || e.starts_with("https://")) {
            return Err(Error::Usage(format!(
                "--s3-endpoint {e}: expected http://HOST[:PORT] or https://HOST[:PORT]"
            )));
        }
    }
    let remote = srcs
        .iter()
        .filter(|p| ObjectUrl::is_one(p.as_os_str()))
        .count();
    let plan = match (ObjectUrl::is_one(dst.as_os_str()), remote, srcs.len()) {
        (true, 0, _) => ObjectPlan::Up {
            sources: srcs.to_vec(),
            dest: ObjectUrl::parse(dst.as_os_str())?,
        },
        (false, 1, 1) => match parse_location(dst.as_os_str()) {
            Ok(Location::Local(dest)) => ObjectPlan::Down {
                source: ObjectUrl::parse(srcs[0].as_os_str())?,
                dest,
            },
            _ => {
                return Err(Error::Usage(
                    "copy from s3://: the destination is a local path (not host:path)".into(),
                ))
            }
        },
        _ => {
            return Err(Error::Usage(
                "copy with s3://: either local sources to one s3:// destination, or one s3:// \
                 source to a local destination"
                    .into(),
            ))
        }
    };
    if srcs.iter().any(|p| p.as_os_str() == "-") || dst.as_os_str() == "-" {
        return Err(Error::Usage(
            "copy with s3://: streams (-) are not supported yet".into(),
        ));
    }
    Ok(Some(ObjectCopy {
        plan,
        endpoint,
        streams,
        silence,
    }))
}

/// Options a copy with an object store does not take (yet): refused, never ignored.
pub fn refuse_options(
    t: &TransferArgs,
    commands: (&Option<String>, &Option<String>),
    r: &RemoteArgs,
    json: bool,
) -> Result<()> {
    let f = &t.filter;
    let given = [
        (t.sync.checksum, "--checksum"),
        (t.sync.delete || t.sync.delete_excluded, "--delete"),
        (t.sync.dry_run, "--dry-run"),
        (t.sync.inplace, "--inplace"),
        (t.sync.update, "--update"),
        (t.sync.existing, "--existing"),
        (t.sync.ignore_existing, "--ignore-existing"),
        (t.sync.size_only, "--size-only"),
        (t.size.is_some(), "--size"),
        (t.compress.is_some(), "--compress"),
        (t.block_size.is_some(), "--block-size"),
        (t.buffer.is_some(), "--buffer"),
        (t.limit.is_some() || t.bwlimit.is_some(), "--limit"),
        (t.cc.is_some(), "--cc"),
        (t.retries.is_some(), "--retries"),
        (
            !f.exclude.is_empty() || !f.include.is_empty(),
            "--exclude/--include",
        ),
        (
            !f.exclude_from.is_empty() || !f.include_from.is_empty(),
            "--exclude-from/--include-from",
        ),
        (f.files_from.is_some(), "--files-from"),
        (f.one_file_system, "--one-file-system"),
        (f.copy_links || f.copy_unsafe_links, "--copy-links"),
        (f.shard.is_some(), "--shard"),
        (
            commands.0.is_some() || commands.1.is_some(),
            "--from-command/--to-command",
        ),
        (!r.also.is_empty(), "--also"),
        (json, "--json"),
    ];
    match given.iter().find(|(g, _)| *g) {
        Some((_, name)) => Err(Error::Usage(format!(
            "{name} does not apply to a copy with s3:// (yet); leave it out"
        ))),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(s: &str) -> Result<ObjectUrl> {
        ObjectUrl::parse(OsStr::new(s))
    }

    #[test]
    fn a_url_is_a_bucket_and_a_key_and_a_trailing_slash_means_a_prefix() {
        let u = url("s3://my-bucket/a/b/").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (u.bucket.as_str(), u.key.as_str(), u.is_prefix()),
            ("my-bucket", "a/b/", true)
        );
        let u = url("s3://my-bucket/a/obj").unwrap_or_else(|e| panic!("{e}"));
        assert!(!u.is_prefix());
        assert!(url("s3://my-bucket")
            .map(|u| u.is_prefix())
            .unwrap_or(false));
        assert_eq!(u.to_string(), "s3://my-bucket/a/obj");
    }

    #[test]
    fn bad_buckets_and_keys_are_usage_errors() {
        for bad in [
            "s3://",
            "s3://A/x",
            "s3://ab/x",
            "s3://b_b/x",
            "s3://bkt//x",
            "s3://bkt/a/../x",
            "s3://bkt/a\nb",
        ] {
            assert!(matches!(url(bad), Err(Error::Usage(_))), "{bad}");
        }
    }

    #[test]
    fn a_copy_goes_up_or_down_but_not_both_or_between_buckets() {
        let p = |v: &[&str]| v.iter().map(PathBuf::from).collect::<Vec<_>>();
        let up = object_copy(&p(&["a", "b/", "s3://bkt/p/"]), None, 4, None)
            .ok()
            .flatten();
        assert!(
            matches!(up.map(|c| c.plan), Some(ObjectPlan::Up { sources, .. }) if sources.len() == 2)
        );
        let down = object_copy(&p(&["s3://bkt/p/", "dir"]), None, 4, None)
            .ok()
            .flatten();
        assert!(matches!(
            down.map(|c| c.plan),
            Some(ObjectPlan::Down { .. })
        ));
        assert!(matches!(
            object_copy(&p(&["a", "b"]), None, 4, None),
            Ok(None)
        ));
        for bad in [
            &["s3://bkt/a", "s3://bkt/b"][..],
            &["s3://bkt/a", "b", "c"],
            &["s3://bkt/a", "host:b"],
        ] {
            assert!(
                matches!(object_copy(&p(bad), None, 4, None), Err(Error::Usage(_))),
                "{bad:?}"
            );
        }
        let ep = object_copy(&p(&["a", "s3://bkt/p/"]), Some("ftp://x".into()), 4, None);
        assert!(matches!(ep, Err(Error::Usage(_))));
    }
}
