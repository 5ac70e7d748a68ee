# Gets a brokered secret's value back through an echo endpoint of its bound host (the documented
# limit, docs/threat-model.md: it works), and tries to make the gateway put the value anywhere
# else: another allowed host, another header to the bound host, plain HTTP to the bound host.
# prelude: gateway
import os
placeholder = os.environ["API_KEY"]


def echoed(label, answer, must_be):
    """Prints the credential headers the server echoed; with `must_be`, BROKEN unless they
    arrived as sent (the gateway put the value where the secret is not bound)."""
    lines = [l for l in answer.splitlines() if l.lower().startswith(("authorization:", "x-api-key:"))]
    print(label, lines or answer[:200])
    if must_be is not None and not any(must_be in l for l in lines):
        print("BROKEN:", label, "did not arrive as sent")


bearer = f"Authorization: Bearer {placeholder}\r\n"
echoed("bound_host_echo", request(API, 443, get("/echo", "api.test", bearer), sni="api.test"), None)
echoed("other_host", request(OTHER, 443, get("/echo", "other.test", bearer), sni="other.test"), placeholder)
echoed("other_header", request(API, 443, get("/echo", "api.test", f"X-Api-Key: {placeholder}\r\n"), sni="api.test"), placeholder)
echoed("plain_http", request(API, 80, get("/echo", "api.test", bearer)), placeholder)
print("ATTEMPTED")
