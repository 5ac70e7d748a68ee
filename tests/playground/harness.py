"""What the playground's browser tests and the screenshot script share: a real ``warden serve``
started from ``WARDEN_BIN`` (else the debug binary of ``$CARGO_TARGET_DIR``), and Debian's
chromium driven by Playwright (``/usr/bin/chromium``, headless; never a downloaded browser).

Both are installed by ``scripts/setup-playground-tests.sh``. The daemon runs real sandboxes, so
it needs root, as the project's other tests do.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import List, Optional

CHROMIUM = os.environ.get("WARDEN_CHROMIUM", "/usr/bin/chromium")
# Generous: a first cell may start an interpreter on a loaded machine.
TIMEOUT_MS = 90_000


def warden_binary() -> str:
    explicit = os.environ.get("WARDEN_BIN")
    if explicit:
        return explicit
    target = os.environ.get("CARGO_TARGET_DIR", "/var/cache/warden/target")
    path = Path(target) / "x86_64-unknown-linux-gnu" / "debug" / "warden"
    if not path.is_file():
        raise RuntimeError(f"no warden binary at {path}: build it (cargo build -p warden) or set WARDEN_BIN")
    return str(path)


class Daemon:
    """``warden serve`` on a free loopback port; ``url`` once it listens."""

    def __init__(self, settings: Optional[str] = None, extra_args: Optional[List[str]] = None):
        self.settings = settings
        self.extra_args = extra_args or []
        self.url: Optional[str] = None
        self.process: Optional[subprocess.Popen] = None
        self._log: List[str] = []
        self._config: Optional[str] = None

    def start(self) -> "Daemon":
        cmd = [warden_binary()]
        if self.settings is not None:
            fd, self._config = tempfile.mkstemp(suffix=".toml", prefix="warden-playground-")
            with os.fdopen(fd, "w") as f:
                f.write(self.settings)
            cmd += ["--config", self._config]
        # A data directory of its own: durable sandboxes never outlive the test's daemon.
        self._data_dir = tempfile.mkdtemp(prefix="warden-playground-data-")
        cmd += ["serve", "--listen", "127.0.0.1:0", "--max-concurrent", "4", "--data-dir", self._data_dir, *self.extra_args]
        self.process = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        ready = threading.Event()

        def read() -> None:
            assert self.process is not None and self.process.stderr is not None
            for line in self.process.stderr:
                self._log.append(line)
                m = re.search(r"listening on (http://\S+)", line)
                if m and self.url is None:
                    self.url = m.group(1)
                    ready.set()
            ready.set()

        threading.Thread(target=read, daemon=True).start()
        if not ready.wait(60) or self.url is None:
            self.stop()
            raise RuntimeError("warden serve did not start:\n" + self.log())
        return self

    def log(self) -> str:
        return "".join(self._log)

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self._config:
            os.unlink(self._config)
            self._config = None
        if getattr(self, "_data_dir", None):
            shutil.rmtree(self._data_dir, ignore_errors=True)
            self._data_dir = None

    def __enter__(self) -> "Daemon":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def launch(playwright):  # type: ignore[no-untyped-def]
    """Debian's chromium, headless (as root it needs --no-sandbox)."""
    return playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])


def open_page(browser, url: str, width: int = 1280, height: int = 900):  # type: ignore[no-untyped-def]
    """A fresh browser context (its own sessionStorage) on the playground; not waited for."""
    context = browser.new_context(viewport={"width": width, "height": height}, accept_downloads=True)
    context.set_default_timeout(TIMEOUT_MS)
    page = context.new_page()
    page.goto(url + "/")
    return page


def wait_ready(page) -> None:  # type: ignore[no-untyped-def]
    page.wait_for_selector("body[data-ready=true]", state="attached")


def set_code(page, code: str) -> None:  # type: ignore[no-untyped-def]
    page.evaluate("c => { const cm = document.querySelector('.CodeMirror').CodeMirror; cm.setValue(c); cm.focus(); }", code)


def finished_cells(page) -> int:  # type: ignore[no-untyped-def]
    return page.evaluate("document.querySelectorAll('#cells .cell:not(.running) .result-line').length")


def run_and_wait(page, code: str, button: bool = True):  # type: ignore[no-untyped-def]
    """Runs `code` as the next cell and waits for its result line; returns the cell."""
    before = page.locator("#cells .cell").count()
    set_code(page, code)
    if button:
        page.click("#run")
    else:
        page.keyboard.press("Control+Enter")
    page.wait_for_function(
        "n => { const c = document.querySelectorAll('#cells .cell'); return c.length > n && !c[n].classList.contains('running') && c[n].querySelector('.result-line'); }",
        arg=before,
    )
    return page.locator("#cells .cell").nth(before)
