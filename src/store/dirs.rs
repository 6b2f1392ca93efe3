//! Directory descriptors kept open by path, so the files of one directory resolve it once
//! instead of once per step (the quick check, the anonymous file's creation, its link).
//!
//! Each descriptor is opened as every other path beneath the root is (`Store::at`:
//! `openat2` with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`, or below a kept `-K` link), and
//! then used for every later step: a directory renamed or replaced by a symlink meanwhile
//! is never followed, its files go where the descriptor points (where they would be had
//! the swap come after they were named). The cache holds at most [`MAX_DIRS`] entries
//! and starts over when full, so it costs a bounded number of descriptors whatever the
//! tree; a path it forgot is simply resolved again.
//!
//! It also remembers which directories this run made (empty when made): a file in one of
//! them has no older version and no earlier run's partial file to look for, so its quick
//! check needs no `statat`. Whatever someone else puts there meanwhile is still never
//! used: it is replaced when the file is named, as any file in the way is.

use std::collections::HashMap;
use std::io;
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex};

use crate::protocol::SafeRelPath;

/// Most directory descriptors held at once (trees are sent directory by directory, so
/// a few suffice; more would only hold descriptors).
const MAX_DIRS: usize = 256;

/// An open directory beneath the root.
pub(super) struct OpenDir {
    /// The directory, opened without following any symlink.
    pub(super) fd: OwnedFd,
    /// Its file system's device (a new file in it is on the same one).
    pub(super) dev: u64,
    /// This run made it (empty then): nothing in it predates the run.
    pub(super) made: bool,
}

/// Open directories by path beneath the root (bounded).
#[derive(Default)]
pub(super) struct DirCache {
    map: Mutex<HashMap<SafeRelPath, Arc<OpenDir>>>,
}

impl DirCache {
    /// The directory `path`, from the cache or else opened with `open` and kept (as made
    /// by this run if `made`).
    pub(super) fn get(
        &self,
        path: &SafeRelPath,
        made: bool,
        open: impl FnOnce(&SafeRelPath) -> io::Result<OwnedFd>,
    ) -> io::Result<Arc<OpenDir>> {
        match self.map.lock().ok().and_then(|m| m.get(path).cloned()) {
            Some(d) => Ok(d),
            None => self.open(path, made, open),
        }
    }

    /// Opens the directory `path` with `open` afresh and keeps it (as made by this run if
    /// `made`), replacing what was kept for that path.
    pub(super) fn open(
        &self,
        path: &SafeRelPath,
        made: bool,
        open: impl FnOnce(&SafeRelPath) -> io::Result<OwnedFd>,
    ) -> io::Result<Arc<OpenDir>> {
        let fd = open(path)?;
        let dev = rustix::fs::fstat(&fd)?.st_dev;
        let dir = Arc::new(OpenDir { fd, dev, made });
        if let Ok(mut m) = self.map.lock() {
            if m.len() >= MAX_DIRS && !m.contains_key(path) {
                m.clear();
            }
            m.insert(path.clone(), Arc::clone(&dir));
        }
        Ok(dir)
    }

    /// Forgets everything: the way paths resolve changed (a `-K` link was kept).
    pub(super) fn clear(&self) {
        if let Ok(mut m) = self.map.lock() {
            m.clear();
        }
    }

    /// How many directories are held (for tests).
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.map.lock().map(|m| m.len()).unwrap_or(0)
    }
}
