//! `haul sst`'s syntax: the one option of its own and, after it, the arguments Galera
//! passes to a `wsrep_sst_<method>` script, kept as given (`config::sst` reads them; the
//! server adds options across versions, which must not make a state transfer fail).

use std::ffi::OsString;
use std::path::PathBuf;

use clap::Args;

/// `haul sst` (Galera's state transfer method `haul`).
#[derive(Debug, Args)]
pub struct SstArgs {
    /// Write the `wsrep_sst_haul` script, which runs this haul, into DIR (one on mariadbd's
    /// PATH, e.g. /usr/bin) and exit.
    #[arg(long, value_name = "DIR")]
    pub install_script: Option<PathBuf>,
    /// What mariadbd passes: `--role joiner|donor --address ADDR --datadir DIR ...`.
    #[arg(
        value_name = "GALERA-ARGS",
        trailing_var_arg = true,
        allow_hyphen_values = true,
        required_unless_present = "install_script"
    )]
    pub args: Vec<OsString>,
}
