# Connects to a TCP service the runner listens on at the host's 127.0.0.1 (port on stdin), and
# to other common local services.
import json, socket, sys
port = json.load(sys.stdin)["tcp_port"]
for host, p in [("127.0.0.1", port), ("127.0.0.1", 2375), ("127.0.0.1", 22), ("localhost", port), ("::1", port), ("172.17.0.1", port), ("172.17.0.1", 2375)]:
    try:
        c = socket.create_connection((host, p), timeout=2)
        c.sendall(b"warden-attack\n")
        c.settimeout(2)
        answer = c.recv(100)
        # The runner's service answers with a token; the sandbox's own loopback has no such
        # service, so an answer means the host was reached.
        print("connected", host, p, answer)
        if b"HOST-SERVICE" in answer:
            print("BROKEN: reached the host's service on", host, p)
    except OSError as e:
        print(host, p, type(e).__name__, e.strerror)
print("ATTEMPTED")
