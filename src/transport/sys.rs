//! The two system calls the standard library does not offer, behind safe functions:
//! listing the host's interface addresses (`getifaddrs`) and waiting for listening sockets
//! to become readable with a timeout (`poll`).
//!
//! All `unsafe` of the transport module is here.
//!
//! Not here: deciding which addresses go into a ticket.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, TcpListener};
use std::os::fd::{AsRawFd, BorrowedFd};
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

/// Waits until one of `listeners` has a connection to accept (`true`), `timeout` passes
/// or `wake` becomes readable or hung up (`false`).
pub(super) fn wait_acceptable(
    listeners: &[TcpListener],
    wake: Option<BorrowedFd<'_>>,
    timeout: Duration,
) -> io::Result<bool> {
    let mut fds: Vec<libc::pollfd> = listeners
        .iter()
        .map(|l| l.as_raw_fd())
        .chain(wake.map(|w| w.as_raw_fd()))
        .map(|fd| libc::pollfd {
            fd,
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
    let woken = wake.is_some() && fds.last().is_some_and(|f| f.revents != 0);
    Ok(r > 0 && !woken)
}

/// The head of Linux's `struct tcp_info` (linux/tcp.h) up to the chrono counters of 4.10.
/// libc's `tcp_info` stops before `tcpi_delivery_rate`, hence this copy; the layout is
/// the kernel's ABI (fields are only ever appended), and a kernel that returns fewer
/// bytes than a field needs is treated as not knowing it.
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
    /// µs with data to send (the two below included).
    busy_time: u64,
    /// µs of that limited by the peer's receive window.
    rwnd_limited: u64,
    /// µs of that limited by our send buffer.
    sndbuf_limited: u64,
}

/// TCP's latest estimate of a connection's delivery rate (bytes per second acknowledged
/// by the peer, over about a round trip), whether the sender was short of data to send
/// while it was taken (the link then had room to spare), and where the connection's time
/// went so far.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Delivery {
    /// Bytes per second.
    pub rate: u64,
    /// The sample was limited by the application, not by the network or the peer.
    pub app_limited: bool,
    /// The connection's chrono counters (Linux 4.10 and later).
    pub chrono: Option<Chrono>,
}

/// How long, since it opened, a connection had data to send, and why it could not send
/// it faster (`tcpi_busy_time`, `tcpi_rwnd_limited`, `tcpi_sndbuf_limited`). The kernel
/// counts in jiffies (4 ms at HZ=250), so only differences over many writes are precise.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Chrono {
    /// Time with data to send (both limited times below included).
    pub busy: Duration,
    /// Of that, time the peer's receive window was full: the receiver did not keep up.
    pub rwnd_limited: Duration,
    /// Of that, time our send buffer held everything in flight (too small for the path).
    pub sndbuf_limited: Duration,
}

impl Chrono {
    /// The time this sample counts beyond an earlier one of the same connection; zero
    /// per counter where `earlier` is not earlier (another connection).
    pub fn since(&self, earlier: &Chrono) -> Chrono {
        Chrono {
            busy: self.busy.saturating_sub(earlier.busy),
            rwnd_limited: self.rwnd_limited.saturating_sub(earlier.rwnd_limited),
            sndbuf_limited: self.sndbuf_limited.saturating_sub(earlier.sndbuf_limited),
        }
    }
}

/// Bytes of `struct tcp_info` a kernel must return for `delivery_rate`, and for the chrono
/// counters.
const WITH_RATE: usize = std::mem::offset_of!(TcpInfoHead, busy_time);
const WITH_CHRONO: usize = std::mem::size_of::<TcpInfoHead>();

/// `getsockopt(TCP_INFO)`'s delivery rate and chrono counters on `sock`; `None` when the
/// kernel does not report the rate (before Linux 4.9) or the call fails, no chrono
/// counters before 4.10.
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
    if r != 0 {
        return None;
    }
    from_info(&info, len as usize)
}

/// What `len` bytes of `info` the kernel wrote say (see [`delivery`]).
fn from_info(info: &TcpInfoHead, len: usize) -> Option<Delivery> {
    if len < WITH_RATE {
        return None;
    }
    let chrono = (len >= WITH_CHRONO).then(|| Chrono {
        busy: Duration::from_micros(info.busy_time),
        rwnd_limited: Duration::from_micros(info.rwnd_limited),
        sndbuf_limited: Duration::from_micros(info.sndbuf_limited),
    });
    Some(Delivery {
        rate: info.delivery_rate,
        app_limited: info.flags & 1 != 0,
        chrono,
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
        assert!(!wait_acceptable(&l, None, Duration::from_millis(10)).unwrap());
        let _c = std::net::TcpStream::connect(l[1].local_addr().unwrap()).unwrap();
        assert!(wait_acceptable(&l, None, Duration::from_secs(5)).unwrap());
    }

    /// The wake end hung up ends the wait (`false`, so the caller looks at why) however
    /// long the timeout, a connection waiting or not.
    #[test]
    fn poll_returns_when_its_wake_end_hangs_up() {
        use std::os::fd::AsFd;
        let l = [TcpListener::bind("127.0.0.1:0").unwrap()];
        let (wake, woken) = std::os::unix::net::UnixStream::pair().unwrap();
        let hour = Duration::from_secs(3600);
        let _c = std::net::TcpStream::connect(l[0].local_addr().unwrap()).unwrap();
        assert!(wait_acceptable(&l, Some(woken.as_fd()), hour).unwrap());
        drop(wake);
        assert!(!wait_acceptable(&l, Some(woken.as_fd()), hour).unwrap());
        let quiet = [TcpListener::bind("127.0.0.1:0").unwrap()];
        assert!(!wait_acceptable(&quiet, Some(woken.as_fd()), hour).unwrap());
    }

    #[test]
    fn tcp_info_head_matches_the_kernel_layout() {
        assert_eq!(std::mem::offset_of!(TcpInfoHead, u32s), 8);
        assert_eq!(std::mem::offset_of!(TcpInfoHead, pacing_rate), 104);
        assert_eq!(std::mem::offset_of!(TcpInfoHead, delivery_rate), 160);
        assert_eq!(std::mem::offset_of!(TcpInfoHead, busy_time), 168);
        assert_eq!(std::mem::offset_of!(TcpInfoHead, rwnd_limited), 176);
        assert_eq!(std::mem::offset_of!(TcpInfoHead, sndbuf_limited), 184);
        assert_eq!(WITH_CHRONO, 192);
    }

    /// A kernel older than 4.10 returns `struct tcp_info` up to `delivery_rate`: the rate
    /// stands, the chrono counters are unknown (not zero); before 4.9, nothing.
    #[test]
    fn a_shorter_tcp_info_has_no_chrono_counters() {
        let info = TcpInfoHead {
            delivery_rate: 5,
            busy_time: 7,
            rwnd_limited: 3,
            ..TcpInfoHead::default()
        };
        let full = from_info(&info, WITH_CHRONO).expect("rate");
        let chrono = full.chrono.expect("chrono");
        assert_eq!(chrono.busy, Duration::from_micros(7));
        assert_eq!(chrono.rwnd_limited, Duration::from_micros(3));
        let short = from_info(&info, WITH_RATE).expect("rate");
        assert_eq!((short.rate, short.chrono), (5, None));
        assert_eq!(
            from_info(&info, WITH_CHRONO - 1).map(|d| d.chrono),
            Some(None)
        );
        assert!(from_info(&info, WITH_RATE - 1).is_none());
    }

    /// A receiver that stops reading fills the window: the sender's connection counts
    /// receive-window-limited time, which is what the adaptive codec charges to the
    /// receiver instead of the link.
    #[test]
    fn a_receiver_that_does_not_read_shows_as_rwnd_limited() {
        use std::io::{Read, Write};
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (mut b, _) = l.accept().unwrap();
        a.set_nonblocking(true).unwrap();
        let chunk = vec![1u8; 1 << 16];
        let mut w = &a;
        // Fill the receiver's buffer and ours, then give the kernel's 4 ms clock time.
        while w.write(&chunk).is_ok() {}
        let before = delivery(&a)
            .and_then(|d| d.chrono)
            .expect("Linux 4.10 or later");
        std::thread::sleep(Duration::from_millis(100));
        let after = delivery(&a).and_then(|d| d.chrono).expect("chrono");
        let d = after.since(&before);
        assert!(d.rwnd_limited > Duration::ZERO, "{d:?}");
        assert!(d.busy >= d.rwnd_limited, "{d:?}");
        let mut buf = vec![0u8; 1 << 20];
        drop(a);
        while b.read(&mut buf).unwrap() > 0 {}
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
