"""Fixtures of the E2B drop-in's suite: real ``warden serve`` daemons (the freshly built debug
binary, ``WARDEN_BIN``), driven by the OFFICIAL E2B SDKs (``e2b-code-interpreter`` 2.11.0 over
``e2b`` 2.63.0, installed by scripts/setup-e2b-sdk.sh), configured only by E2B's environment
variables, as an agent would be.

No binary, no tests: a missing binary fails the session. The daemon runs code in real
sandboxes, so it needs root, as the project's other daemon tests do.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Iterator, List, Optional

import httpx
import pytest

HERE = Path(__file__).resolve().parent
SETTINGS = HERE / "settings.toml"
_LISTENING = re.compile(r"listening on (http://\S+)")

# Two Warden API keys in E2B's form (`e2b_` + hex), for the keyed daemon.
KEY_A = "e2b_" + "a1" * 20
KEY_B = "e2b_" + "b2" * 20


def warden_binary() -> str:
    explicit = os.environ.get("WARDEN_BIN")
    if explicit:
        return explicit
    target = os.environ.get("CARGO_TARGET_DIR", "/var/cache/warden/target")
    candidate = Path(target) / "x86_64-unknown-linux-gnu" / "debug" / "warden"
    if candidate.is_file():
        return str(candidate)
    found = shutil.which("warden")
    if found:
        return found
    pytest.fail("no warden binary: build it (cargo build -p warden) or set WARDEN_BIN", pytrace=False)


class Daemon:
    """A ``warden serve`` on a free loopback port, with the suite's settings."""

    def __init__(self, binary: str, settings_text: str) -> None:
        self.dir = tempfile.mkdtemp(prefix="warden-e2b-")
        self.settings = os.path.join(self.dir, "settings.toml")
        with open(self.settings, "w") as f:
            f.write(settings_text)
        self.log_path = os.path.join(self.dir, "serve.log")
        self.log = open(self.log_path, "wb")
        self.process = subprocess.Popen(
            [binary, "--config", self.settings, "serve", "--listen", "127.0.0.1:0", "--max-concurrent", "8",
             "--data-dir", os.path.join(self.dir, "data")],
            stdin=subprocess.DEVNULL,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.url = self._wait_ready()

    def log_text(self) -> str:
        try:
            return Path(self.log_path).read_text(errors="replace")
        except OSError:
            return ""

    def _wait_ready(self) -> str:
        deadline = time.monotonic() + 60
        url: Optional[str] = None
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"warden serve exited: {self.log_text()[-2000:]}")
            if url is None:
                m = _LISTENING.search(self.log_text())
                url = m.group(1) if m else None
            if url is not None:
                try:
                    if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                        return url
                except httpx.HTTPError:
                    pass
            time.sleep(0.05)
        raise RuntimeError(f"warden serve not ready: {self.log_text()[-2000:]}")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


_DAEMONS: List[Daemon] = []


@pytest.fixture(scope="session")
def daemon() -> Iterator[Daemon]:
    """The keyless daemon (loopback only), with E2B's environment variables pointing at it:
    the SDK is configured exactly as the docs say, nothing else."""
    d = Daemon(warden_binary(), SETTINGS.read_text())
    _DAEMONS.append(d)
    saved = {k: os.environ.get(k) for k in ("E2B_API_URL", "E2B_SANDBOX_URL", "E2B_API_KEY")}
    os.environ["E2B_API_URL"] = d.url
    os.environ["E2B_SANDBOX_URL"] = d.url
    # Without keys configured any key is accepted; the SDK wants one to be set.
    os.environ["E2B_API_KEY"] = "e2b_" + "0" * 40
    yield d
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    _DAEMONS.remove(d)
    d.stop()


@pytest.fixture(scope="session")
def keyed_daemon() -> Iterator[Daemon]:
    """A daemon with two API keys (owners `a` and `b`)."""
    keys = "".join(
        f'\n[[server.api_keys]]\nname = "{name}"\nkey_sha256 = "{hashlib.sha256(key.encode()).hexdigest()}"\n'
        for name, key in (("a", KEY_A), ("b", KEY_B))
    )
    d = Daemon(warden_binary(), SETTINGS.read_text() + keys)
    _DAEMONS.append(d)
    yield d
    _DAEMONS.remove(d)
    d.stop()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A failed test's report carries the end of the daemons' logs."""
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        for d in _DAEMONS:
            report.sections.append((f"warden serve log {d.url}", d.log_text()[-3000:]))
