//! `haul copy` to or from an object store: runs `object::copy` and prints its summary.

use std::time::Instant;

use crate::config::{Config, ObjectCopy, ObjectPlan};
use crate::error::Result;
use crate::progress::summary_line;

/// Runs the copy and says, unless `--quiet`, what moved and what was already there.
pub fn run(job: &ObjectCopy, cfg: &Config) -> Result<()> {
    let started = Instant::now();
    let r = crate::object::copy(job)?;
    if !cfg.quiet {
        let verb = match job.plan {
            ObjectPlan::Up { .. } => "sent",
            ObjectPlan::Down { .. } => "received",
        };
        let line = summary_line(verb, r.sent_objects, r.sent_bytes, None, started);
        let manifest = match (&job.plan, r.manifest_written) {
            (ObjectPlan::Up { .. }, true) => ", manifest written",
            (ObjectPlan::Up { .. }, false) => ", manifest unchanged",
            _ => "",
        };
        eprintln!("{line}, {} unchanged{manifest}", r.unchanged);
    }
    Ok(())
}
