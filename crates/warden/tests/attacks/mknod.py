# Creates device nodes for the disk, memory and a null device in writable places. Making one
# is a promise broken ("made a device node"); reading the disk or memory through one, a breach.
import os, stat
for path, major, minor in [("/workspace/sda", 8, 0), ("/tmp/mem", 1, 1), ("/dev/shm/null2", 1, 3)]:
    try:
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(major, minor))
        print("made a device node", path)
        try:
            data = open(path, "rb").read(1)
            if minor != 3:
                print("BROKEN: read the device node", path, data)
        except OSError as e:
            print(path, "made but not usable:", e.strerror)
    except OSError as e:
        print(path, e.strerror)
print("ATTEMPTED")
