# Writes to devices and creates files in /dev.
import os
for path in ["/dev/pwned", "/dev/sda", "/dev/mem", "/dev/kmsg", "/dev/port"]:
    try:
        with open(path, "wb") as f:
            f.write(b"x")
        print("BROKEN: wrote", path)
    except OSError as e:
        print(path, e.strerror)
# /dev/null and friends stay what they are.
open("/dev/null", "wb").write(b"x")
print("null ok")
print("ATTEMPTED")
