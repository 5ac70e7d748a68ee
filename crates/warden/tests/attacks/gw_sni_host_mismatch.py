# Makes the name the gateway decides by and the connection's destination disagree: a refused
# Host at the allowed name's address, an absolute request line or a second Host naming another
# host, a refused SNI at the allowed name's address, an allowed name at the refused one's.
# prelude: gateway
refused("host_other", request(API, 80, get("/a1", "other.test")))
refused("absolute", request(API, 80, b"GET http://other.test/a2 HTTP/1.1\r\nHost: api.test\r\nConnection: close\r\n\r\n"))
refused("two_hosts", request(API, 80, b"GET /a3 HTTP/1.1\r\nHost: api.test\r\nHost: other.test\r\nConnection: close\r\n\r\n"))
refused("sni_other", request(API, 443, get("/a4", "other.test"), sni="other.test"))
# Inside TLS the gateway sees the SNI only: an allowed SNI with another Host inside reaches the
# allowed name's server (domain fronting, docs/threat-model.md), never the other's.
only_api("sni_allowed_at_other", request(OTHER, 443, get("/a5", "other.test"), sni="api.test"))
only_api("host_allowed_at_other", request(OTHER, 80, get("/a6", "api.test")))
print("ATTEMPTED")
