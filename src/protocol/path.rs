//! [`SafeRelPath`]: a path received from a peer, parsed so that it cannot leave the
//! destination root. Parse, don't validate: once you hold one, it is safe to join.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Longest path we accept (Linux PATH_MAX).
pub const MAX_PATH: usize = 4096;
/// Longest single component (NAME_MAX).
pub const MAX_NAME: usize = 255;

/// Why a received path was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    /// Starts with `/`.
    #[error("absolute path")]
    Absolute,
    /// Has `a//b` or a trailing `/`.
    #[error("empty component")]
    Empty,
    /// Has `.` or `..`.
    #[error("'.' or '..' component")]
    Dot,
    /// Has a NUL byte.
    #[error("NUL byte")]
    Nul,
    /// Longer than PATH_MAX or a component longer than NAME_MAX.
    #[error("too long")]
    TooLong,
    /// A single name (for `join`) holds `/`.
    #[error("'/' in a name")]
    Slash,
}

/// A relative path of zero or more components, none empty, `.`, `..`, containing `/` or
/// NUL, or longer than 255 bytes. Zero components is the destination root itself.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SafeRelPath(Vec<u8>);

impl SafeRelPath {
    /// The root (no components).
    pub fn root() -> SafeRelPath {
        SafeRelPath(Vec::new())
    }

    /// Parses `/`-separated bytes from the wire.
    pub fn parse(bytes: &[u8]) -> Result<SafeRelPath, PathError> {
        if bytes.is_empty() {
            return Ok(SafeRelPath::root());
        }
        if bytes.len() > MAX_PATH {
            return Err(PathError::TooLong);
        }
        if bytes[0] == b'/' {
            return Err(PathError::Absolute);
        }
        for c in bytes.split(|&b| b == b'/') {
            check_name(c)?;
        }
        Ok(SafeRelPath(bytes.to_vec()))
    }

    /// True for the root.
    pub fn is_root(&self) -> bool {
        self.0.is_empty()
    }

    /// The raw bytes (`/`-separated).
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// As a relative `Path` (for `openat`-style calls and messages).
    pub fn as_path(&self) -> &Path {
        if self.0.is_empty() {
            Path::new(".")
        } else {
            Path::new(OsStr::from_bytes(&self.0))
        }
    }

    /// The components.
    pub fn components(&self) -> impl Iterator<Item = &[u8]> {
        self.0.split(|&b| b == b'/').filter(|c| !c.is_empty())
    }

    /// Splits into parent and last component; `None` for the root.
    pub fn split_last(&self) -> Option<(SafeRelPath, &[u8])> {
        if self.0.is_empty() {
            return None;
        }
        Some(match self.0.iter().rposition(|&b| b == b'/') {
            Some(i) => (SafeRelPath(self.0[..i].to_vec()), &self.0[i + 1..]),
            None => (SafeRelPath::root(), &self.0[..]),
        })
    }

    /// Appends one component, which must itself be a valid name.
    pub fn join(&self, name: &[u8]) -> Result<SafeRelPath, PathError> {
        // `parse` splits at `/` before checking each part; a name given alone must not
        // hold one (`join(b"../x")` would otherwise smuggle a `..` in).
        if name.contains(&b'/') {
            return Err(PathError::Slash);
        }
        check_name(name)?;
        let mut v = Vec::with_capacity(self.0.len() + 1 + name.len());
        v.extend_from_slice(&self.0);
        if !v.is_empty() {
            v.push(b'/');
        }
        v.extend_from_slice(name);
        if v.len() > MAX_PATH {
            return Err(PathError::TooLong);
        }
        Ok(SafeRelPath(v))
    }

    /// A printable form for messages: control characters and bytes that are not UTF-8
    /// escaped as rsync does (`\#012`), so a name cannot forge or break a line.
    pub fn display(&self) -> String {
        if self.0.is_empty() {
            ".".into()
        } else {
            crate::progress::escape_bytes(&self.0)
        }
    }
}

fn check_name(c: &[u8]) -> Result<(), PathError> {
    if c.is_empty() {
        return Err(PathError::Empty);
    }
    if c == b"." || c == b".." {
        return Err(PathError::Dot);
    }
    if c.contains(&0) {
        return Err(PathError::Nul);
    }
    if c.len() > MAX_NAME {
        return Err(PathError::TooLong);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_in_messages_are_escaped() {
        let p = SafeRelPath::parse(b"dir/evil\nhaul: sent 999 files\xff").unwrap();
        assert_eq!(p.display(), "dir/evil\\#012haul: sent 999 files\\#377");
    }

    /// Found by the `path` fuzz target: a name with `/` passed to `join`.
    #[test]
    fn join_refuses_a_name_with_a_slash() {
        let root = SafeRelPath::root();
        assert_eq!(root.join(b"../x"), Err(PathError::Slash));
        assert_eq!(root.join(b"@/"), Err(PathError::Slash));
        assert!(root.join(b"a").unwrap().join(b"b").is_ok());
    }
    use proptest::prelude::*;
    use std::path::Component;

    #[test]
    fn accepts_ordinary_and_odd_names() {
        for p in [
            &b"a"[..],
            b"a/b/c",
            b"with space/new\nline",
            b"\xff\xfe/x",
            b"...",
            b".hidden",
        ] {
            assert!(SafeRelPath::parse(p).is_ok(), "{p:?}");
        }
        assert!(SafeRelPath::parse(&[b'n'; 255]).is_ok());
    }

    #[test]
    fn rejects_escapes() {
        let cases: [(&[u8], PathError); 9] = [
            (b"/etc/passwd", PathError::Absolute),
            (b"..", PathError::Dot),
            (b"a/../../x", PathError::Dot),
            (b"./a", PathError::Dot),
            (b"a//b", PathError::Empty),
            (b"a/", PathError::Empty),
            (b"a\0b", PathError::Nul),
            (&[b'n'; 256], PathError::TooLong),
            (&[b'a'; 5000], PathError::TooLong),
        ];
        for (p, want) in cases {
            assert_eq!(SafeRelPath::parse(p), Err(want), "{p:?}");
        }
    }

    #[test]
    fn split_and_join() {
        let p = SafeRelPath::parse(b"a/b/c").unwrap();
        let (parent, name) = p.split_last().unwrap();
        assert_eq!(parent.as_bytes(), b"a/b");
        assert_eq!(name, b"c");
        assert_eq!(parent.join(name).unwrap(), p);
        assert!(SafeRelPath::root().split_last().is_none());
        assert!(p.join(b"..").is_err());
    }

    proptest! {
        #[test]
        fn parsed_paths_stay_beneath(bytes in proptest::collection::vec(
            prop_oneof![Just(b'/'), Just(b'.'), Just(0u8), Just(b'a'), any::<u8>()], 0..64)) {
            if let Ok(p) = SafeRelPath::parse(&bytes) {
                for c in p.as_path().components() {
                    prop_assert!(matches!(c, Component::Normal(_) | Component::CurDir));
                }
                prop_assert!(!p.as_bytes().contains(&0));
                prop_assert!(p.components().all(|c| !c.is_empty() && c != b".." && c != b"."));
                if let Some((parent, name)) = p.split_last() {
                    prop_assert_eq!(parent.join(name).unwrap(), p);
                }
            }
        }
    }
}
