# Resolves names (DNS is a classic way out) through the system resolver and straight to
# well-known resolvers.
import socket, struct
for name in ["example.com", "pypi.org", "metadata.google.internal"]:
    try:
        print("BROKEN: resolved", name, socket.getaddrinfo(name, 80)[0][4])
    except OSError as e:
        print(name, type(e).__name__)
query = struct.pack(">HHHHHH", 0x1234, 0x0100, 1, 0, 0, 0) + b"\x07example\x03com\x00\x00\x01\x00\x01"
for server in ["8.8.8.8", "1.1.1.1", "127.0.0.53"]:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(2)
    try:
        s.sendto(query, (server, 53))
        print("BROKEN: answer from", server, s.recvfrom(512)[0][:12])
    except OSError as e:
        print(server, type(e).__name__)
print("ATTEMPTED")
