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

/// The head of Linux's `struct tcp_info` (linux/tcp.h) up to the chrono counters of 4.10.
/// libc's `tcp_info` stops before `tcpi_delivery_rate`, hence this copy; the layout is
/// the kernel's ABI (fields are only ever appended), and a kernel that returns fewer
/// bytes than `delivery_rate` needs is treated as not knowing it.
#[repr(C)]
#[derive(Default)]
struct TcpInfoHead {
    /// state, ca_state, retransmits, probes, backoff, options, snd/rcv_wscale.
    head: [u8; 7],
    /// Bit 0: `tcpi_delivery_rate_app_limited`.
    flags: u8,
    /// rto … total_retrans.
    u32s: [u32; 24],
    pacing_rate: u64,
    max_pacing_rate: u64,
    bytes_acked: u64,
    bytes_received: u64,
    segs: [u32; 6],
    delivery_rate: u64,
}

/// TCP's latest estimate of a connection's delivery rate (bytes per second acknowledged
/// by the peer, over about a round trip), and whether the sender was short of data to
/// send while it was taken (the link then had room to spare).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Delivery {
    /// Bytes per second.
    pub rate: u64,
    /// The sample was limited by the application, not by the network or the peer.
    pub app_limited: bool,
}

/// `getsockopt(TCP_INFO)`'s delivery rate on `sock`; `None` when the kernel does not
/// report it (before Linux 4.9) or the call fails.
pub(super) fn delivery(sock: &std::net::TcpStream) -> Option<Delivery> {
    let mut info = TcpInfoHead::default();
    let mut len = std::mem::size_of::<TcpInfoHead>() as libc::socklen_t;
    // SAFETY: `info` is a plain-old-data struct of `len` bytes that the kernel fills with
    // at most `len` bytes of `struct tcp_info` (whose layout it mirrors); `len` is updated
    // to the number written. No safe wrapper (std, rustix, nix) exposes these fields.
    let r = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut info as *mut TcpInfoHead).cast(),
            &mut len,
        )
    };
    if r != 0 || (len as usize) < std::mem::size_of::<TcpInfoHead>() {
        return None;
    }
    Some(Delivery {
        rate: info.delivery_rate,
        app_limited: info.flags & 1 != 0,
    })
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

    #[test]
    fn tcp_info_head_matches_the_kernel_layout() {
        assert_eq!(std::mem::offset_of!(TcpInfoHead, u32s), 8);
        assert_eq!(std::mem::offset_of!(TcpInfoHead, pacing_rate), 104);
        assert_eq!(std::mem::offset_of!(TcpInfoHead, delivery_rate), 160);
    }

    #[test]
    fn a_connection_that_sent_data_has_a_delivery_rate() {
        use std::io::{Read, Write};
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut a = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (mut b, _) = l.accept().unwrap();
        let t = std::thread::spawn(move || {
            let mut buf = vec![0u8; 1 << 20];
            while b.read(&mut buf).unwrap() > 0 {}
        });
        let chunk = vec![1u8; 1 << 20];
        for _ in 0..16 {
            a.write_all(&chunk).unwrap();
        }
        let d = delivery(&a).expect("Linux 4.9 or later reports a delivery rate");
        assert!(d.rate > 0, "{d:?}");
        drop(a);
        t.join().unwrap();
    }
}
