//! A throwaway S3 server for the object-store tests: `s3s-fs` (crates.io, installed by
//! .ci/run) on a free loopback port, its buckets plain directories in a temp dir (so a
//! test can corrupt an object by writing to its file), signatures checked against one
//! key pair; killed when dropped.

use std::ffi::OsStr;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::process::{Outcome, Running};
use super::{free_port, haul_bin};

/// The key pair the server accepts.
pub const ACCESS_KEY: &str = "HAULTESTACCESSKEY";
/// Its secret.
pub const SECRET_KEY: &str = "haul-test-secret-key-0123456789";
/// How long the server may take to listen.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// A running s3s-fs.
pub struct S3Server {
    child: Child,
    /// Its data: one directory per bucket.
    pub root: tempfile::TempDir,
    /// `http://127.0.0.1:PORT`.
    pub endpoint: String,
    /// A home without ~/.aws for haul, unless a test writes one.
    pub home: tempfile::TempDir,
}

/// Where s3s-fs is: on PATH or in cargo's bin directory.
fn find() -> Option<PathBuf> {
    let cargo_bin = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cargo")))
        .map(|c| c.join("bin"));
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(cargo_bin)
        .map(|d| d.join("s3s-fs"))
        .find(|p| p.is_file())
}

impl S3Server {
    /// Starts one; `None` (after a `SKIPPED:` line) without s3s-fs, which under CI fails.
    pub fn start() -> Option<S3Server> {
        let Some(bin) = find() else {
            assert!(
                std::env::var_os("CI").is_none(),
                "s3s-fs is missing under CI (.ci/run installs it: cargo install s3s-fs)"
            );
            eprintln!("SKIPPED: s3s-fs is not installed (cargo install --locked s3s-fs@0.14.1 --features binary)");
            return None;
        };
        let root = tempfile::tempdir().expect("temp dir for the S3 server");
        let home = tempfile::tempdir().expect("temp home");
        let port = free_port();
        let child = Command::new(bin)
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .args(["--access-key", ACCESS_KEY, "--secret-key", SECRET_KEY])
            .arg(root.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start s3s-fs");
        let mut s = S3Server {
            child,
            root,
            endpoint: format!("http://127.0.0.1:{port}"),
            home,
        };
        let started = Instant::now();
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Ok(Some(st)) = s.child.try_wait() {
                panic!("s3s-fs exited before listening: {st}");
            }
            assert!(
                started.elapsed() < START_TIMEOUT,
                "s3s-fs did not listen within {START_TIMEOUT:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Some(s)
    }

    /// Makes the bucket `name` (a directory of the server's root) and returns its path.
    pub fn bucket(&self, name: &str) -> PathBuf {
        let p = self.root.path().join(name);
        std::fs::create_dir_all(&p).expect("make the bucket's directory");
        p
    }

    /// `haul copy ARGS --s3-endpoint …` with the server's key pair in the environment
    /// (and nothing else of the caller's AWS settings).
    pub fn copy<S: AsRef<OsStr>>(&self, args: &[S]) -> Outcome {
        self.copy_with(
            args,
            &[
                ("AWS_ACCESS_KEY_ID", ACCESS_KEY),
                ("AWS_SECRET_ACCESS_KEY", SECRET_KEY),
            ],
        )
    }

    /// `haul copy ARGS --s3-endpoint …` with only `env` of the AWS settings.
    pub fn copy_with<S: AsRef<OsStr>>(&self, args: &[S], env: &[(&str, &str)]) -> Outcome {
        Running::spawn("copy", self.copy_command(args, env)).wait()
    }

    /// The command `copy_with` runs, for a test that acts while it runs.
    pub fn copy_command<S: AsRef<OsStr>>(&self, args: &[S], env: &[(&str, &str)]) -> Command {
        let mut cmd = Command::new(haul_bin());
        cmd.arg("copy")
            .args(args)
            .args(["--s3-endpoint", &self.endpoint]);
        for (k, _) in std::env::vars_os() {
            if k.to_string_lossy().starts_with("AWS_") {
                cmd.env_remove(k);
            }
        }
        cmd.env("HOME", self.home.path())
            .env("AWS_REGION", "us-east-1");
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd
    }

    /// The server's process id (to stop it with SIGSTOP).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
