# Fills the writable places (workspace, /tmp, /dev/shm) until they are full; more than the
# workspace cap (16 MiB) in any of them means the cap did not hold.
import os
for place in ["/workspace", "/tmp", "/dev/shm"]:
    written = 0
    try:
        for i in range(200):
            with open(f"{place}/fill{i}", "wb") as f:
                for _ in range(3):
                    f.write(b"\0" * (1 << 20))
                    written += 1 << 20
    except OSError as e:
        print(place, "full after", written >> 20, "MiB:", e.strerror)
    if written > 64 << 20:
        print("BROKEN: wrote", written >> 20, "MiB to", place)
    for name in os.listdir(place):
        if name.startswith("fill"):
            os.unlink(f"{place}/{name}")
print("ATTEMPTED")
