"""Fixtures: one real ``warden serve`` for the session, started from the freshly built binary.

The binary is ``WARDEN_BIN``, else ``$CARGO_TARGET_DIR/x86_64-unknown-linux-gnu/debug/warden``, else
``/var/cache/warden/target/x86_64-unknown-linux-gnu/debug/warden``, else ``warden`` on PATH. No daemon, no tests: a
missing binary fails the session rather than skipping anything. The daemon runs code in real
sandboxes, so it needs root, as the project's Rust tests do.
"""

from __future__ import annotations

import os
import shutil
import socket
from pathlib import Path
from typing import AsyncIterator, Iterator, List

import pytest

from warden_sandbox import AISandboxService, AsyncWardenClient, EmbeddedDaemon, WardenClient


def warden_binary() -> str:
    explicit = os.environ.get("WARDEN_BIN")
    if explicit:
        return explicit
    target = os.environ.get("CARGO_TARGET_DIR", "/var/cache/warden/target")
    debug = Path("x86_64-unknown-linux-gnu") / "debug" / "warden"
    for candidate in (Path(target) / debug, Path("/var/cache/warden/target") / debug):
        if candidate.is_file():
            return str(candidate)
    found = shutil.which("warden")
    if found:
        return found
    pytest.fail("no warden binary: build it (cargo build -p warden) or set WARDEN_BIN", pytrace=False)


@pytest.fixture(scope="session")
def warden_bin() -> str:
    return warden_binary()


_SESSION_DAEMON: List[EmbeddedDaemon] = []


@pytest.fixture(scope="session")
def daemon(warden_bin: str) -> Iterator[EmbeddedDaemon]:
    """The session's daemon (four execution slots: tests run one at a time)."""
    d = EmbeddedDaemon(warden_bin, extra_args=["--max-concurrent", "4"])
    d.start()
    _SESSION_DAEMON.append(d)
    yield d
    _SESSION_DAEMON.remove(d)
    d.stop()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A failed test's report carries the end of the session daemon's log."""
    outcome = yield
    report = outcome.get_result()
    if report.failed and _SESSION_DAEMON:
        report.sections.append(("warden serve log (last 3000 characters)", _SESSION_DAEMON[0].log_text()[-3000:]))


@pytest.fixture(scope="session")
def base_url(daemon: EmbeddedDaemon) -> str:
    assert daemon.url is not None
    return daemon.url


@pytest.fixture
async def service(base_url: str) -> AsyncIterator[AISandboxService]:
    svc = AISandboxService(base_url)
    await svc.connect()
    yield svc
    await svc.close()


@pytest.fixture
async def client(base_url: str) -> AsyncIterator[AsyncWardenClient]:
    async with AsyncWardenClient(base_url) as c:
        yield c


@pytest.fixture
def sync_client(base_url: str) -> Iterator[WardenClient]:
    with WardenClient(base_url) as c:
        yield c


@pytest.fixture
def closed_port_url() -> str:
    """A loopback URL where nothing listens (a port just released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"
