# Reads the host's password hashes.
for path in ["/etc/shadow", "/etc/gshadow", "/etc/sudoers"]:
    try:
        data = open(path).read()
        if "root:" in data or "ALL" in data:
            print("BROKEN: read", path, data[:40])
    except OSError as e:
        print(path, e.strerror)
print("ATTEMPTED")
