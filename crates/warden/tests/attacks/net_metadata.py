# Asks the cloud metadata service for credentials.
import socket
for host, port in [("169.254.169.254", 80), ("169.254.170.2", 80), ("100.100.100.200", 80)]:
    try:
        c = socket.create_connection((host, port), timeout=2)
        c.sendall(b"GET /latest/meta-data/iam/security-credentials/ HTTP/1.0\r\n\r\n")
        print("BROKEN: connected to", host, c.recv(100))
    except OSError as e:
        print(host, type(e).__name__, e.strerror)
print("ATTEMPTED")
