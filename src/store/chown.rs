//! `--chown USER:GROUP` on the receiving host: names (or numbers) looked up here, where
//! they mean something, once, when the destination is opened, so that an unknown name or
//! an owner this user may not give fails before anything is sent (rsync's behaviour).
//!
//! Not here: replacing each entry's owner (`protocol::Accept::apply`) and setting it
//! (`fsops::apply_meta_fd`).

use nix::unistd::{getgroups, Gid, Group, Uid, User};

use crate::error::{Error, Result};
use crate::protocol::{Chown, OwnerSpec};

/// `spec` as numbers on this host. A receiver that is not root may name only itself and
/// groups it is in (the kernel allows it no more).
pub(super) fn resolve(spec: &OwnerSpec, as_root: bool) -> Result<Chown> {
    let uid = spec.user.as_deref().map(user_id).transpose()?;
    let gid = spec.group.as_deref().map(group_id).transpose()?;
    if !as_root {
        let me = Uid::effective().as_raw();
        if uid.is_some_and(|u| u != me) {
            return Err(Error::Usage(format!(
                "--chown {}: only root can give files to another user",
                shown(spec)
            )));
        }
        if let Some(g) = gid {
            let mine = getgroups().unwrap_or_default();
            if g != Gid::effective().as_raw() && !mine.iter().any(|m| m.as_raw() == g) {
                return Err(Error::Usage(format!(
                    "--chown {}: only root can give files to a group it is not in",
                    shown(spec)
                )));
            }
        }
    }
    Ok(Chown { uid, gid })
}

fn shown(spec: &OwnerSpec) -> String {
    crate::progress::escape(&format!(
        "{}:{}",
        spec.user.as_deref().unwrap_or(""),
        spec.group.as_deref().unwrap_or("")
    ))
}

fn unknown(what: &str, name: &str) -> Error {
    Error::Usage(format!(
        "--chown: no {what} named {} on the receiving host (give a name it knows, or a number)",
        crate::progress::escape(name)
    ))
}

fn user_id(name: &str) -> Result<u32> {
    if let Ok(n) = name.parse::<u32>() {
        return Ok(n);
    }
    match User::from_name(name) {
        Ok(Some(u)) => Ok(u.uid.as_raw()),
        _ => Err(unknown("user", name)),
    }
}

fn group_id(name: &str) -> Result<u32> {
    if let Ok(n) = name.parse::<u32>() {
        return Ok(n);
    }
    match Group::from_name(name) {
        Ok(Some(g)) => Ok(g.gid.as_raw()),
        _ => Err(unknown("group", name)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(u: Option<&str>, g: Option<&str>) -> OwnerSpec {
        OwnerSpec {
            user: u.map(String::from),
            group: g.map(String::from),
        }
    }

    #[test]
    fn names_and_numbers_resolve_and_unknown_names_fail() {
        let root = resolve(&spec(Some("root"), Some("0")), true).unwrap();
        assert_eq!((root.uid, root.gid), (Some(0), Some(0)));
        let n = resolve(&spec(Some("4321"), None), true).unwrap();
        assert_eq!((n.uid, n.gid), (Some(4321), None));
        let e = resolve(&spec(Some("no-such-user-x"), None), true).unwrap_err();
        assert!(
            e.to_string().contains("no user named no-such-user-x"),
            "{e}"
        );
        let e = resolve(&spec(None, Some("no-such-group-x")), true).unwrap_err();
        assert!(e.to_string().contains("no group named"), "{e}");
    }

    #[test]
    fn a_user_may_name_only_itself_and_its_groups() {
        let me = Uid::effective().as_raw();
        let gid = Gid::effective().as_raw();
        let own = resolve(&spec(Some(&me.to_string()), Some(&gid.to_string())), false).unwrap();
        assert_eq!((own.uid, own.gid), (Some(me), Some(gid)));
        let other = (me + 1).to_string();
        assert!(resolve(&spec(Some(&other), None), false).is_err());
    }
}
