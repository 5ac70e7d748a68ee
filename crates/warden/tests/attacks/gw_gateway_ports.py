# Talks to the gateway itself, at the address of the sandbox's resolver (the host end of its
# link): the gateway's own port and others there, asking for a refused name, over TLS, and for
# the gateway's own address.
# prelude: gateway
gw = [l.split()[1] for l in open("/etc/resolv.conf") if l.startswith("nameserver")][0]
for port in [15001, 53, 80, 443, 22]:
    refused(f"gateway:{port}", request(gw, port, get("/e1", "other.test"), t=5))
refused("gateway_tls", request(gw, 15001, get("/e2", "other.test"), sni="other.test", t=5))
refused("gateway_itself", request(gw, 15001, get("/e3", gw), t=5))
print("ATTEMPTED")
