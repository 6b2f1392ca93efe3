//! `probe SRC... DST`: the paths in `copy`'s forms, checked; what to measure. The sources
//! are on this host; DST may be a far `host:path` (then ssh starts a far end there, as
//! for `copy`).

use std::path::PathBuf;

use super::location::{parse_location, Location};
use crate::error::{Error, Result};
use crate::protocol::MAX_STREAMS;

/// What `haul probe` measures.
#[derive(Clone, Debug)]
pub struct Probe {
    /// The sources, as `copy` would take them.
    pub sources: Vec<PathBuf>,
    /// The destination, as `copy` would take it (it need not exist).
    pub dest: Location,
    /// Data streams the copy would use.
    pub streams: usize,
}

/// Checks `SRC... DST` (local sources; DST local or `host:path`) and the stream count.
pub fn probe(paths: &[PathBuf], streams: usize) -> Result<Probe> {
    if streams == 0 || streams > usize::from(MAX_STREAMS) {
        return Err(Error::Usage(format!(
            "--streams must be between 1 and {MAX_STREAMS}"
        )));
    }
    let Some((dest, sources)) = paths.split_last().filter(|(_, s)| !s.is_empty()) else {
        return Err(Error::Usage("probe needs SRC... DST".into()));
    };
    let mut local = Vec::new();
    for p in sources {
        match parse_location(p.as_os_str()).map_err(|e| Error::Usage(e.0))? {
            Location::Local(p) => local.push(p),
            Location::Remote(_) => {
                return Err(Error::Usage(
                    "probe reads the sources on this host: a far SRC (host:path) is not \
                     supported; run probe on that host"
                        .into(),
                ))
            }
        }
    }
    let dest = parse_location(dest.as_os_str()).map_err(|e| Error::Usage(e.0))?;
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
    fn local_sources_and_a_local_or_far_destination() {
        let p = probe(&["/a".into(), "b".into(), "/dst".into()], 4).unwrap();
        assert_eq!(p.sources, [PathBuf::from("/a"), PathBuf::from("b")]);
        assert_eq!(p.dest, Location::Local(PathBuf::from("/dst")));
        let p = probe(&["/a".into(), "db2:/x".into()], 4).unwrap();
        match p.dest {
            Location::Remote(r) => assert_eq!((r.host.as_str(), &r.path[..]), ("db2", &b"/x"[..])),
            other => panic!("{other:?}"),
        }
        for bad in [&["/a"][..], &["h:/a", "/b"]] {
            let paths: Vec<PathBuf> = bad.iter().map(PathBuf::from).collect();
            assert!(probe(&paths, 4).is_err(), "{bad:?}");
        }
        assert!(probe(&["/a".into(), "/b".into()], 0).is_err());
    }
}
