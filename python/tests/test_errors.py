"""Failures are typed exceptions carrying the daemon's words, never a bare HTTP error."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import httpx
import pytest

from warden_sandbox import (
    AISandboxFactory,
    AISandboxService,
    AsyncWardenClient,
    DaemonGoneError,
    DaemonStartError,
    EmbeddedDaemon,
    InvalidRequestError,
    RateLimitedError,
    SandboxRequest,
    SecurityViolationError,
    ServiceUnavailableError,
    WardenAPIError,
    WardenClient,
    WardenConnectionError,
    WardenProtocolError,
    WardenTimeoutError,
)

SLEEP = "import time\nprint('started', flush=True)\ntime.sleep({})\nprint('done')"


async def test_connect_to_nothing_is_a_connection_error(closed_port_url: str) -> None:
    service = AISandboxService(closed_port_url)
    with pytest.raises(WardenConnectionError) as info:
        await service.connect()
    assert not isinstance(info.value, DaemonGoneError)
    assert closed_port_url in str(info.value)
    assert not service.connected


def test_the_sync_client_too(closed_port_url: str) -> None:
    with WardenClient(closed_port_url) as client:
        with pytest.raises(WardenConnectionError):
            client.execute("print(1)")


async def test_client_timeout_is_a_timeout_error(base_url: str) -> None:
    async with AsyncWardenClient(base_url, timeout=0.5) as client:
        started = time.monotonic()
        with pytest.raises(WardenTimeoutError):
            await client.execute(SLEEP.format(3), profile="data_science")
        assert time.monotonic() - started < 2.5


async def test_an_execution_longer_than_the_client_timeout_is_waited_for(base_url: str) -> None:
    # The client waits for an execution's own timeout plus a grace period.
    async with AsyncWardenClient(base_url, timeout=0.5) as client:
        result = await client.execute(SLEEP.format(1), profile="data_science", timeout_seconds=5)
    assert result.stdout == "started\ndone\n"


async def test_bad_input_is_an_invalid_request_error_with_the_daemons_message(client: AsyncWardenClient) -> None:
    with pytest.raises(InvalidRequestError) as info:
        await client.execute("print(1)", timeout_seconds=-1)
    assert info.value.status == 400
    assert info.value.code == "invalid_request"
    assert "timeout_seconds" in info.value.message


async def test_bad_path_is_refused_before_it_is_sent(client: AsyncWardenClient) -> None:
    for bad in ["../etc/passwd", "/etc/passwd", "a/../../b", "a//b", "", "/workspace/../x"]:
        with pytest.raises(InvalidRequestError) as info:
            await client.read_file("sb-any", bad)
        assert info.value.code == "bad_path"
        assert info.value.status is None


def _daemon(warden_bin: str) -> EmbeddedDaemon:
    d = EmbeddedDaemon(warden_bin, extra_args=["--max-concurrent", str(MAX_CONCURRENT)])
    d.start()
    return d


def _kill_when_running(daemon: EmbeddedDaemon) -> None:
    """SIGKILLs the daemon as soon as an execution holds one of its slots (so the request is
    certainly in flight, however loaded the machine is)."""
    assert daemon.process is not None and daemon.url is not None
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        ready = httpx.get(f"{daemon.url}/readyz", timeout=5).json()
        if ready["free_slots"] < MAX_CONCURRENT:
            os.kill(daemon.process.pid, signal.SIGKILL)
            return
        time.sleep(0.01)
    raise AssertionError("the execution never started")


MAX_CONCURRENT = 2


async def test_daemon_killed_mid_run_is_daemon_gone(warden_bin: str) -> None:
    d = _daemon(warden_bin)
    try:
        async with AsyncWardenClient(d.url or "") as client:
            killer = asyncio.create_task(asyncio.to_thread(_kill_when_running, d))
            with pytest.raises(DaemonGoneError):
                await client.execute(SLEEP.format(5), profile="data_science", timeout_seconds=10)
            await killer
            # And afterwards nothing listens: a plain connection error.
            with pytest.raises(WardenConnectionError):
                await client.execute("print(1)")
    finally:
        d.stop()


async def test_daemon_killed_mid_stream_is_daemon_gone(warden_bin: str) -> None:
    d = _daemon(warden_bin)
    try:
        async with AsyncWardenClient(d.url or "") as client:
            seen = []
            with pytest.raises(DaemonGoneError):
                async for event in client.execute_stream(SLEEP.format(5), profile="data_science", timeout_seconds=10):
                    seen.append(event)
                    if "started" in getattr(event, "text", ""):
                        assert d.process is not None
                        os.kill(d.process.pid, signal.SIGKILL)
            assert "started" in getattr(seen[0], "text", "")
            assert not any(e.type == "end" for e in seen)
    finally:
        d.stop()


def test_a_missing_binary_is_a_daemon_start_error(tmp_path: Path) -> None:
    with pytest.raises(DaemonStartError) as info:
        EmbeddedDaemon(tmp_path / "no-warden").start()
    assert "no-warden" in str(info.value)


def test_a_daemon_that_cannot_start_says_why(warden_bin: str, tmp_path: Path) -> None:
    bad = tmp_path / "settings.toml"
    bad.write_text("[sandbox]\nbogus_key = 1\n")
    daemon = EmbeddedDaemon(warden_bin, config=bad, startup_timeout=10)
    with pytest.raises(DaemonStartError) as info:
        daemon.start()
    assert "bogus_key" in str(info.value)
    assert not daemon.running


async def test_create_default_without_a_binary_explains(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WARDEN_URL", raising=False)
    monkeypatch.setenv("WARDEN_BIN", "/nonexistent/warden")
    service = AISandboxFactory.create_default()
    with pytest.raises(DaemonStartError):
        await service.connect()


# ---- answers that are not what the API documents (a proxy in the way, a broken daemon) ------


def _mock_client(handler) -> AsyncWardenClient:  # type: ignore[no-untyped-def]
    return AsyncWardenClient("http://warden.test", transport=httpx.MockTransport(handler))


async def test_an_error_without_the_error_body_is_still_typed() -> None:
    client = _mock_client(lambda request: httpx.Response(502, text="<html>Bad Gateway</html>"))
    with pytest.raises(ServiceUnavailableError) as info:
        await client.execute("print(1)")
    assert info.value.status == 502
    assert info.value.code == "http_502"
    assert "Bad Gateway" in info.value.message


async def test_retry_after_is_kept() -> None:
    body = {"error": {"code": "too_many_requests", "message": "8 executions are running"}}
    client = _mock_client(lambda r: httpx.Response(429, json=body, headers={"retry-after": "1"}))
    with pytest.raises(RateLimitedError) as info:
        await client.execute("print(1)")
    assert info.value.retry_after == 1.0
    assert info.value.message == "8 executions are running"


async def test_a_403_with_a_violation_is_a_security_violation() -> None:
    body = {"error": {"code": "forbidden", "message": "no", "violation": {"policy": "p", "kind": "dynamic_import", "message": "m"}}}
    client = _mock_client(lambda r: httpx.Response(403, json=body))
    with pytest.raises(SecurityViolationError) as info:
        await client.execute("x")
    assert info.value.violation is not None and info.value.violation.kind == "dynamic_import"


async def test_a_success_that_is_not_json_is_a_protocol_error() -> None:
    client = _mock_client(lambda r: httpx.Response(200, text="hello"))
    with pytest.raises(WardenProtocolError):
        await client.execute("print(1)")


async def test_an_error_event_in_a_stream_is_raised_typed() -> None:
    lines = (
        b'{"type":"stdout","text":"a","timestamp":1}\n'
        b'{"type":"error","name":"runtime_unavailable","value":"python3: not found"}\n'
    )
    client = _mock_client(lambda r: httpx.Response(200, content=lines))
    events = []
    with pytest.raises(WardenAPIError) as info:
        async for event in client.execute_stream("print(1)"):
            events.append(event)
    assert [e.type for e in events] == ["stdout"]
    assert info.value.code == "runtime_unavailable"
    assert info.value.message == "python3: not found"


async def test_a_stream_cut_before_its_end_is_daemon_gone() -> None:
    client = _mock_client(lambda r: httpx.Response(200, content=b'{"type":"stdout","text":"a","timestamp":1}\n'))
    with pytest.raises(DaemonGoneError):
        async for _ in client.execute_stream("print(1)"):
            pass


async def test_the_service_wraps_bad_requests_from_the_daemon(service: AISandboxService) -> None:
    with pytest.raises(InvalidRequestError):
        await service.execute(SandboxRequest(code="print(1)", timeout_seconds=0))


def test_daemon_killed_mid_run_is_daemon_gone_for_the_sync_client_too(warden_bin: str) -> None:
    import threading

    d = _daemon(warden_bin)
    try:
        assert d.process is not None
        killer = threading.Thread(target=_kill_when_running, args=(d,))
        killer.start()
        with WardenClient(d.url or "") as client:
            with pytest.raises(DaemonGoneError):
                client.execute(SLEEP.format(5), profile="data_science", timeout_seconds=10)
        killer.join()
    finally:
        d.stop()


def test_a_base_url_that_is_not_http_is_refused_at_once() -> None:
    for bad in ["127.0.0.1:8080", "ftp://host/", "http://", "not a url"]:
        with pytest.raises(ValueError):
            WardenClient(bad)
        with pytest.raises(ValueError):
            AsyncWardenClient(bad)
        with pytest.raises(ValueError):
            AISandboxService(bad)
