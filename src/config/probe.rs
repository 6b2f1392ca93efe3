//! `probe SRC... DST`: the paths in `copy`'s forms, checked; what to measure. The sources
//! are on this host, or all on one far host (`host:path`: a pull, or remote to remote);
//! DST may be a far `host:path` (then ssh starts a far end there, as for `copy`), or, with
//! `--to TICKET` / `--ticket-file`, a waiting `haul recv` (then every path is a source).

use std::path::PathBuf;

use super::fanout::TicketFrom;
use super::location::{parse_location, Location, RemotePath};
use super::transfer::{default_streams, LOCAL_STREAMS};
use crate::error::{Error, Result};
use crate::protocol::MAX_STREAMS;
use crate::transport::Ticket;

/// What `haul probe` measures.
#[derive(Debug)]
pub struct Probe {
    /// The sources here, as `copy` would take them (none when they are far).
    pub sources: Vec<PathBuf>,
    /// The sources on a far host (all on one; none when they are here).
    pub far: Vec<RemotePath>,
    /// Where the copy would go.
    pub dest: ProbeDest,
    /// Data streams the copy would use.
    pub streams: usize,
}

/// Where a probed copy would go.
#[derive(Debug)]
pub enum ProbeDest {
    /// A path here or `host:path`, as `copy` would take it (it need not exist).
    Path(Location),
    /// A waiting `haul recv`, as `send` would reach it.
    Ticket(TicketFrom),
}

/// `--to TICKET` (`-`: stdin) or `--ticket-file FILE`, if given (clap refuses both).
pub fn ticket(to: Option<String>, file: Option<PathBuf>) -> Result<Option<TicketFrom>> {
    Ok(match (to, file) {
        (_, Some(f)) => Some(TicketFrom::File(f)),
        (Some(t), None) if t == "-" => Some(TicketFrom::Stdin),
        (Some(t), None) => Some(TicketFrom::Given(Box::new(Ticket::parse(&t)?))),
        (None, None) => None,
    })
}

/// Checks `SRC... DST` (local sources; DST local or `host:path`), or `PATH...` with a
/// ticket, and the stream count: `--streams`, else what the copy would use by default
/// (8 for a copy on this host, [`LOCAL_STREAMS`]).
pub fn probe(
    paths: &[PathBuf],
    streams: Option<usize>,
    ticket: Option<TicketFrom>,
) -> Result<Probe> {
    let (dest, sources) = match ticket {
        Some(t) => (ProbeDest::Ticket(t), paths),
        None => {
            let Some((dest, sources)) = paths.split_last().filter(|(_, s)| !s.is_empty()) else {
                return Err(Error::Usage(
                    "probe needs SRC... DST, or PATH... --to TICKET".into(),
                ));
            };
            let dest = parse_location(dest.as_os_str()).map_err(|e| Error::Usage(e.0))?;
            (ProbeDest::Path(dest), sources)
        }
    };
    let mut local = Vec::new();
    let mut far: Vec<RemotePath> = Vec::new();
    for p in sources {
        match parse_location(p.as_os_str()).map_err(|e| Error::Usage(e.0))? {
            Location::Local(p) => local.push(p),
            Location::Remote(r) => far.push(r),
        }
    }
    let usage = |m: &str| Err(Error::Usage(format!("probe: {m}")));
    if let Some(first) = far.first() {
        if !local.is_empty() {
            return usage("the sources must be all local or all on one host");
        }
        if far.iter().any(|x| !x.same_login(first)) {
            return usage("remote sources must all be on one host (and user)");
        }
        match &dest {
            ProbeDest::Path(Location::Local(_)) => {}
            // Remote to remote: measured on both hosts and between them.
            ProbeDest::Path(Location::Remote(_)) => {}
            ProbeDest::Ticket(_) => {
                return usage("--to: the sources must be on this host (run probe on theirs)")
            }
        }
    }
    let here = far.is_empty() && matches!(dest, ProbeDest::Path(Location::Local(_)));
    let streams = streams.unwrap_or_else(|| match here {
        true => LOCAL_STREAMS,
        false => default_streams(),
    });
    if streams == 0 || streams > usize::from(MAX_STREAMS) {
        return Err(Error::Usage(format!(
            "--streams must be between 1 and {MAX_STREAMS}"
        )));
    }
    Ok(Probe {
        sources: local,
        far,
        dest,
        streams,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn local_sources_and_a_local_or_far_destination() {
        let p = probe(&["/a".into(), "b".into(), "/dst".into()], Some(4), None).unwrap();
        assert_eq!(p.sources, [PathBuf::from("/a"), PathBuf::from("b")]);
        assert!(matches!(p.dest, ProbeDest::Path(Location::Local(d)) if d == Path::new("/dst")));
        let p = probe(&["/a".into(), "db2:/x".into()], Some(4), None).unwrap();
        match p.dest {
            ProbeDest::Path(Location::Remote(r)) => {
                assert_eq!((r.host.as_str(), &r.path[..]), ("db2", &b"/x"[..]))
            }
            other => panic!("{other:?}"),
        }
        let p = probe(
            &["h:/a".into(), "h:b/".into(), "/dst".into()],
            Some(4),
            None,
        )
        .unwrap();
        assert!(p.sources.is_empty());
        assert_eq!(p.far.len(), 2);
        assert_eq!(
            (p.far[0].host.as_str(), &p.far[1].path[..]),
            ("h", &b"b/"[..])
        );
        // Remote to remote, as for copy (one host may be both).
        for between in [["h:/a", "g:/b"], ["h:/a", "h:/b"]] {
            let paths: Vec<PathBuf> = between.iter().map(PathBuf::from).collect();
            let p = probe(&paths, Some(4), None).unwrap();
            assert!(p.sources.is_empty() && p.far.len() == 1);
            assert!(matches!(p.dest, ProbeDest::Path(Location::Remote(_))));
        }
        let bad: [&[&str]; 3] = [&["/a"], &["h:/a", "g:/b", "/c"], &["h:/a", "/b", "/c"]];
        for bad in bad {
            let paths: Vec<PathBuf> = bad.iter().map(PathBuf::from).collect();
            assert!(probe(&paths, Some(4), None).is_err(), "{bad:?}");
        }
        assert!(probe(&["/a".into(), "/b".into()], Some(0), None).is_err());
    }

    #[test]
    fn with_a_ticket_every_path_is_a_source() {
        let t = || ticket(Some("-".into()), None).unwrap();
        let p = probe(&["/a".into()], Some(4), t()).unwrap();
        assert_eq!(p.sources, [PathBuf::from("/a")]);
        assert!(matches!(p.dest, ProbeDest::Ticket(TicketFrom::Stdin)));
        let p = probe(&["/a".into(), "/b".into()], Some(4), t()).unwrap();
        assert_eq!(p.sources.len(), 2);
        assert!(probe(&["h:/a".into()], Some(4), t()).is_err());
        assert!(matches!(
            ticket(None, Some("/t".into())).unwrap(),
            Some(TicketFrom::File(_))
        ));
        assert!(ticket(Some("haul1-garbage".into()), None).is_err());
        assert!(ticket(None, None).unwrap().is_none());
    }

    #[test]
    fn a_probe_measures_with_the_streams_its_copy_would_use() {
        let streams = |p: &[&str]| {
            let paths: Vec<PathBuf> = p.iter().map(PathBuf::from).collect();
            probe(&paths, None, None).unwrap().streams
        };
        assert_eq!(streams(&["/a", "/dst"]), LOCAL_STREAMS);
        assert_eq!(streams(&["/a", "db2:/x"]), default_streams());
        assert_eq!(streams(&["h:/a", "/dst"]), default_streams());
        let p = probe(&["/a".into()], None, Some(TicketFrom::Stdin)).unwrap();
        assert_eq!(p.streams, default_streams());
    }
}
