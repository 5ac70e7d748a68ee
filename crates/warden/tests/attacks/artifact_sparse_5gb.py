# A 5 GB sparse file in the output folder: no disk used, but a naive reader would read 5 GB.
import os
os.makedirs("output", exist_ok=True)
try:
    with open("output/huge.bin", "wb") as f:
        f.truncate(5 * 10**9)
    print("made", os.stat("output/huge.bin").st_size)
except OSError as e:
    print("truncate", e.strerror)
open("output/small.txt", "w").write("small")
print("ATTEMPTED")
