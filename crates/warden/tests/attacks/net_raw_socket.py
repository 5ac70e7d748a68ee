# Opens raw and packet sockets (to forge packets or sniff).
import socket
for name, fam, typ, proto in [("raw icmp", socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP),
                              ("raw tcp", socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_TCP),
                              ("packet", socket.AF_PACKET, socket.SOCK_RAW, 0x0300),
                              ("ping", socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP),
                              ("netlink", socket.AF_NETLINK, socket.SOCK_RAW, 0)]:
    try:
        s = socket.socket(fam, typ, proto)
        if name in ("netlink",):
            print(name, "opened (own namespace only)")
        else:
            try:
                s.sendto(b"\x08\x00\xf7\xff\x00\x00\x00\x00", ("8.8.8.8", 0))
                print("BROKEN: sent with", name)
            except OSError as e:
                print(name, "opened but cannot send:", e.strerror)
    except OSError as e:
        print(name, e.strerror)
print("ATTEMPTED")
