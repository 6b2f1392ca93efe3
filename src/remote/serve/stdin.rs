//! The far end's standard input: the local side's instruction lines, then (once they
//! are read) only a sign of life: its end means the local side is gone.

use std::io::{self, BufRead, Read, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::error::{exit, Error};
use crate::remote::wire::{self, Request};

/// The next request; `Err(None)` at end of input.
pub(super) fn read_request(
    input: &mut impl BufRead,
) -> std::result::Result<Request, Option<Error>> {
    let mut line = Vec::new();
    let n = Read::take(&mut *input, wire::MAX_LINE as u64)
        .read_until(b'\n', &mut line)
        .map_err(|e| Some(Error::io("reading instructions", e)))?;
    if n == 0 {
        return Err(None);
    }
    let text = String::from_utf8_lossy(&line);
    wire::decode(&text).map_err(|m| {
        Some(Error::Protocol(crate::protocol::ProtocolError::Unexpected(
            format!("instructions from the local haul: {m}"),
        )))
    })
}

/// Once the instructions are read, stdin only tells us when the local side is gone.
pub(super) fn watch_stdin(mut input: impl BufRead + Send + 'static, finished: Arc<AtomicBool>) {
    let r = std::thread::Builder::new()
        .name("haul-stdin".into())
        .spawn(move || {
            let mut sink = [0u8; 4096];
            while matches!(input.read(&mut sink), Ok(n) if n > 0) {}
            if !finished.load(Ordering::SeqCst) {
                // Not eprintln!: when the ssh session is gone stderr is closed too, and a
                // failed print would panic this thread before the exit (the far end then
                // listened on for ever).
                let _ = writeln!(io::stderr(), "haul: the local haul went away; stopping");
                // The exit skips the main thread's destructors: its `haul limit` socket.
                crate::signals::run_cleanups();
                std::process::exit(exit::NETWORK);
            }
        });
    // Without the watcher the far end still ends: its connections fail when the local
    // side goes.
    drop(r);
}
