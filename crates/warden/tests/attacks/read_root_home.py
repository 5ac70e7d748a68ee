# Looks for the host's private places: root's and the users' homes, the engine's state and
# socket, the host's work and cache folders. The image's own files (a container backend's
# root) are readable by design; these are not in any image.
import os
host_only = ["/root/.cargo", "/root/.rustup", "/root/.ssh", "/var/lib/docker", "/var/lib/containerd",
             "/var/run/docker.sock", "/run/docker.sock", "/run/containerd", "/work", "/var/cache/warden"]
for path in host_only:
    try:
        os.stat(path)
        print("BROKEN: sees", path)
    except OSError as e:
        print(path, e.strerror)
for path in ["/root", "/home"]:
    try:
        entries = os.listdir(path)
        print(path, "lists", entries)
        if entries:
            print("BROKEN: listed", path, entries)
    except OSError as e:
        print(path, e.strerror)
print("ATTEMPTED")
