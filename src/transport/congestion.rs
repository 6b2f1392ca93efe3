//! Congestion control per connection: haul's TCP connections ask for BBR where the kernel
//! offers it, whatever the host's default, and `--cc NAME` chooses another.
//!
//! Why: a loss-based algorithm (cubic, reno) halves its window at every lost segment, so on
//! a long path with a little random loss one stream moves a few percent of the link (50 ms
//! with 0.1% loss: cubic 22 Mbit/s of 1 Gbit/s, BBR 890; WANLAB.md), and even 16 cubic
//! streams stay under a third of it. BBR paces at the rate it measures and does not take
//! random loss for congestion.
//!
//! The kernel decides what a process may use: root any algorithm in
//! `tcp_available_congestion_control` (loaded), others those in
//! `tcp_allowed_congestion_control`. The preference is best effort (a refusal keeps the
//! host's default and is reported by [`describe`]); a name given with `--cc` must take.
//!
//! Not here: socket buffers. haul never sets `SO_SNDBUF`/`SO_RCVBUF`, which would turn off
//! the kernel's autotuning and cap a stream's window far below a long path's
//! bandwidth-delay product.

use std::io;
use std::net::TcpStream;

/// What haul asks for when the user names nothing.
pub const PREFERRED: &str = "bbr";

/// The longest name the kernel takes (`TCP_CA_NAME_MAX` is 16 with the NUL).
const NAME_MAX: usize = 15;

/// Best effort: switches `sock` to [`PREFERRED`] unless it already uses it. A kernel that
/// lacks it, or refuses it to this user, leaves the host's default.
pub(super) fn prefer(sock: &TcpStream) {
    if rustix::net::sockopt::tcp_congestion(sock).is_ok_and(|c| c != PREFERRED) {
        let _ = rustix::net::sockopt::set_tcp_congestion(sock, PREFERRED);
    }
}

/// Switches `sock` to `name`; the error says what the kernel offers.
pub(super) fn set(sock: &TcpStream, name: &str) -> io::Result<()> {
    rustix::net::sockopt::set_tcp_congestion(sock, name).map_err(|e| refused(name, e))
}

/// The algorithm `sock` uses.
pub(super) fn get(sock: &TcpStream) -> Option<String> {
    rustix::net::sockopt::tcp_congestion(sock).ok()
}

/// Whether the kernel lets this process use `name`: asked of a socket of our own before
/// anything is dialed, so that a refusal ends the run before a connection is made.
pub fn check_usable(name: &str) -> io::Result<()> {
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
    rustix::net::sockopt::set_tcp_congestion(&sock, name).map_err(|e| refused(name, e))
}

fn refused(name: &str, e: rustix::io::Errno) -> io::Error {
    io::Error::new(
        io::Error::from(e).kind(),
        format!(
            "congestion control '{name}' refused by the kernel ({e}); {}",
            offered()
        ),
    )
}

/// rsync's `--cc` is `--checksum-choice`: the names it takes.
const RSYNC_CHECKSUMS: [&str; 8] = [
    "auto", "xxh128", "xxh3", "xxh64", "xxhash", "md5", "md4", "sha1",
];

/// Checks the syntax of a name given with `--cc` (what the kernel offers is known only
/// when a connection asks), and tells rsync's `--cc` (a checksum choice) apart.
pub fn check_name(name: &str) -> Result<(), String> {
    if RSYNC_CHECKSUMS.contains(&name) {
        return Err(format!(
            "--cc {name}: rsync's --cc (--checksum-choice) is not needed: every block is \
             verified with keyed BLAKE3; haul's --cc is the TCP congestion control (e.g. bbr)"
        ));
    }
    let ok = !name.is_empty()
        && name.len() <= NAME_MAX
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "invalid --cc '{}': a kernel congestion control name such as bbr or cubic",
            name.escape_debug()
        ))
    }
}

/// The host's default algorithm, as new sockets get it.
pub fn host_default() -> Option<String> {
    read_list("tcp_congestion_control").into_iter().next()
}

/// Why the data connections use `chosen` (for `-v` and `--json`); `asked`: it was named
/// with `--cc`.
pub fn why(chosen: &str, asked: bool) -> String {
    let host = host_default().unwrap_or_else(|| "unknown".into());
    if asked {
        format!("--cc; the host's default is {host}")
    } else if chosen == PREFERRED && host == PREFERRED {
        "haul's choice, also the host's default".into()
    } else if chosen == PREFERRED {
        format!("haul's choice; the host's default is {host}")
    } else {
        format!(
            "the host's default: {PREFERRED} is not offered to haul ({})",
            offered()
        )
    }
}

/// "available: …; allowed without privilege: …" from /proc.
fn offered() -> String {
    format!(
        "available: {}; allowed without privilege: {}",
        read_list("tcp_available_congestion_control").join(" "),
        read_list("tcp_allowed_congestion_control").join(" ")
    )
}

fn read_list(name: &str) -> Vec<String> {
    std::fs::read_to_string(format!("/proc/sys/net/ipv4/{name}"))
        .map(|s| s.split_whitespace().map(str::to_owned).collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (b, _) = l.accept().unwrap();
        (a, b)
    }

    #[test]
    fn a_connection_gets_bbr_where_the_kernel_offers_it() {
        let (a, _b) = pair();
        prefer(&a);
        let offered = read_list("tcp_available_congestion_control");
        let got = get(&a).unwrap();
        if offered.iter().any(|c| c == PREFERRED) && rustix::process::geteuid().is_root() {
            assert_eq!(got, PREFERRED);
        } else {
            assert_eq!(Some(got), host_default());
        }
    }

    #[test]
    fn a_named_algorithm_takes_or_says_what_is_offered() {
        let (a, _b) = pair();
        set(&a, "reno").unwrap();
        assert_eq!(get(&a).unwrap(), "reno");
        let e = set(&a, "nosuchcc").unwrap_err().to_string();
        assert!(
            e.contains("'nosuchcc' refused") && e.contains("available: "),
            "{e}"
        );
        assert!(check_usable("reno").is_ok());
        assert_eq!(check_usable("nosuchcc").unwrap_err().to_string(), e);
    }

    #[test]
    fn the_reason_says_whose_choice_it_was() {
        assert!(why("cubic", true).starts_with("--cc; the host's default is "));
        let host = host_default().unwrap();
        let auto = why(PREFERRED, false);
        assert!(auto.starts_with("haul's choice"), "{auto}");
        assert_eq!(
            auto.contains(&format!("default is {host}")),
            host != PREFERRED
        );
        assert!(why("reno", false).contains("bbr is not offered to haul (available: "));
    }

    #[test]
    fn names_are_checked_for_syntax() {
        assert!(check_name("bbr").is_ok());
        assert!(check_name("cubic").is_ok());
        assert!(check_name("").is_err());
        assert!(check_name("a/b").is_err());
        assert!(check_name("sixteen-chars-xx").is_err());
        let rsync = check_name("xxh128").unwrap_err();
        assert!(
            rsync.contains("rsync's --cc (--checksum-choice) is not needed"),
            "{rsync}"
        );
    }
}
