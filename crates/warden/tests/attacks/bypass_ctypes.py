# Calls libc directly through ctypes: setuid, mount, unshare, and reads the daemon's secrets
# through the host's /proc.
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
print("BROKEN: setuid(0)" if libc.setuid(0) == 0 and os.getuid() == 0 else "setuid refused")
print("made a namespace: unshare(user)" if libc.unshare(0x10000000) == 0 else "unshare refused")
print("BROKEN: mount" if libc.mount(b"none", b"/usr", b"tmpfs", 0, None) == 0 else "mount refused")
fd = libc.open(b"/etc/shadow", 0)
if fd >= 0:
    buf = ctypes.create_string_buffer(64)
    if libc.read(fd, buf, 64) > 0 and b"root:" in buf.value:
        print("BROKEN: read /etc/shadow")
print("ATTEMPTED")
