//! `probe SRC... DST`: the paths in `copy`'s forms, checked; what to measure.

use std::path::PathBuf;

use super::location::{parse_location, Location};
use crate::error::{Error, Result};
use crate::protocol::MAX_STREAMS;

/// What `haul probe` measures.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Probe {
    /// The sources, as `copy` would take them.
    pub sources: Vec<PathBuf>,
    /// The destination, as `copy` would take it (it need not exist).
    pub dest: PathBuf,
    /// Data streams the copy would use.
    pub streams: usize,
}

/// Checks `SRC... DST` (local paths; `host:path` is refused) and the stream count.
pub fn probe(paths: &[PathBuf], streams: usize) -> Result<Probe> {
    if streams == 0 || streams > usize::from(MAX_STREAMS) {
        return Err(Error::Usage(format!(
            "--streams must be between 1 and {MAX_STREAMS}"
        )));
    }
    let mut local = Vec::new();
    for p in paths {
        match parse_location(p.as_os_str()).map_err(|e| Error::Usage(e.0))? {
            Location::Local(p) => local.push(p),
            Location::Remote(_) => {
                return Err(Error::Usage(
                    "probe measures copies on this host only: host:path is not supported".into(),
                ))
            }
        }
    }
    let Some(dest) = local.pop().filter(|_| !local.is_empty()) else {
        return Err(Error::Usage("probe needs SRC... DST".into()));
    };
    Ok(Probe {
        sources: local,
        dest,
        streams,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_paths_are_taken_and_far_ones_refused() {
        let p = probe(&["/a".into(), "b".into(), "/dst".into()], 4).unwrap();
        assert_eq!(p.sources, [PathBuf::from("/a"), PathBuf::from("b")]);
        assert_eq!(p.dest, PathBuf::from("/dst"));
        for bad in [&["/a", "db2:/x"][..], &["/a"], &["h:/a", "/b"]] {
            let paths: Vec<PathBuf> = bad.iter().map(PathBuf::from).collect();
            assert!(probe(&paths, 4).is_err(), "{bad:?}");
        }
        assert!(probe(&["/a".into(), "/b".into()], 0).is_err());
    }
}
