//! The two system calls the standard library does not offer, behind safe functions:
//! listing the host's interface addresses (`getifaddrs`) and waiting for listening sockets
//! to become readable with a timeout (`poll`).
//!
//! All `unsafe` of the transport module is here.
//!
//! Not here: deciding which addresses go into a ticket.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, TcpListener};
use std::os::fd::AsRawFd;
use std::time::Duration;

/// One address of one network interface that is up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct IfAddr {
    /// The address.
    pub ip: IpAddr,
    /// Whether the interface is a loopback interface.
    pub loopback: bool,
}

/// The IPv4 and IPv6 addresses of every interface that is up, in the kernel's order.
pub(super) fn interface_addrs() -> io::Result<Vec<IfAddr>> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: `head` is a valid place for getifaddrs to store the list pointer; on success
    // the list stays valid until the matching freeifaddrs below.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let mut out = Vec::new();
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: `cur` is a non-null node of the list getifaddrs returned, not yet freed.
        let ifa = unsafe { &*cur };
        cur = ifa.ifa_next;
        let up = ifa.ifa_flags & (libc::IFF_UP as libc::c_uint) != 0;
        if ifa.ifa_addr.is_null() || !up {
            continue;
        }
        let loopback = ifa.ifa_flags & (libc::IFF_LOOPBACK as libc::c_uint) != 0;
        // SAFETY: `ifa_addr` is non-null and points to a sockaddr whose `sa_family` tells
        // its real type; we only reinterpret it as sockaddr_in / sockaddr_in6 when the family
        // says so, and those are what the kernel stored for AF_INET / AF_INET6.
        let ip = unsafe {
            match i32::from((*ifa.ifa_addr).sa_family) {
                libc::AF_INET => {
                    let sin = &*(ifa.ifa_addr as *const libc::sockaddr_in);
                    Some(IpAddr::V4(Ipv4Addr::from(u32::from_be(
                        sin.sin_addr.s_addr,
                    ))))
                }
                libc::AF_INET6 => {
                    let sin6 = &*(ifa.ifa_addr as *const libc::sockaddr_in6);
                    Some(IpAddr::V6(Ipv6Addr::from(sin6.sin6_addr.s6_addr)))
                }
                _ => None,
            }
        };
        if let Some(ip) = ip {
            out.push(IfAddr { ip, loopback });
        }
    }
    // SAFETY: `head` came from a successful getifaddrs and is freed exactly once; no
    // reference into the list outlives this point (addresses were copied out).
    unsafe { libc::freeifaddrs(head) };
    Ok(out)
}

/// Waits until one of `listeners` has a connection to accept (`true`) or `timeout` passes
/// (`false`).
pub(super) fn wait_acceptable(listeners: &[TcpListener], timeout: Duration) -> io::Result<bool> {
    let mut fds: Vec<libc::pollfd> = listeners
        .iter()
        .map(|l| libc::pollfd {
            fd: l.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let nfds = libc::nfds_t::try_from(fds.len())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "too many sockets to poll"))?;
    let ms = libc::c_int::try_from(timeout.as_millis()).unwrap_or(libc::c_int::MAX);
    // SAFETY: `fds` holds `nfds` initialised pollfds and lives across the call.
    let r = unsafe { libc::poll(fds.as_mut_ptr(), nfds, ms) };
    if r < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return Ok(false);
        }
        return Err(e);
    }
    Ok(r > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_loopback() {
        let addrs = interface_addrs().unwrap();
        assert!(addrs.iter().any(|a| a.loopback && a.ip.is_loopback()));
    }

    #[test]
    fn poll_times_out_then_sees_a_connection() {
        let l = [
            TcpListener::bind("127.0.0.1:0").unwrap(),
            TcpListener::bind("127.0.0.1:0").unwrap(),
        ];
        assert!(!wait_acceptable(&l, Duration::from_millis(10)).unwrap());
        let _c = std::net::TcpStream::connect(l[1].local_addr().unwrap()).unwrap();
        assert!(wait_acceptable(&l, Duration::from_secs(5)).unwrap());
    }
}
