//! What the receiving side keeps of the sender's metadata, from its options: `--no-owner`,
//! `--no-group`, `--no-devices`, `--no-specials`, `-K`, `--chown` (whose names are
//! only checked for form here: the receiving host looks them up) and `--no-xattrs`.

use crate::cli::AcceptArgs;
use crate::error::{Error, Result};
use crate::protocol::{Accept, OwnerSpec};

/// The receiver's policy from `a` and `--no-xattrs` (for `copy` the same option also
/// tells the sender to send none; the receiver still refuses any it gets).
pub(super) fn accept_config(a: &AcceptArgs, no_xattrs: bool) -> Result<Accept> {
    let chown = match &a.chown {
        Some(s) => Some(
            OwnerSpec::parse(s)
                .ok_or_else(|| Error::Usage("--chown needs USER, USER:GROUP or :GROUP".into()))?,
        ),
        None => None,
    };
    Ok(Accept {
        owner: !a.no_owner,
        group: !a.no_group,
        devices: !a.no_devices,
        specials: !a.no_specials,
        keep_dirlinks: a.keep_dirlinks,
        chown,
        xattrs: !no_xattrs,
    })
}
