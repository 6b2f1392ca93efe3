//! Where things land: rsync's destination rules, decided on the host where the
//! destination can be looked at (the local side, or the far receiver of a remote copy).
//!
//! `copy SRC... DST`: DST is a directory that receives each source (`src` lands as
//! DST/src, `src/` spills its contents into DST), except that a single non-directory
//! source copied to a DST that is not an existing directory and has no trailing slash
//! takes DST as its new name.

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::walk::Source;

/// Whether `sources` is one path that is not a directory (a symlink to a directory
/// counts as not one: it is sent as a link), so the rename rule may apply.
pub fn is_single_file(sources: &[Source]) -> bool {
    match sources {
        [only] => !std::fs::symlink_metadata(&only.path)
            .map(|m| m.is_dir())
            .unwrap_or(false),
        _ => false,
    }
}

/// rsync's rule for a destination, decided where it can be looked at: when the transfer
/// is one non-directory source (`single_file`) and `dst` is not an existing directory and
/// has no trailing slash, the file lands as `dst` itself: the root is `dst`'s parent and
/// the file's new name is returned. Otherwise `dst` is the root and names are kept.
pub fn dest_layout(single_file: bool, dst: &Path) -> (PathBuf, Option<Vec<u8>>) {
    let dst_bytes = dst.as_os_str().as_bytes();
    if single_file && !dst_bytes.ends_with(b"/") && !dst.is_dir() {
        if let Some(name) = dst.file_name() {
            let parent = match dst.parent() {
                Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
                _ => PathBuf::from("."),
            };
            return (parent, Some(name.as_bytes().to_vec()));
        }
    }
    (dst.to_path_buf(), None)
}

/// rsync's rules for `copy SRC... DST`: DST is a directory that receives each source
/// (`src` lands as DST/src, `src/` spills its contents into DST), except that a single
/// non-directory source copied to a DST that is not an existing directory and has no
/// trailing slash takes DST as its new name.
pub fn copy_layout(srcs: &[PathBuf], dst: &Path) -> (Vec<Source>, PathBuf) {
    let mut sources: Vec<Source> = srcs.iter().map(|p| Source::from_arg(p)).collect();
    let (root, rename) = dest_layout(is_single_file(&sources), dst);
    if let (Some(name), [only]) = (rename, sources.as_mut_slice()) {
        only.dest_name = Some(name);
    }
    (sources, root)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_file_to_new_name() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("f");
        std::fs::write(&f, b"x").unwrap();
        let (s, root) = copy_layout(std::slice::from_ref(&f), &d.path().join("g"));
        assert_eq!(root, d.path());
        assert_eq!(s[0].dest_name.as_deref(), Some(&b"g"[..]));
        // Into an existing directory: keeps its name.
        let (s, root) = copy_layout(&[f], d.path());
        assert_eq!(root, d.path());
        assert_eq!(s[0].dest_name.as_deref(), Some(&b"f"[..]));
    }

    #[test]
    fn dest_layout_rules() {
        let d = tempfile::tempdir().unwrap();
        let new = d.path().join("new");
        assert_eq!(
            dest_layout(true, &new),
            (d.path().to_path_buf(), Some(b"new".to_vec()))
        );
        assert_eq!(dest_layout(false, &new), (new.clone(), None));
        assert_eq!(dest_layout(true, d.path()), (d.path().to_path_buf(), None));
        let slash = PathBuf::from(format!("{}/", new.display()));
        assert_eq!(dest_layout(true, &slash), (slash.clone(), None));
        assert_eq!(
            dest_layout(true, Path::new("rel")),
            (PathBuf::from("."), Some(b"rel".to_vec()))
        );
    }
}
