# Hard-links files from outside the output folder (the root filesystem, /tmp) into it.
import os
os.makedirs("output", exist_ok=True)
for src in ["/etc/passwd", "/usr/bin/env", "/etc/hostname"]:
    try:
        os.link(src, f"output/{os.path.basename(src)}")
        print("linked", src)
    except OSError as e:
        print(src, e.strerror)
open("/tmp/outside.txt", "w").write("from tmp")
try:
    os.link("/tmp/outside.txt", "output/outside.txt")
    print("linked /tmp/outside.txt")
except OSError as e:
    print("/tmp/outside.txt", e.strerror)
print("ATTEMPTED")
