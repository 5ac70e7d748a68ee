# Makes new namespaces (a user namespace first, where it would be root) with the syscall and
# with the unshare tool: "made a namespace" (the kernel surface they open is what is refused).
import ctypes, os, subprocess
libc = ctypes.CDLL(None, use_errno=True)
CLONE = {"user": 0x10000000, "mnt": 0x00020000, "net": 0x40000000, "pid": 0x20000000, "uts": 0x04000000, "ipc": 0x08000000, "cgroup": 0x02000000}
for name, flag in CLONE.items():
    if os.fork() == 0:
        r = libc.unshare(flag)
        print("unshare", name, "made a namespace" if r == 0 else os.strerror(ctypes.get_errno()), flush=True)
        os._exit(0)
    os.wait()
for cmd in (["unshare", "-r", "id", "-u"], ["unshare", "-U", "true"]):
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=5)
        if p.returncode == 0:
            print("made a namespace: ran", cmd, p.stdout.strip())
        else:
            print(cmd[1], p.stderr.strip()[-60:])
    except (OSError, subprocess.TimeoutExpired) as e:
        print(cmd[1], type(e).__name__)
print("ATTEMPTED")
