# Artifact names that break naive handling: a newline, `..` components, invalid UTF-8,
# terminal escapes, a very long name and a name like an absolute path.
import os
os.makedirs("output/a/b", exist_ok=True)
names = [b"new\nline.txt", b"..x", b"a/../../escape.txt", b"bad\xffname.txt", b"esc\x1b[31mred.txt",
         b"L" * 250, b"...", b"a/b/..%2F..%2Fetc.txt"]
for name in names:
    try:
        with open(b"output/" + name, "wb") as f:
            f.write(b"x")
    except OSError as e:
        print(name[:20], e.strerror)
print("ATTEMPTED")
