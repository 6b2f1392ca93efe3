//! Paths: `SafeRelPath::parse` / `join` / `split_last` on wire bytes, and the command-line
//! parsers `config::parse_location` and `config::split_command`.
#![no_main]

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Component;

use haul::config::{parse_location, split_command};
use haul::protocol::SafeRelPath;
use libfuzzer_sys::fuzz_target;

fn check_safe(p: &SafeRelPath) {
    // A safe path never escapes: no absolute start, no `..`, no `.`, no empty names.
    let comps = p.as_path().components();
    for c in comps.filter(|_| !p.is_root()) {
        assert!(
            matches!(c, Component::Normal(_)),
            "unsafe component {c:?} in {:?}",
            p.display()
        );
    }
    for c in p.components() {
        assert!(!c.is_empty() && c != b"." && c != b".." && !c.contains(&b'/'));
    }
    let _ = p.display();
    if let Some((parent, name)) = p.split_last() {
        let back = parent.join(name).expect("re-joining a split path");
        assert_eq!(back.as_bytes(), p.as_bytes());
    } else {
        assert!(p.is_root());
    }
    assert_eq!(SafeRelPath::parse(p.as_bytes()).ok().as_ref(), Some(p));
}

fuzz_target!(|data: &[u8]| {
    if let Ok(p) = SafeRelPath::parse(data) {
        check_safe(&p);
    }
    // The input split at its first NUL: a parsed base path joined with a name.
    if let Some(i) = data.iter().position(|&b| b == 0) {
        // `join` refuses a name containing '/' (or empty, `.`, `..`): whatever it
        // accepts must be a safe path whose last name is exactly `name`.
        let name = &data[i + 1..];
        if let Ok(base) = SafeRelPath::parse(&data[..i]) {
            if let Ok(j) = base.join(name) {
                check_safe(&j);
                let (parent, last) = j.split_last().expect("a joined path has a last name");
                assert_eq!(last, name);
                assert_eq!(parent.as_bytes(), base.as_bytes());
            } else {
                assert!(
                    name.is_empty()
                        || name == b"."
                        || name == b".."
                        || name.contains(&b'/')
                        || name.contains(&0)
                        || name.len() > 255
                        || base.as_bytes().len() + 1 + name.len() > 4096,
                    "join refused a plain name {name:?}"
                );
            }
        }
    }
    if let Ok(loc) = parse_location(OsStr::from_bytes(data)) {
        let _ = format!("{loc:?}");
        if let haul::config::Location::Remote(r) = &loc {
            let _ = r.ssh_destination();
            let _ = r.path_or_home();
            let _ = r.to_string();
        }
    }
    if let Ok(s) = std::str::from_utf8(data) {
        let _ = split_command(s);
    }
});
