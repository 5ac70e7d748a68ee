# Writes to the root filesystem and host places.
import os
for path in ["/usr/pwned", "/etc/pwned", "/pwned", "/bin/pwned", "/lib/pwned", "/proc/sys/kernel/hostname", "/proc/sysrq-trigger"]:
    try:
        with open(path, "w") as f:
            f.write("c" if "sysrq" in path else "x")
        print("BROKEN: wrote", path)
    except OSError as e:
        print(path, e.strerror)
for d in ["/usr", "/etc"]:
    try:
        os.chmod(d, 0o777)
        print("BROKEN: chmod", d)
    except OSError as e:
        print("chmod", d, e.strerror)
print("ATTEMPTED")
