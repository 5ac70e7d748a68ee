# Asks for allowed names whose DNS answers are what the gateway must never dial (DNS rebinding):
# rebind.test (loopback, metadata, the LAN, non-public IPv6) and private.test (the LAN), over
# HTTP and TLS, each at the LAN address its answer gives and at the allowed public address.
# prelude: gateway
for name in ["rebind.test", "private.test"]:
    for addr in [PRIVATE, API]:
        for port, sni in [(80, None), (443, name)]:
            refused(f"{name}@{addr}:{port}", request(addr, port, get("/d1", name), sni=sni, t=5))
print("ATTEMPTED")
