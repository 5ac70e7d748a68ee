# Reads the host's init through /proc/1 and the host's kernel interfaces.
import os
for path in ["/proc/1/environ", "/proc/1/mem", "/proc/1/maps", "/proc/1/cmdline",
             "/proc/1/root/etc/shadow", "/proc/1/cwd", "/proc/1/root/root",
             "/proc/kcore", "/proc/sysrq-trigger", "/sys/kernel", "/proc/1/ns/mnt"]:
    try:
        if os.path.isdir(path):
            print(path, "lists", len(os.listdir(path)))
        else:
            data = open(path, "rb").read(4096)
            print(path, "read", len(data), data[:60])
    except OSError as e:
        print(path, e.strerror)
init = open("/proc/1/cmdline", "rb").read().split(b"\0")[0]
# The host's init is systemd or similar; inside it must be the sandbox's own init.
if any(name in init for name in [b"systemd", b"/sbin/init", b"dockerd", b"containerd"]):
    print("BROKEN: pid 1 is the host's init", init)
try:
    if os.listdir("/proc/1/root/root"):
        print("BROKEN: the host's /root through /proc/1/root")
except OSError:
    pass
try:
    if "root:" in open("/proc/1/root/etc/shadow").read():
        print("BROKEN: the host's shadow through /proc/1/root")
except OSError:
    pass
print("ATTEMPTED")
