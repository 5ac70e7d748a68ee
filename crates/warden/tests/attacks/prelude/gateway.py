# The helper of the egress gateway's attack programs (gw_*.py): the runner puts it in place of
# the program's `# prelude: gateway` line. The test internet's addresses come on stdin
# (`internet`: api, other, api6, private); requests go out by address, so that the same program
# makes the same connections in the sandbox (where the gateway takes every TCP connection,
# whatever its address) and in its positive control (no gateway: straight to the address).
import json, socket, ssl, sys

NET = json.loads(sys.stdin.read())["internet"]
API, OTHER, API6, PRIVATE = NET["api"], NET["other"], NET["api6"], NET["private"]


def request(addr, port, head, sni=None, t=10):
    """Sends `head` to addr:port (over TLS with `sni` when given, unverified: what matters is
    where it arrives) and returns what came back as text, or "err:" and why."""
    try:
        family = socket.AF_INET6 if ":" in addr else socket.AF_INET
        s = socket.socket(family, socket.SOCK_STREAM)
        s.settimeout(t)
        s.connect((addr, port))
        if sni is not None:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
            s = ctx.wrap_socket(s, server_hostname=sni or None)
        s.sendall(head)
        out = b""
        while True:
            c = s.recv(65536)
            if not c:
                break
            out += c
        return out.decode(errors="replace")[:2000]
    except Exception as e:
        return "err:" + type(e).__name__


def get(path, host, extra=""):
    """An HTTP/1.1 GET head for `path` naming `host`."""
    return f"GET {path} HTTP/1.1\r\nHost: {host}\r\n{extra}Connection: close\r\n\r\n".encode()


def refused(label, answer):
    """A request naming a host the rules refuse: no server may answer it."""
    print(label, answer.splitlines()[0] if answer else "(nothing)")
    if "hello from" in answer:
        print("BROKEN:", label, "was answered:", answer.splitlines()[-1])


def only_api(label, answer):
    """A request the gateway may pass, but to the allowed name's server only."""
    print(label, answer.splitlines()[-1] if answer else "(nothing)")
    if "hello from" in answer and f"hello from {API}\n" not in answer:
        print("BROKEN:", label, "reached", answer.splitlines()[-1])
