# The helper every run-time import bypass program (bypass_rt_*.py) uses: the runner puts it in
# place of the program's `# prelude: attempt` line, so that each program, sent alone as the
# sandbox's code, has it. It uses no import of its own: the module it tries comes from the
# program's bypass.


def attempt(m):
    """Uses a module that the allow-list forbids: prints REACHED, and BROKEN only if it got
    past the sandbox's isolation."""
    name = getattr(m, "__name__", "?")
    print("REACHED", name)
    if name == "sys":
        m = m.modules.get("posix") or m
        name = getattr(m, "__name__", "?")
    # A module loaded under another name is known by what it holds.
    if hasattr(m, "Popen") and hasattr(m, "run"):
        name = "subprocess"
    elif hasattr(m, "create_connection") and hasattr(m, "socketpair"):
        name = "socket"
    try:
        if name in ("os", "posix"):
            fd = m.open("/etc/shadow", 0)
            if b"root:" in m.read(fd, 64):
                print("BROKEN: read /etc/shadow")
            for path in ("/root", "/home"):
                if m.listdir(path):
                    print("BROKEN: listed " + path)
        elif name == "socket":
            m.create_connection(("169.254.169.254", 80), timeout=2)
            print("BROKEN: reached the metadata address")
        elif name == "subprocess":
            out = m.run(["cat", "/etc/shadow"], capture_output=True, text=True).stdout
            if "root:" in out:
                print("BROKEN: read /etc/shadow")
        elif name == "ctypes":
            libc = m.CDLL(None)
            if libc.mount(b"none", b"/usr", b"tmpfs", 0, None) == 0:
                print("BROKEN: mounted over /usr")
        elif name in ("_thread", "pickle", "importlib", "marshal"):
            print("module", name, len(dir(m)))
    except (OSError, ValueError) as e:
        print(name, "refused:", type(e).__name__)
