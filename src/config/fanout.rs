//! `send`'s tickets: one receiver, or a chain fan-out (several `--to`, or several
//! `--ticket-file`, in chain order; the two forms are not mixed).

use std::path::PathBuf;

use super::location::{parse_location, Location, RemotePath};
use crate::error::{Error, Result};
use crate::protocol::MAX_CHAIN;
use crate::transport::Ticket;

/// Where `send` gets its ticket: given on the command line (or HAUL_TICKET), or read
/// when it runs from stdin (`--to -`) or a file (`--ticket-file`), so that it never
/// appears in the process list.
#[derive(Debug)]
pub enum TicketFrom {
    /// Parsed already.
    Given(Box<Ticket>),
    /// One line on standard input.
    Stdin,
    /// The first line of this file.
    File(PathBuf),
}

/// The first receiver's ticket and those of the receivers after it. Each `--to -` reads
/// the next line of standard input.
pub(super) fn tickets(
    to: Vec<String>,
    files: Vec<PathBuf>,
) -> Result<(TicketFrom, Vec<TicketFrom>)> {
    let all: Vec<TicketFrom> = match files.is_empty() {
        false => files.into_iter().map(TicketFrom::File).collect(),
        true => to
            .iter()
            .map(|t| match t.as_str() {
                "-" => Ok(TicketFrom::Stdin),
                t => Ok(TicketFrom::Given(Box::new(Ticket::parse(t)?))),
            })
            .collect::<Result<_>>()?,
    };
    if all.len() > MAX_CHAIN + 1 {
        return Err(Error::Usage(format!(
            "at most {} receivers in one fan-out",
            MAX_CHAIN + 1
        )));
    }
    let mut all = all.into_iter();
    match all.next() {
        Some(first) => Ok((first, all.collect())),
        None => Err(Error::Usage(
            "send needs --to TICKET or --ticket-file".into(),
        )),
    }
}

/// Which copy forms a fan-out works with, for messages.
const FAN_OUT_FORMS: &str = "a fan-out is `haul copy SRC... DST --also host2:DST` (files: SRC \
     local or on one host, DST local or host:DST; a stream: `-` or --from-command to \
     host:FILE) or `haul send SRC --to T1 --to T2`";

/// `--also` on a copy of `form` (a stream from a host or on this host), which does not
/// fan out: refused (exit 2), naming the forms that do and what to run instead.
pub(super) fn no_chain<T>(form: &str, also: &[T]) -> Result<()> {
    match also.is_empty() {
        true => Ok(()),
        false => Err(Error::Usage(format!(
            "--also does not work with {form}: {FAN_OUT_FORMS}; otherwise start `haul recv` \
             on each destination and run `haul send` with a --to for each where the source is"
        ))),
    }
}

/// `copy --also HOST:DST...`: the further destinations of a copy.
pub(super) fn also(also: &[PathBuf]) -> Result<Vec<RemotePath>> {
    if also.len() > MAX_CHAIN {
        return Err(Error::Usage(format!("at most {MAX_CHAIN} --also")));
    }
    also.iter()
        .map(|a| match parse_location(a.as_os_str()) {
            Ok(Location::Remote(r)) => Ok(r),
            Ok(Location::Local(_)) => Err(Error::Usage(format!(
                "--also {}: a further destination is [user@]host:path, not on this host \
                 ({FAN_OUT_FORMS})",
                crate::progress::escape(&a.to_string_lossy())
            ))),
            Err(e) => Err(Error::Usage(e.0)),
        })
        .collect()
}

/// A stream's further destinations are of the first one's kind: each a file (`host:FILE`),
/// or each `host:` with the `--to-command` that every host runs.
pub(super) fn stream_also(dest: &RemotePath, also: &[RemotePath]) -> Result<()> {
    match also
        .iter()
        .find(|a| a.path.is_empty() != dest.path.is_empty())
    {
        None => Ok(()),
        Some(a) => Err(Error::Usage(format!(
            "--also {}: with a stream, every destination is host:FILE, or every one host: with \
             --to-command",
            crate::progress::escape(&format!("{}:{}", a.host, String::from_utf8_lossy(&a.path)))
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn one_or_a_chain_in_order() {
        let (first, rest) = tickets(vec![], vec!["a".into(), "b".into(), "c".into()]).unwrap();
        assert!(matches!(first, TicketFrom::File(p) if p == Path::new("a")));
        assert_eq!(rest.len(), 2);
        assert!(matches!(&rest[1], TicketFrom::File(p) if p == Path::new("c")));
        let (first, rest) = tickets(vec!["-".into(), "-".into()], vec![]).unwrap();
        assert!(matches!(first, TicketFrom::Stdin));
        let e = no_chain("a pull", &rest).unwrap_err().to_string();
        assert!(
            e.contains("a pull") && e.contains("--also host2:DST"),
            "{e}"
        );
        assert!(no_chain::<PathBuf>("a pull", &[]).is_ok());
        assert!(tickets(vec![], vec![]).is_err());
        let a = also(&["db2:/data".into(), "u@db3:x".into()]).unwrap();
        assert_eq!(
            (a[0].host.as_str(), a[1].path.as_slice()),
            ("db2", &b"x"[..])
        );
        assert!(also(&["/local".into()]).is_err());
        assert!(tickets(vec!["nonsense".into()], vec![]).is_err());
    }
}
