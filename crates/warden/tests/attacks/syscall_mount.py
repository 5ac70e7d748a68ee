# Mounts: a tmpfs over /usr, a bind of / elsewhere, and proc/sysfs of its own.
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
for src, target, fstype, flags in [(b"none", b"/usr", b"tmpfs", 0), (b"/", b"/tmp", None, 4096),
                                   (b"proc", b"/tmp", b"proc", 0), (b"sysfs", b"/tmp", b"sysfs", 0)]:
    os.makedirs("/tmp", exist_ok=True)
    r = libc.mount(src, target, fstype, flags, None)
    if r == 0:
        print("BROKEN: mounted", src, "on", target)
    else:
        print("mount", src, os.strerror(ctypes.get_errno()))
print("ATTEMPTED")
