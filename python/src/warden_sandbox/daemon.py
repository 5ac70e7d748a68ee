"""The embedded default: a local ``warden serve`` started for this process and stopped with it.

The daemon listens on a free loopback port chosen by the kernel (``--listen 127.0.0.1:0``); its
address is read from the line it logs at start (``warden: listening on http://…``), so there is
no race for a port. Its log goes to a temporary file (never a pipe nobody reads, which would
block it). It is stopped with SIGINT (a graceful shutdown), then SIGKILL after a grace period,
and in any case when the interpreter exits.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import weakref
from pathlib import Path
from typing import IO, Any, List, Optional, Sequence, Union

import httpx

from .exceptions import DaemonStartError

__all__ = ["EmbeddedDaemon", "find_warden_binary"]

_LISTENING = re.compile(r"listening on (http://\S+)")


def find_warden_binary(binary: Union[None, str, "os.PathLike[str]"] = None) -> str:
    """The ``warden`` executable: ``binary`` if given, else ``WARDEN_BIN``, else ``warden`` on
    PATH. Raises :class:`DaemonStartError` naming what was tried."""
    candidate = os.fspath(binary) if binary is not None else os.environ.get("WARDEN_BIN")
    if candidate:
        path = Path(candidate)
        if path.is_file() and os.access(path, os.X_OK):
            return str(path)
        found = shutil.which(candidate)
        if found:
            return found
        raise DaemonStartError(f"the warden binary {candidate!r} does not exist or is not executable")
    found = shutil.which("warden")
    if found:
        return found
    raise DaemonStartError(
        "no warden binary: put `warden` on PATH, set WARDEN_BIN to its path, "
        "or set WARDEN_URL to the address of a running `warden serve`"
    )


def _stop_process(process: "subprocess.Popen[bytes]", grace: float) -> None:
    if process.poll() is not None:
        return
    try:
        process.send_signal(signal.SIGINT)
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    except ProcessLookupError:
        pass


class EmbeddedDaemon:
    """A ``warden serve`` child process on a loopback port.

    :param binary: the ``warden`` executable (default: ``WARDEN_BIN``, then PATH).
    :param config: a settings.toml for the daemon (default: ``WARDEN_CONFIG`` if set, else the
        built-in profiles).
    :param startup_timeout: seconds to wait until ``/readyz`` answers.
    :param extra_args: more arguments for ``warden serve`` (e.g. ``["--max-concurrent", "2"]``).

    The daemon lives and dies with this program, and so do its sandboxes: it keeps durable
    sandboxes in a data directory of its own, removed when it stops, unless ``extra_args``
    names one with ``--data-dir``.
    """

    def __init__(
        self,
        binary: Union[None, str, "os.PathLike[str]"] = None,
        *,
        config: Union[None, str, "os.PathLike[str]"] = None,
        startup_timeout: float = 30.0,
        stop_grace: float = 5.0,
        extra_args: Sequence[str] = (),
    ) -> None:
        self._binary = binary
        self.config = os.fspath(config) if config is not None else None
        self.startup_timeout = startup_timeout
        self.stop_grace = stop_grace
        self.extra_args = list(extra_args)
        self.url: Optional[str] = None
        self.process: Optional["subprocess.Popen[bytes]"] = None
        self._log: Optional[IO[bytes]] = None
        self._finalizer: Optional["weakref.finalize[Any, Any]"] = None
        self._data_dir: Optional[str] = None

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    @property
    def pid(self) -> Optional[int]:
        return self.process.pid if self.process is not None else None

    def log_text(self) -> str:
        """What the daemon has logged so far."""
        if self._log is None:
            return ""
        try:
            with open(self._log.name, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def command(self) -> List[str]:
        cmd = [find_warden_binary(self._binary)]
        if self.config is not None:
            cmd += ["--config", self.config]
        cmd += ["serve", "--listen", "127.0.0.1:0", *self.extra_args]
        if "--data-dir" not in self.extra_args:
            if self._data_dir is None:
                self._data_dir = tempfile.mkdtemp(prefix="warden-data-")
            cmd += ["--data-dir", self._data_dir]
        return cmd

    def start(self) -> str:
        """Starts the daemon and waits until it is ready; returns its URL. Idempotent."""
        if self.running and self.url is not None:
            return self.url
        cmd = self.command()
        self._log = tempfile.NamedTemporaryFile(prefix="warden-serve-", suffix=".log", delete=False)
        try:
            self.process = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                close_fds=True,
                # Its own session: a Ctrl-C meant for this program does not stop the daemon
                # under it; the program stops it on close or at exit.
                start_new_session=True,
            )
        except OSError as e:
            raise DaemonStartError(f"cannot start {cmd[0]}: {e}") from e
        # Stop it when this object is collected or the interpreter exits, whichever is first.
        self._finalizer = weakref.finalize(self, _stop_process, self.process, self.stop_grace)
        try:
            self.url = self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self.url

    def _wait_ready(self) -> str:
        assert self.process is not None
        deadline = time.monotonic() + self.startup_timeout
        url: Optional[str] = None
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise DaemonStartError(
                    f"warden serve exited with status {self.process.returncode} before it was ready: "
                    f"{self.log_text().strip()[-2000:]}"
                )
            if url is None:
                match = _LISTENING.search(self.log_text())
                if match:
                    url = match.group(1)
            if url is not None:
                try:
                    response = httpx.get(f"{url}/readyz", timeout=2.0)
                    if response.status_code == 200:
                        return url
                except httpx.HTTPError:
                    pass
            time.sleep(0.02)
        raise DaemonStartError(
            f"warden serve was not ready after {self.startup_timeout:g} s: {self.log_text().strip()[-2000:]}"
        )

    def stop(self) -> None:
        """Stops the daemon (SIGINT, then SIGKILL after the grace period). Idempotent."""
        if self._finalizer is not None:
            self._finalizer()
            self._finalizer = None
        elif self.process is not None:
            _stop_process(self.process, self.stop_grace)
        if self._log is not None:
            self._log.close()
            try:
                os.unlink(self._log.name)
            except OSError:
                pass
            self._log = None
        if self._data_dir is not None:
            shutil.rmtree(self._data_dir, ignore_errors=True)
            self._data_dir = None

    def __enter__(self) -> "EmbeddedDaemon":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
