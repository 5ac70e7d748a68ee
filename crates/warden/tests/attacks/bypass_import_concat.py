# Gets `os` past an import allow-list with a built name, then tries the host.
import json
os = __import__('o' + 's')
for path in ["/etc/shadow", "/root"]:
    print(path, os.path.exists(path))
    if path == "/etc/shadow" and os.path.exists(path):
        try:
            if "root:" in open(path).read():
                print("BROKEN: read", path)
        except OSError as e:
            print(path, e.strerror)
try:
    fd = os.open("/usr/pwned", os.O_CREAT | os.O_WRONLY)
    print("BROKEN: wrote /usr/pwned")
except OSError as e:
    print("write", e.strerror)
print("ATTEMPTED")
