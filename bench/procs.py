"""The processes of a daemon, for the benchmarks' counts: what is left under it, which of its
processes perf follows.

A `warden serve` keeps one process of its own for its whole life besides its threads: the fork
server that forks every helper (its environment saying WARDEN_JAIL_HELPER=forks). It is not a sandbox's and is never counted as left behind; the
helpers it forks are."""
import os


def _parents():
    parent = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                parent[int(pid)] = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
    return parent


def _in_forks_mode(pid):
    """Whether `pid`'s environment block says the fork server's mode: the server's, and also
    every helper it forked and their inits (a fork keeps the block; only an exec replaces it)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return b"WARDEN_JAIL_HELPER=forks" in f.read().split(b"\0")
    except OSError:
        return False


def is_fork_server(pid, parent):
    """Whether `pid`, whose parent is `parent`, is a daemon's fork server: in that mode while its
    parent (the daemon) is not."""
    return _in_forks_mode(pid) and not _in_forks_mode(parent)


def descendants(root):
    """Every process under `root` but a daemon's fork server (its children are counted)."""
    children = {}
    for pid, ppid in _parents().items():
        children.setdefault(ppid, []).append(pid)
    out, todo = [], [root]
    while todo:
        parent = todo.pop()
        for c in children.get(parent, []):
            if not is_fork_server(c, parent):
                out.append(c)
            todo.append(c)
    return out


def fork_servers(daemon):
    """The daemon's fork servers (its children in that mode)."""
    return [pid for pid, ppid in _parents().items() if ppid == daemon and is_fork_server(pid, daemon)]
