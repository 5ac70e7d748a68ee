"""``AISandboxFactory.create_default()``: WARDEN_URL when set, else an embedded daemon."""

from __future__ import annotations

import os

import httpx
import pytest

from warden_sandbox import AISandboxFactory, CodeInterpreterTool, EmbeddedDaemon


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is not alive either.
    with open(f"/proc/{pid}/stat") as f:
        return f.read().split()[2] != "Z"


async def test_warden_url_is_used_and_nothing_is_started(monkeypatch: pytest.MonkeyPatch, base_url: str) -> None:
    monkeypatch.setenv("WARDEN_URL", base_url)
    monkeypatch.setenv("WARDEN_BIN", "/nonexistent/warden")  # would fail if it tried to start one
    service = AISandboxFactory.create_default()
    assert not service.embedded and service.base_url == base_url
    await service.connect()
    tool = CodeInterpreterTool(sandbox_service=service)
    assert await tool.execute(code="print(1 + 1)") == "STDOUT:\n2"
    await service.close()
    # Closing a service that did not start the daemon leaves the daemon running.
    assert httpx.get(f"{base_url}/healthz").status_code == 200


async def test_embedded_daemon_starts_on_connect_and_stops_on_close(monkeypatch: pytest.MonkeyPatch, warden_bin: str) -> None:
    monkeypatch.delenv("WARDEN_URL", raising=False)
    monkeypatch.setenv("WARDEN_BIN", warden_bin)
    service = AISandboxFactory.create_default()
    assert service.embedded and service.base_url is None
    assert service.health_extra()["status"] == "not_started"
    await service.connect()
    assert service.daemon is not None and service.daemon.pid is not None
    pid = service.daemon.pid
    url = service.base_url
    assert url is not None and url.startswith("http://127.0.0.1:")
    tool = CodeInterpreterTool(sandbox_service=service)
    assert await tool.execute(code="import math; print(math.sqrt(144))", language="python") == "STDOUT:\n12.0"
    assert service.health_extra()["daemon_pid"] == pid
    await service.close()
    assert not _alive(pid)
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{url}/healthz")


async def test_async_with_closes_the_embedded_daemon(warden_bin: str) -> None:
    async with AISandboxFactory.embedded(binary=warden_bin) as service:
        assert service.connected
        pid = service.daemon.pid if service.daemon else None
        assert (await service.health())["status"] == "ok"
    assert pid is not None and not _alive(pid)


def test_two_embedded_daemons_get_different_ports(warden_bin: str) -> None:
    with EmbeddedDaemon(warden_bin) as a, EmbeddedDaemon(warden_bin) as b:
        assert a.url != b.url
        assert httpx.get(f"{a.url}/readyz").json()["status"] == "ready"
        assert httpx.get(f"{b.url}/readyz").json()["status"] == "ready"
