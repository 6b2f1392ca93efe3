//! One bucket through OpenDAL's S3 service: the requests a copy makes (whole small
//! objects, multipart uploads, parallel range reads, one listing), each error turned into
//! one line that says what failed and what to do.
//!
//! Credentials and region are read as the AWS CLI reads them: `AWS_ACCESS_KEY_ID`,
//! `AWS_SECRET_ACCESS_KEY` (and `AWS_SESSION_TOKEN`), or `~/.aws/credentials` with
//! `AWS_PROFILE`; `AWS_REGION` or `AWS_DEFAULT_REGION` (default us-east-1). The instance
//! metadata service is never asked: it is a network address a copy has no business with.
//! OpenDAL is async; the runtime lives here and nowhere else, and callers see blocking
//! calls.

use std::collections::HashMap;
use std::future::Future;

use opendal::{ErrorKind, Operator};

use crate::error::{exit, Error, Result};

/// One bucket and the runtime its requests run on.
pub struct Bucket {
    op: Operator,
    rt: tokio::runtime::Runtime,
    name: String,
}

/// Which side of the copy the bucket is: what a missing bucket means for the exit code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// Objects are read from it.
    Source,
    /// Objects are written to it.
    Destination,
}

impl Bucket {
    /// Connects to `bucket` (checking that it exists and that the credentials work, with
    /// one listing request) with room for `streams` requests at once; a request whose
    /// server says nothing for `silence` fails (`http`).
    pub fn open(
        bucket: &str,
        endpoint: Option<&str>,
        streams: usize,
        silence: Option<std::time::Duration>,
        side: Side,
    ) -> Result<Bucket> {
        // reqwest's rustls takes the process's provider; haul's own TLS names its own.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let region = std::env::var("AWS_REGION")
            .or_else(|_| std::env::var("AWS_DEFAULT_REGION"))
            .unwrap_or_else(|_| "us-east-1".to_string());
        let mut b = opendal::services::S3::default()
            .bucket(bucket)
            .region(&region)
            .disable_ec2_metadata();
        if let Some(e) = endpoint {
            b = b.endpoint(e);
        }
        let name = format!("s3://{bucket}");
        let op = Operator::new(b)
            .map_err(|e| object_error(&name, "configure", &e, side))?
            .layer(opendal::layers::HttpClientLayer::new(super::http::client(
                silence,
            )?))
            .finish();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(streams.clamp(2, 16))
            .enable_all()
            .build()
            .map_err(|e| Error::io("start the object store's runtime", e))?;
        let bucket = Bucket { op, rt, name };
        bucket.run(async {
            let probe = bucket.op.list_with("/").limit(1).await;
            probe
                .map(|_| ())
                .map_err(|e| object_error(&bucket.name, "list", &e, side))
        })?;
        Ok(bucket)
    }

    /// The operator, for the requests a copy runs on [`Bucket::run`].
    pub fn op(&self) -> &Operator {
        &self.op
    }

    /// `s3://bucket`, for messages.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Runs `f` on the bucket's runtime and waits for it.
    pub fn run<T>(&self, f: impl Future<Output = T>) -> T {
        self.rt.block_on(f)
    }

    /// Spawns `f` on the bucket's runtime.
    pub fn spawn<T: Send + 'static>(
        &self,
        set: &mut tokio::task::JoinSet<T>,
        f: impl Future<Output = T> + Send + 'static,
    ) {
        set.spawn_on(f, self.rt.handle());
    }

    /// The object at `key` whole, if it exists and is at most `max` bytes.
    pub fn get_small(&self, key: &str, max: u64, side: Side) -> Result<Option<Vec<u8>>> {
        self.run(async {
            let meta = match self.op.stat(key).await {
                Ok(m) => m,
                Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
                Err(e) => return Err(object_error(&self.name, &format!("stat {key}"), &e, side)),
            };
            if meta.content_length() > max {
                return Err(Error::Object {
                    message: format!(
                        "{}/{key}: {} bytes, more than the {max} a manifest may have; it is not haul's",
                        self.name,
                        meta.content_length()
                    ),
                    code: exit::INTEGRITY,
                });
            }
            match self.op.read(key).await {
                Ok(b) => Ok(Some(b.to_vec())),
                Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
                Err(e) => Err(object_error(&self.name, &format!("read {key}"), &e, side)),
            }
        })
    }

    /// Writes `bytes` as the object `key`.
    pub fn put(&self, key: &str, bytes: Vec<u8>) -> Result<()> {
        self.run(async {
            self.op.write(key, bytes).await.map(|_| ()).map_err(|e| {
                object_error(&self.name, &format!("write {key}"), &e, Side::Destination)
            })
        })
    }

    /// Every object under `prefix` and its size, keyed by its full key.
    pub fn sizes(&self, prefix: &str) -> Result<HashMap<String, u64>> {
        let listed = self.run(async { self.op.list_with(prefix).recursive(true).await });
        let entries = match listed {
            Ok(e) => e,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(HashMap::new()),
            Err(e) => {
                return Err(object_error(
                    &self.name,
                    &format!("list {prefix}"),
                    &e,
                    Side::Destination,
                ))
            }
        };
        Ok(entries
            .into_iter()
            .filter(|e| e.metadata().is_file())
            .map(|e| (e.path().to_string(), e.metadata().content_length()))
            .collect())
    }
}

/// An OpenDAL error as one line: what failed where, and what to do.
pub fn object_error(bucket: &str, what: &str, e: &opendal::Error, side: Side) -> Error {
    let full = e.to_string();
    let missing = match side {
        Side::Source => exit::SOURCE,
        Side::Destination => exit::DESTINATION,
    };
    // OpenDAL files a missing bucket under ConfigInvalid (404 NoSuchBucket) or NotFound.
    let no_bucket =
        full.contains("NoSuchBucket") || (what == "list" && e.kind() == ErrorKind::NotFound);
    let (reason, code) = if e.kind() == ErrorKind::PermissionDenied {
        (
            "access denied: check the credentials (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, \
             or ~/.aws/credentials and AWS_PROFILE) and the bucket's policy"
                .to_string(),
            exit::AUTH,
        )
    } else if no_bucket {
        (
            "no such bucket: create it first, or check its name and --s3-endpoint".to_string(),
            missing,
        )
    } else if full.contains("signing credential") {
        (
            "no credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or write \
             ~/.aws/credentials (and set AWS_PROFILE for a profile other than default)"
                .to_string(),
            exit::AUTH,
        )
    } else if e.kind() == ErrorKind::NotFound {
        ("not found".to_string(), exit::SOURCE)
    } else if e.kind() == ErrorKind::ConfigInvalid {
        (brief(e), exit::USAGE)
    } else {
        (
            format!(
                "{}: check --s3-endpoint and that the server is up",
                brief(e)
            ),
            exit::NETWORK,
        )
    };
    Error::Object {
        message: format!("{bucket}: {what}: {reason}"),
        code,
    }
}

/// What went wrong, without the request's context OpenDAL's display carries (and, at
/// times, the server's whole response): its message and its cause, at most 300 characters.
fn brief(e: &opendal::Error) -> String {
    let cause = std::error::Error::source(e)
        .map(|c| format!(": {c}"))
        .unwrap_or_default();
    let s = format!("{}{cause}", e.message());
    s.lines()
        .next()
        .unwrap_or_default()
        .chars()
        .take(300)
        .collect()
}
