# Looks for the private key of the sandbox's CA (with which the gateway terminates TLS for the
# hosts a secret is bound to, so whoever has it can impersonate them): in the trust bundle and
# in every file it can read where keys are kept and in the memory of every process it can see
# (the gateway's among them, were it visible); then tries to add a CA of its own to the bundle.
import os
bundle = os.environ.get("SSL_CERT_FILE") or "/etc/warden/ca-bundle.pem"
seen = 0
for root in ["/etc/warden", "/run", "/tmp", "/var/run", "/var/lib", "/root", "/home", "/workspace"]:
    for d, dirs, files in os.walk(root):
        for f in files:
            path = os.path.join(d, f)
            try:
                with open(path, "rb") as fh:
                    data = fh.read(1 << 20)
            except OSError:
                continue
            seen += 1
            if b"PRIVATE KEY-----" in data:
                print("BROKEN: a private key in", path)
print("read", seen, "files")


def memory(pid):
    """Whether the first mapping of `pid`'s memory reads, or why not."""
    try:
        start = int(open(f"/proc/{pid}/maps").readline().split("-")[0], 16)
        with open(f"/proc/{pid}/mem", "rb") as fh:
            fh.seek(start)
            fh.read(1)
        return "readable"
    except (OSError, ValueError) as e:
        return type(e).__name__


for pid in sorted(int(p) for p in os.listdir("/proc") if p.isdigit()):
    try:
        cmdline = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ")
    except OSError:
        continue
    mem = memory(pid)
    print("process", pid, cmdline[:60], mem)
    # Warden's own processes (the jail's init is a clone of its helper) are its binary.
    if cmdline.split(b" ")[0].endswith(b"/warden") and mem == "readable":
        print("BROKEN: the memory of a Warden process is readable:", pid, cmdline[:80])
try:
    with open(bundle, "a") as fh:
        fh.write("-----BEGIN CERTIFICATE-----\n")
    print("BROKEN: the CA bundle", bundle, "is writable")
except OSError as e:
    print("bundle", bundle, type(e).__name__)
print("ATTEMPTED")
