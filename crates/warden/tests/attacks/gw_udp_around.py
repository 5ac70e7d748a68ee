# Goes around the gateway, which takes TCP only: UDP to the test internet's echo, a DNS question
# straight to its DNS server (not the sandbox's resolver), QUIC's first packet to the allowed
# name's address, and UDP to the LAN host.
# prelude: gateway
def udp(addr, port, data, t=2):
    try:
        s = socket.socket(socket.AF_INET6 if ":" in addr else socket.AF_INET, socket.SOCK_DGRAM)
        s.settimeout(t)
        s.sendto(data, (addr, port))
        return "ok:" + repr(s.recv(512)[:40])
    except Exception as e:
        return "err:" + type(e).__name__


query = b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x05other\x04test\x00\x00\x01\x00\x01"
for label, addr, port, data in [
    ("echo", API, 7, b"ping"),
    ("echo6", API6, 7, b"ping"),
    ("dns_direct", API, 53, query),
    ("quic", API, 443, b"\xc0\x00\x00\x00\x01" + b"\x00" * 1195),
    ("lan_echo", PRIVATE, 7, b"ping"),
]:
    answer = udp(addr, port, data)
    print(label, answer)
    if answer.startswith("ok:"):
        print("BROKEN:", label, "answered")
print("ATTEMPTED")
