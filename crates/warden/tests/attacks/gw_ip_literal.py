# Names no host, so that the address decides: IP literals in Host (the allowed name's own address
# and the refused one's), TLS without SNI (what clients send for an IP literal), no Host at all,
# another protocol (SSH) to the allowed name's address and to the refused one's HTTP port.
# prelude: gateway
refused("ip_host_api", request(API, 80, get("/b1", API)))
refused("ip_host_other", request(OTHER, 80, get("/b2", OTHER)))
refused("tls_no_sni_api", request(API, 443, get("/b3", API), sni=""))
refused("tls_no_sni_other", request(OTHER, 443, get("/b4", OTHER), sni=""))
refused("no_host", request(OTHER, 80, b"GET /b5 HTTP/1.0\r\n\r\n"))
refused("ssh", request(API, 22, b"SSH-2.0-OpenSSH_9.0\r\n", t=5))
refused("ssh_at_http", request(OTHER, 80, b"SSH-2.0-OpenSSH_9.0\r\n", t=5))
print("ATTEMPTED")
