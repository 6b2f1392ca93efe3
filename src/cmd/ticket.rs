//! Ticket files and tickets read at run time: `recv --ticket-file` writes one safely,
//! `send --ticket-file` / `--to -` reads one (so it never appears in a process listing).

use std::io::Write;
use std::path::Path;

use crate::config::TicketFrom;
use crate::error::{Error, Result};
use crate::transport::Ticket;

/// Writes the ticket to `path`, readable by this user only, atomically and without ever
/// following a link: the line goes to a fresh file with a name no one can guess, created
/// exclusively with O_NOFOLLOW and mode 0600 in `path`'s directory, which is then renamed
/// over `path` (a rename replaces a symlink there; it never writes through it).
pub(super) fn write_ticket_file(path: &Path, line: &str) -> Result<()> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let fail = |e: std::io::Error| {
        Error::Usage(format!(
            "cannot write the ticket file {}: {e}; give --ticket-file a path in a directory \
             you can write",
            crate::progress::escape(&path.display().to_string())
        ))
    };
    let name = path
        .file_name()
        .ok_or_else(|| fail(std::io::Error::other("not a file name")))?;
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let mut made = None;
    for _ in 0..16 {
        let mut r = [0u8; 8];
        getrandom::fill(&mut r).map_err(|e| fail(std::io::Error::other(e.to_string())))?;
        let hex: String = r.iter().map(|b| format!("{b:02x}")).collect();
        let tmp = dir.join(format!(".{}.{hex}.tmp", name.to_string_lossy()));
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&tmp)
        {
            Ok(f) => {
                made = Some((tmp, f));
                break;
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(fail(e)),
        }
    }
    let (tmp, mut f) = made.ok_or_else(|| fail(std::io::Error::other("no free temporary name")))?;
    let r = (|| {
        // The umask can only take bits away; say exactly what the file is.
        f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
        writeln!(f, "{line}")?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if let Err(e) = r {
        let _ = std::fs::remove_file(&tmp);
        return Err(fail(e));
    }
    Ok(())
}

/// The ticket `send` was told to use, read now from stdin or a file if need be (the first
/// line, at most 4 KiB).
pub(super) fn resolve_ticket(from: &TicketFrom) -> Result<Ticket> {
    use std::io::{BufRead, Read};
    let read_line = |r: &mut dyn BufRead, what: &str| -> Result<Ticket> {
        let mut line = String::new();
        r.take(4096)
            .read_line(&mut line)
            .map_err(|e| Error::Usage(format!("cannot read the ticket from {what}: {e}")))?;
        if line.trim().is_empty() {
            return Err(Error::Usage(format!("no ticket in {what}")));
        }
        Ok(Ticket::parse(line.trim())?)
    };
    match from {
        TicketFrom::Given(t) => Ok((**t).clone()),
        TicketFrom::Stdin => {
            use std::io::IsTerminal;
            if std::io::stdin().is_terminal() {
                eprint!("haul: paste the ticket printed by haul recv, then Enter: ");
            }
            read_line(&mut std::io::stdin().lock(), "stdin")
        }
        TicketFrom::File(p) => {
            let shown = crate::progress::escape(&p.display().to_string());
            let f = std::fs::File::open(p)
                .map_err(|e| Error::Usage(format!("cannot read the ticket file {shown}: {e}")))?;
            read_line(&mut std::io::BufReader::new(f), &shown)
        }
    }
}
