# Sends UDP to a port the runner listens on at the host's 127.0.0.1 (on stdin) and outside.
import json, socket, sys
port = json.load(sys.stdin)["udp_port"]
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(1)
for host, p in [("127.0.0.1", port), ("172.17.0.1", port), ("8.8.8.8", 53), ("255.255.255.255", 9)]:
    try:
        s.sendto(b"warden-attack", (host, p))
        print("sent to", host, p)
    except OSError as e:
        print(host, type(e).__name__, e.strerror)
try:
    data, peer = s.recvfrom(100)
    print("BROKEN: answer", data, peer)
except OSError as e:
    print("no answer", type(e).__name__)
print("ATTEMPTED")
