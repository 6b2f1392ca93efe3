//! `--json`'s one object per run. The commands hand their summary object here instead of
//! printing it, and [`finish`] prints it once the run's outcome is known, ended with its
//! `exit_code` (and `error` when it is not 0); a run that failed before it had a summary
//! gets `{"error":…,"exit_code":N}`. So every path out of a run, a partial one, a failed
//! replica or an error after the summary, prints exactly one object.
//!
//! Process-wide, as stdout is: one run per process.

use std::sync::Mutex;

use crate::error::{Error, Result};
use crate::progress::{failure_json, with_outcome};

/// The summary object of this run, and whether it goes to stderr (a stream on stdout).
static HELD: Mutex<Option<(String, bool)>> = Mutex::new(None);

/// Keeps `json` (one object) as this run's summary, replacing an earlier one.
pub(super) fn hold(json: String, on_stderr: bool) {
    *HELD.lock().unwrap_or_else(|e| e.into_inner()) = Some((json, on_stderr));
}

/// Prints this run's one object for the outcome `r`; `on_stderr`: where a failure without
/// a summary goes.
pub(super) fn finish(r: &Result<()>, on_stderr: bool) {
    let held = HELD.lock().unwrap_or_else(|e| e.into_inner()).take();
    let line = match (held, r) {
        (None, Ok(())) => return,
        (None, Err(e)) => (failure_json(&e.to_string(), e.exit_code()), on_stderr),
        (Some((json, to_stderr)), Ok(())) => (with_outcome(&json, 0, None), to_stderr),
        // Already said: each failed replica's line, and the object's `replicas`.
        (Some((json, to_stderr)), Err(e @ Error::Reported { .. })) => {
            (with_outcome(&json, e.exit_code(), None), to_stderr)
        }
        (Some((json, to_stderr)), Err(e)) => (
            with_outcome(&json, e.exit_code(), Some(&e.to_string())),
            to_stderr,
        ),
    };
    print(&line.0, line.1);
}

/// Prints one object on its line, on stdout or (`on_stderr`) stderr.
pub(super) fn print(line: &str, on_stderr: bool) {
    match on_stderr {
        true => eprintln!("{line}"),
        false => crate::stdio::println(line),
    }
}
