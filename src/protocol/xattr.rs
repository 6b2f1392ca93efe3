//! Extended attributes as they travel in a manifest entry: names and values, bounded and
//! checked when decoded, so a hostile sender cannot make the receiver allocate or set
//! more than Linux itself would hold, nor reach a namespace haul does not copy.
//!
//! POSIX ACLs travel as the attributes the kernel keeps them in
//! (`system.posix_acl_access`, `system.posix_acl_default`), SELinux labels and file
//! capabilities as `security.*`. No I/O here: the sender's walk reads them and the store
//! applies them (`store::xattr`).
//!
//! Bounds, checked while decoding: at most 1,024 attributes, names of at most 255 bytes,
//! values of at most 64 KiB, 1 MiB per file; sorted, no name twice.

use serde::{Deserialize, Serialize};

/// Most attributes per file.
pub const MAX_XATTRS: usize = 1024;
/// Longest attribute name (Linux's `XATTR_NAME_MAX`).
pub const MAX_XATTR_NAME: usize = 255;
/// Largest attribute value (Linux's `XATTR_SIZE_MAX`).
pub const MAX_XATTR_VALUE: usize = 64 << 10;
/// Most bytes of names and values of one file together (a manifest batch stays a small
/// part of the largest control message even when every entry carries this much).
pub const MAX_XATTR_TOTAL: usize = 1 << 20;

/// The namespaces haul copies: prefixes, and the two ACL names of `system.`.
const PREFIXES: [&[u8]; 3] = [b"user.", b"trusted.", b"security."];
const ACLS: [&[u8]; 2] = [b"system.posix_acl_access", b"system.posix_acl_default"];

/// Whether haul copies an attribute of this name: `user.*`, `trusted.*`, `security.*` and
/// the POSIX ACLs, with something after the prefix, no NUL, at most [`MAX_XATTR_NAME`]
/// bytes. Others (`system.nfs4_acl`, a file system's private names) are not copied.
pub fn known_name(name: &[u8]) -> bool {
    if name.is_empty() || name.len() > MAX_XATTR_NAME || name.contains(&0) {
        return false;
    }
    ACLS.contains(&name)
        || PREFIXES
            .iter()
            .any(|p| name.len() > p.len() && name.starts_with(p))
}

/// One attribute.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Xattr {
    /// Its full name, namespace included (`user.mime_type`).
    pub name: Vec<u8>,
    /// Its value, raw bytes.
    pub value: Vec<u8>,
}

/// A file's extended attributes: sorted by name, names unique and known, within the
/// bounds above. Only [`Xattrs::new`] makes one, and decoding goes through it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "Vec<Xattr>")]
pub struct Xattrs(Vec<Xattr>);

/// Why a list of attributes was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum XattrError {
    /// More attributes than [`MAX_XATTRS`].
    #[error("more than {MAX_XATTRS} extended attributes on one file")]
    TooMany,
    /// A name outside the copied namespaces, empty, too long or with a NUL.
    #[error("extended attribute name not accepted: {0}")]
    Name(String),
    /// The same name twice.
    #[error("extended attribute {0} given twice")]
    Duplicate(String),
    /// A value over [`MAX_XATTR_VALUE`].
    #[error("extended attribute {name} has {len} bytes, more than {MAX_XATTR_VALUE}")]
    Value {
        /// The attribute.
        name: String,
        /// Its value's length.
        len: usize,
    },
    /// Names and values over [`MAX_XATTR_TOTAL`] together.
    #[error("extended attributes of one file exceed {MAX_XATTR_TOTAL} bytes")]
    Total,
}

fn shown(name: &[u8]) -> String {
    crate::progress::escape_bytes(name)
}

impl Xattrs {
    /// Checks and sorts `list`.
    pub fn new(mut list: Vec<Xattr>) -> Result<Xattrs, XattrError> {
        if list.len() > MAX_XATTRS {
            return Err(XattrError::TooMany);
        }
        let mut total = 0usize;
        for x in &list {
            if !known_name(&x.name) {
                return Err(XattrError::Name(shown(&x.name)));
            }
            if x.value.len() > MAX_XATTR_VALUE {
                return Err(XattrError::Value {
                    name: shown(&x.name),
                    len: x.value.len(),
                });
            }
            total += x.name.len() + x.value.len();
        }
        if total > MAX_XATTR_TOTAL {
            return Err(XattrError::Total);
        }
        list.sort_by(|a, b| a.name.cmp(&b.name));
        if let Some(w) = list.windows(2).find(|w| w[0].name == w[1].name) {
            return Err(XattrError::Duplicate(shown(&w[0].name)));
        }
        Ok(Xattrs(list))
    }

    /// The attributes, sorted by name.
    pub fn list(&self) -> &[Xattr] {
        &self.0
    }

    /// The value of `name`, if present.
    pub fn get(&self, name: &[u8]) -> Option<&[u8]> {
        self.0
            .binary_search_by(|x| x.name.as_slice().cmp(name))
            .ok()
            .map(|i| self.0[i].value.as_slice())
    }

    /// Bytes of names and values (for sizing manifest batches).
    pub fn bytes(&self) -> usize {
        self.0.iter().map(|x| x.name.len() + x.value.len()).sum()
    }

    /// Keeps only the attributes for which `keep` says yes.
    pub fn retain(&mut self, mut keep: impl FnMut(&[u8]) -> bool) {
        self.0.retain(|x| keep(&x.name));
    }
}

impl TryFrom<Vec<Xattr>> for Xattrs {
    type Error = XattrError;

    fn try_from(list: Vec<Xattr>) -> Result<Xattrs, XattrError> {
        Xattrs::new(list)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn x(name: &[u8], value: &[u8]) -> Xattr {
        Xattr {
            name: name.to_vec(),
            value: value.to_vec(),
        }
    }

    #[test]
    fn known_namespaces_only() {
        for ok in [
            &b"user.a"[..],
            b"trusted.overlay.opaque",
            b"security.selinux",
            b"security.capability",
            b"system.posix_acl_access",
            b"system.posix_acl_default",
        ] {
            assert!(known_name(ok), "{ok:?}");
        }
        for bad in [
            &b""[..],
            b"user.",
            b"user",
            b"system.nfs4_acl",
            b"system.posix_acl_accessx",
            b"other.x",
            b"user.a\0b",
        ] {
            assert!(!known_name(bad), "{bad:?}");
        }
        assert!(known_name(&[b"user.".as_slice(), &[b'a'; 250]].concat()));
        assert!(!known_name(&[b"user.".as_slice(), &[b'a'; 251]].concat()));
    }

    #[test]
    fn bounds_are_enforced() {
        let big = vec![0u8; MAX_XATTR_VALUE + 1];
        assert!(matches!(
            Xattrs::new(vec![x(b"user.a", &big)]),
            Err(XattrError::Value { .. })
        ));
        assert!(Xattrs::new(vec![x(b"user.a", &big[1..])]).is_ok());
        let many = (0..=MAX_XATTRS)
            .map(|i| x(format!("user.{i}").as_bytes(), b""))
            .collect();
        assert_eq!(Xattrs::new(many), Err(XattrError::TooMany));
        let heavy = (0..20)
            .map(|i| x(format!("user.{i}").as_bytes(), &big[1..]))
            .collect();
        assert_eq!(Xattrs::new(heavy), Err(XattrError::Total));
        assert_eq!(
            Xattrs::new(vec![x(b"user.a", b"1"), x(b"user.a", b"2")]),
            Err(XattrError::Duplicate("user.a".into()))
        );
        assert!(matches!(
            Xattrs::new(vec![x(b"system.nfs4_acl", b"")]),
            Err(XattrError::Name(_))
        ));
    }

    #[test]
    fn decoding_checks_like_new() {
        let raw = vec![x(b"user.b", b"2"), x(b"user.a", b"1")];
        let bytes = postcard::to_stdvec(&raw).unwrap();
        let got: Xattrs = postcard::from_bytes(&bytes).unwrap();
        assert_eq!(got.list()[0].name, b"user.a");
        assert_eq!(got.get(b"user.b"), Some(&b"2"[..]));
        let hostile = postcard::to_stdvec(&vec![x(b"evil.x", b"")]).unwrap();
        assert!(postcard::from_bytes::<Xattrs>(&hostile).is_err());
        let oversized =
            postcard::to_stdvec(&vec![x(b"user.a", &[7; MAX_XATTR_VALUE + 1])]).unwrap();
        assert!(postcard::from_bytes::<Xattrs>(&oversized).is_err());
    }

    proptest! {
        #[test]
        fn any_bytes_decode_to_a_bounded_list_or_an_error(
            bytes in proptest::collection::vec(any::<u8>(), 0..512)
        ) {
            if let Ok(xs) = postcard::from_bytes::<Xattrs>(&bytes) {
                prop_assert!(xs.list().len() <= MAX_XATTRS);
                prop_assert!(xs.bytes() <= MAX_XATTR_TOTAL);
                prop_assert!(xs.list().iter().all(|x| known_name(&x.name)));
                prop_assert!(xs.list().windows(2).all(|w| w[0].name < w[1].name));
            }
        }

        #[test]
        fn valid_lists_round_trip(
            names in proptest::collection::btree_set("user\\.[a-z]{1,20}", 0..20),
            value in proptest::collection::vec(any::<u8>(), 0..100),
        ) {
            let list = names.iter().map(|n| x(n.as_bytes(), &value)).collect();
            let xs = Xattrs::new(list).unwrap();
            let back: Xattrs = postcard::from_bytes(&postcard::to_stdvec(&xs).unwrap()).unwrap();
            prop_assert_eq!(back, xs);
        }
    }
}
