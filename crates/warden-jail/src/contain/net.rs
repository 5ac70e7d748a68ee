//! The network namespace starts with only a loopback interface, down; it is brought up so
//! programs can talk to themselves (127.0.0.1 inside is the sandbox's own, not the host's).

use std::io;

pub fn loopback_up() -> io::Result<()> {
    // SAFETY: plain socket creation.
    let sock = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if sock < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: an all-zero ifreq is valid; the name is copied in below.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(b"lo\0") {
        *dst = *src as libc::c_char;
    }
    // SAFETY: `req` is a valid ifreq for SIOCGIFFLAGS / SIOCSIFFLAGS on an open socket.
    let result = unsafe {
        if libc::ioctl(sock, libc::SIOCGIFFLAGS, &mut req) < 0 {
            Err(io::Error::last_os_error())
        } else {
            req.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
            if libc::ioctl(sock, libc::SIOCSIFFLAGS, &req) < 0 {
                Err(io::Error::last_os_error())
            } else {
                Ok(())
            }
        }
    };
    // SAFETY: `sock` is an open descriptor we own.
    unsafe { libc::close(sock) };
    result
}
