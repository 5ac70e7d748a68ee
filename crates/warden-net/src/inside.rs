//! The sandbox's side of the link, configured by the sandbox's init from inside its own
//! network namespace (it holds CAP_NET_ADMIN there, and only there, until it drops every
//! capability): the IPv4 and IPv6 addresses, the link up with ARP (and so neighbour
//! discovery and duplicate address detection) off, the default routes via the host end.
//! Plain ioctls, no process started.
//!
//! Invariant: only the interface the host moved into the namespace ([`crate::plan::SANDBOX_IF`])
//! is touched, and only its addresses, its flags and the two default routes are set.

use crate::plan::{Interface, SANDBOX_IF};
use std::io;
use std::net::{Ipv4Addr, Ipv6Addr};

/// `struct in6_rtmsg` (linux/ipv6_route.h), the argument of SIOCADDRT on an AF_INET6 socket.
#[repr(C)]
struct In6Rtmsg {
    dst: libc::in6_addr,
    src: libc::in6_addr,
    gateway: libc::in6_addr,
    kind: u32,
    dst_len: u16,
    src_len: u16,
    metric: u32,
    info: libc::c_ulong,
    flags: u32,
    ifindex: libc::c_int,
}

// The kernel's layout (x86_64 and aarch64: three 16-byte addresses, 4 + 2 + 2 + 4, an 8-byte
// aligned `unsigned long`, 4 + 4).
#[cfg(target_pointer_width = "64")]
const _: () = assert!(std::mem::size_of::<In6Rtmsg>() == 80);

fn in6(ip: Ipv6Addr) -> libc::in6_addr {
    libc::in6_addr {
        s6_addr: ip.octets(),
    }
}

fn sockaddr(ip: Ipv4Addr) -> libc::sockaddr {
    let sin = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: 0,
        sin_addr: libc::in_addr {
            s_addr: u32::from(ip).to_be(),
        },
        sin_zero: [0; 8],
    };
    // SAFETY: sockaddr_in and sockaddr have the same size on Linux; the bytes are a valid
    // sockaddr of family AF_INET.
    unsafe { std::mem::transmute::<libc::sockaddr_in, libc::sockaddr>(sin) }
}

struct Socket(libc::c_int);

impl Drop for Socket {
    fn drop(&mut self) {
        // SAFETY: closing a descriptor we own.
        unsafe { libc::close(self.0) };
    }
}

fn ifreq(name: &str) -> libc::ifreq {
    // SAFETY: an all-zero ifreq is valid.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(name.as_bytes()) {
        *dst = *src as libc::c_char;
    }
    req
}

fn ioctl<T>(sock: &Socket, op: libc::c_ulong, arg: &mut T) -> io::Result<()> {
    // SAFETY: `arg` is the structure this ioctl expects, valid for reads and writes.
    if unsafe { libc::ioctl(sock.0, op as _, arg as *mut T) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Sets the IPv4 and IPv6 addresses, brings the link up with ARP off and adds both default
/// routes.
pub fn configure(iface: &Interface) -> io::Result<()> {
    let socket = |family: libc::c_int| {
        // SAFETY: plain socket creation.
        let fd = unsafe { libc::socket(family, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Socket(fd))
    };
    let sock = socket(libc::AF_INET)?;
    let sock6 = socket(libc::AF_INET6)?;
    let mut req = ifreq(SANDBOX_IF);
    req.ifr_ifru.ifru_addr = sockaddr(iface.address);
    ioctl(&sock, libc::SIOCSIFADDR, &mut req)?;
    let mask = if iface.prefix == 0 {
        0
    } else {
        u32::MAX << (32 - iface.prefix as u32)
    };
    let mut req = ifreq(SANDBOX_IF);
    req.ifr_ifru.ifru_netmask = sockaddr(Ipv4Addr::from(mask));
    ioctl(&sock, libc::SIOCSIFNETMASK, &mut req)?;
    let mut req = ifreq(SANDBOX_IF);
    ioctl(&sock, libc::SIOCGIFFLAGS, &mut req)?;
    // ARP off before the link comes up: no ARP, no neighbour discovery and no duplicate
    // address detection (both ends have the slot's MAC address and send every frame to it).
    // SAFETY: SIOCGIFFLAGS filled the flags member of the union.
    unsafe {
        req.ifr_ifru.ifru_flags |=
            (libc::IFF_UP | libc::IFF_RUNNING | libc::IFF_NOARP) as libc::c_short;
    }
    ioctl(&sock, libc::SIOCSIFFLAGS, &mut req)?;
    let mut req = ifreq(SANDBOX_IF);
    ioctl(&sock, libc::SIOCGIFINDEX, &mut req)?;
    // SAFETY: SIOCGIFINDEX filled the index member of the union.
    let ifindex = unsafe { req.ifr_ifru.ifru_ifindex };
    let mut addr6 = libc::in6_ifreq {
        ifr6_addr: in6(iface.address6),
        ifr6_prefixlen: iface.prefix6 as u32,
        ifr6_ifindex: ifindex,
    };
    ioctl(&sock6, libc::SIOCSIFADDR, &mut addr6)?;
    // SAFETY: an all-zero rtentry is valid; the fields are set below.
    let mut route: libc::rtentry = unsafe { std::mem::zeroed() };
    route.rt_dst = sockaddr(Ipv4Addr::UNSPECIFIED);
    route.rt_genmask = sockaddr(Ipv4Addr::UNSPECIFIED);
    route.rt_gateway = sockaddr(iface.gateway);
    route.rt_flags = libc::RTF_UP | libc::RTF_GATEWAY;
    ioctl(&sock, libc::SIOCADDRT, &mut route)?;
    let mut route6 = In6Rtmsg {
        dst: in6(Ipv6Addr::UNSPECIFIED),
        src: in6(Ipv6Addr::UNSPECIFIED),
        gateway: in6(iface.gateway6),
        kind: 0,
        dst_len: 0,
        src_len: 0,
        metric: 1,
        info: 0,
        flags: (libc::RTF_UP | libc::RTF_GATEWAY) as u32,
        ifindex,
    };
    ioctl(&sock6, libc::SIOCADDRT, &mut route6)
}
