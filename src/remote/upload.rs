//! The zero-install upload: the sh script that starts the far end, and copying this
//! executable to a far host that has no usable haul.
//!
//! **The script** asks the configured remote haul for its versions and `exec`s it when they
//! match. Otherwise it runs this executable's copy from a private per-user cache,
//! `${XDG_CACHE_HOME:-$HOME/.cache}/haul/<sha256>/haul`, when one is there and its SHA-256
//! (the far host's `sha256sum`) is this executable's; or it asks for an upload, checks it
//! the same way and moves it there (replacing a damaged copy, and removing copies of other
//! versions), then runs it. Another user must not be able to plant a binary there: the
//! cache is used only when the cache base and its parent are directories (not symlinks)
//! owned by the user or root and writable by no one else, and `haul` and `<sha256>` below it
//! are the user's own, mode 0700; the cached file must be the user's, mode 0700, and match
//! its hash every time before it runs. Otherwise (and with `--no-cache`, or without
//! `sha256sum`, `stat` or `$HOME`) the upload goes to a fresh `mktemp -d` directory under
//! `$TMPDIR` or `/tmp` that is removed when the far end exits. An upload is read with
//! `head -c` of exactly this executable's size into a `mktemp` file, checked, and renamed
//! into place; the local side sends nothing after the binary until the copy greets, so
//! `head` cannot read past it. The copy run greets with the BLAKE3 of its own executable,
//! which the local side compares with this one's in every case.
//!
//! Not here: reading the far end's lines or what it says (`farend`).

use std::io::{self, IsTerminal, Read, Write};
use std::path::Path;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::rsh::sh_quote;
use super::wire;
use crate::error::{Error, Result};

/// The far script's line asking for an upload into a temporary directory.
pub const UPLOAD_LINE: &str = "haul-upload";
/// ...asking for an upload into the cache.
pub const UPLOAD_CACHE_LINE: &str = "haul-upload-cache";
/// ...saying that it runs the cached copy (nothing is uploaded).
pub const CACHED_LINE: &str = "haul-cached";

/// This executable: its size and hashes, read once.
pub struct Exe {
    /// Size in bytes.
    pub size: u64,
    /// SHA-256, hex: what the far host's `sha256sum` checks.
    pub sha256: String,
    /// BLAKE3, hex: what the far copy greets with.
    pub blake3: String,
}

impl Exe {
    /// Reads `path` (`/proc/self/exe`) once for both hashes.
    pub fn read(path: &Path) -> Result<Exe> {
        let err = |e| Error::io("reading this executable", e);
        let mut f = std::fs::File::open(path).map_err(err)?;
        let mut sha = ring::digest::Context::new(&ring::digest::SHA256);
        let mut b3 = blake3::Hasher::new();
        let mut buf = vec![0u8; 1 << 20];
        let mut size = 0u64;
        loop {
            match f.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    sha.update(&buf[..n]);
                    b3.update(&buf[..n]);
                    size += n as u64;
                }
                Err(e) => return Err(err(e)),
            }
        }
        Ok(Exe {
            size,
            sha256: hex(sha.finish().as_ref()),
            blake3: b3.finalize().to_hex().to_string(),
        })
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The script the far host's shell runs (through `sh -c`, whatever the login shell is).
/// `cache`: use (and fill) the per-user cache.
pub fn bootstrap_script(remote_haul: &str, size: u64, sha256: &str, cache: bool) -> String {
    let probe = wire::greeting(None);
    let cache = u8::from(cache);
    format!(
        r#"h={haul}
if [ "$("$h" serve --probe </dev/null 2>/dev/null)" = '{probe}' ]; then exec "$h" serve; fi
m=$(umask)
umask 077
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 143' TERM
ok() {{ [ "$(sha256sum < "$1")" = '{sha256}  -' ]; }}
c=
if [ {cache} = 1 ] && [ -n "${{HOME:-}}" ] && command -v sha256sum >/dev/null 2>&1 && command -v stat >/dev/null 2>&1; then
  me=$(id -u)
  safe() {{ [ -d "$1" ] && [ ! -L "$1" ] && set -- $(stat -c '%u %a' "$1") && {{ [ "$1" = "$me" ] || [ "$1" = 0 ]; }} && [ $((0$2 & 022)) = 0 ]; }}
  mine() {{ [ ! -L "$1" ] && [ "$(stat -c '%u %a' "$1")" = "$me 700" ]; }}
  b=${{XDG_CACHE_HOME:-$HOME/.cache}}
  case $b in /*) ;; *) b=$HOME/.cache ;; esac
  mkdir -p "$b" 2>/dev/null
  if safe "$(dirname "$b")" && safe "$b"; then
    mkdir "$b/haul" "$b/haul/{sha256}" 2>/dev/null
    [ -d "$b/haul/{sha256}" ] && mine "$b/haul" && mine "$b/haul/{sha256}" && c=$b/haul/{sha256}
  fi
  if [ -z "$c" ]; then
    echo "haul: $b/haul is not a private directory of yours; not caching haul there" >&2
  fi
fi
if [ -n "$c" ]; then
  if [ -e "$c/haul" ] || [ -L "$c/haul" ]; then
    if [ -f "$c/haul" ] && mine "$c/haul" && ok "$c/haul"; then
      echo {CACHED_LINE}
      umask "$m"
      exec "$c/haul" serve --uploaded
    fi
    echo "haul: the copy of haul cached in $c is damaged (SHA-256 or mode differs); replacing it" >&2
  fi
  echo {UPLOAD_CACHE_LINE}
  t=$(mktemp "$c/.haul.XXXXXXXX") || exit 1
  trap 'rm -f "$t"' EXIT
  head -c {size} > "$t" || exit 1
  ok "$t" || {{ echo 'haul: the uploaded copy of haul is damaged (SHA-256 differs); not running it' >&2; exit 1; }}
  chmod 700 "$t" && mv -f "$t" "$c/haul" || exit 1
  trap - EXIT
  for o in "$b"/haul/*; do [ "$o" = "$c" ] || rm -rf "$o"; done
  umask "$m"
  exec "$c/haul" serve --uploaded
fi
echo {UPLOAD_LINE}
d=$(mktemp -d "${{TMPDIR:-/tmp}}/haul.XXXXXXXX") || exit 1
trap 'rm -rf "$d"' EXIT
head -c {size} > "$d/haul" || exit 1
if command -v sha256sum >/dev/null 2>&1; then
  ok "$d/haul" || {{ echo 'haul: the uploaded copy of haul is damaged (SHA-256 differs); not running it' >&2; exit 1; }}
fi
chmod 700 "$d/haul" || exit 1
umask "$m"
"$d/haul" serve --uploaded"#,
        haul = sh_quote(remote_haul),
    )
}

/// Why an upload stopped.
pub enum Stopped {
    /// Reading this executable failed.
    Local(Error),
    /// The far end stopped reading.
    Gone,
}

/// Streams `exe`'s `size` bytes into `to`, with a progress bar for `host` on a terminal.
/// Returns their BLAKE3, hex (the far copy must greet with it).
pub fn stream(
    exe: &Path,
    size: u64,
    to: &mut dyn Write,
    host: &str,
    quiet: bool,
) -> std::result::Result<String, Stopped> {
    let local = |e| Stopped::Local(Error::io("reading this executable", e));
    let mut f = std::fs::File::open(exe).map_err(local)?;
    let bar = upload_bar(size, host, quiet);
    let mut hasher = blake3::Hasher::new();
    let mut left = size;
    let mut buf = vec![0u8; 1 << 20];
    while left > 0 {
        let want = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
        let n = match f.read(&mut buf[..want]) {
            Ok(0) => {
                let e = io::Error::new(io::ErrorKind::UnexpectedEof, "it shrank while copying");
                return Err(local(e));
            }
            Ok(n) => n,
            Err(e) => return Err(local(e)),
        };
        hasher.update(&buf[..n]);
        to.write_all(&buf[..n]).map_err(|_| Stopped::Gone)?;
        left -= n as u64;
        bar.inc(n as u64);
    }
    to.flush().map_err(|_| Stopped::Gone)?;
    bar.finish_and_clear();
    Ok(hasher.finalize().to_hex().to_string())
}

/// The upload's bytes/total on stderr when it is a terminal; nothing otherwise (the
/// caller's one line says what is copied).
fn upload_bar(size: u64, host: &str, quiet: bool) -> ProgressBar {
    if quiet || !io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::with_draw_target(Some(size), ProgressDrawTarget::stderr());
    let style = ProgressStyle::with_template(
        "haul: {prefix}: copying haul {bytes}/{total_bytes} ({bytes_per_sec}, {eta} left)",
    )
    .unwrap_or_else(|_| ProgressStyle::default_bar());
    bar.set_style(style);
    bar.set_prefix(crate::progress::escape(host));
    bar
}

#[cfg(test)]
mod tests;
