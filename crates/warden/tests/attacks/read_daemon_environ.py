# Reads the daemon's environment and command line: by its host pid (given on stdin), and by
# every pid this sandbox can see.
import json, os, sys
daemon = json.load(sys.stdin)["daemon_pid"]
paths = [f"/proc/{daemon}/environ", f"/proc/{daemon}/cmdline"]
for pid in os.listdir("/proc"):
    if pid.isdigit():
        paths += [f"/proc/{pid}/environ", f"/proc/{pid}/cmdline"]
for path in paths:
    try:
        data = open(path, "rb").read()
        # Printed so the runner can look for the daemon's secret in it.
        print(path, data.replace(b"\0", b" ").decode(errors="replace")[:2000])
    except OSError as e:
        print(path, e.strerror)
print("env", " ".join(sorted(os.environ)))
print("ATTEMPTED")
