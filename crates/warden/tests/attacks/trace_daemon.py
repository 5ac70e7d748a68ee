# Traces the daemon (its host pid on stdin) every way the kernel offers: ptrace attach and seize,
# process_vm_readv, /proc/<pid>/mem, maps and fd, pidfd_getfd. Any of them working gives the
# sandbox the daemon's memory and descriptors (its secrets and keys).
import ctypes, json, os, sys
daemon = json.load(sys.stdin)["daemon_pid"]
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
PTRACE_ATTACH, PTRACE_DETACH, PTRACE_SEIZE, WALL = 16, 17, 0x4206, 0x40000000
for name, request in [("attach", PTRACE_ATTACH), ("seize", PTRACE_SEIZE)]:
    if libc.ptrace(request, daemon, None, None) == 0:
        print(f"BROKEN: ptrace {name} on the daemon ({daemon})", flush=True)
        if request == PTRACE_ATTACH:
            try:
                os.waitpid(daemon, WALL)  # detach needs the tracee stopped
            except OSError:
                pass
        libc.ptrace(PTRACE_DETACH, daemon, None, None)
    else:
        print("ptrace", name, os.strerror(ctypes.get_errno()))
address = 0x400000
for path in [f"/proc/{daemon}/maps", f"/proc/{daemon}/fd"]:
    try:
        if path.endswith("fd"):
            print("BROKEN: listed the daemon's descriptors", os.listdir(path)[:5])
        else:
            first = open(path).readline()
            address = int(first.split("-")[0], 16)
            print("BROKEN: read the daemon's memory map", first.strip())
    except (OSError, ValueError) as e:
        print(path, getattr(e, "strerror", e))
class Iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
buf = ctypes.create_string_buffer(8)
local, remote = Iovec(ctypes.cast(buf, ctypes.c_void_p), 8), Iovec(address, 8)
r = libc.syscall(310, daemon, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
err = ctypes.get_errno()
# EFAULT comes only after the access check passed (the address was wrong, not the right).
if r >= 0 or err == 14:
    print("BROKEN: process_vm_readv on the daemon", r, os.strerror(err))
else:
    print("process_vm_readv", os.strerror(err))
try:
    with open(f"/proc/{daemon}/mem", "rb") as mem:
        print("BROKEN: opened the daemon's memory", flush=True)
        mem.seek(address)
        mem.read(8)
except OSError as e:
    print("mem", e.strerror)
pidfd = libc.syscall(434, daemon, 0)  # pidfd_open
if pidfd < 0:
    print("pidfd_open", os.strerror(ctypes.get_errno()))
else:
    for fd in range(20):
        got = libc.syscall(438, pidfd, fd, 0)  # pidfd_getfd
        if got >= 0:
            print("BROKEN: took the daemon's descriptor", fd, os.readlink(f"/proc/self/fd/{got}"))
            break
    else:
        print("pidfd_getfd", os.strerror(ctypes.get_errno()))
print("ATTEMPTED")
