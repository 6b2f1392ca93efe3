//! `send`'s tickets: one receiver, or a chain fan-out (several `--to`, or several
//! `--ticket-file`, in chain order; the two forms are not mixed).

use std::path::PathBuf;

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

/// Fan-out carries files, not streams.
pub(super) fn no_stream_chain(chain: &[TicketFrom]) -> Result<()> {
    match chain.is_empty() {
        true => Ok(()),
        false => Err(Error::Usage(
            "a fan-out (several --to or --ticket-file) sends files, not a stream".into(),
        )),
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
        assert!(no_stream_chain(&rest).is_err());
        assert!(tickets(vec![], vec![]).is_err());
        assert!(tickets(vec!["nonsense".into()], vec![]).is_err());
    }
}
