# Goes out over IPv6: literals of a server of the test internet (HTTP, TLS without SNI) and of
# an address without a route, a refused name at an IPv6 address, an allowed one there.
# prelude: gateway
refused("v6_literal", request(API6, 80, get("/c1", f"[{API6}]")))
refused("v6_tls_no_sni", request(API6, 443, get("/c2", f"[{API6}]"), sni=""))
refused("v6_other_name", request(API6, 80, get("/c3", "other.test")))
refused("v6_unrouted", request("2001:db8:ffff::1", 80, get("/c4", "[2001:db8:ffff::1]"), t=5))
only_api("v6_allowed_name", request(API6, 80, get("/c5", "api.test")))
print("ATTEMPTED")
