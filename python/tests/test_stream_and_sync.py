"""Streaming output (NDJSON as an iterator) and the sync client, against the daemon."""

from __future__ import annotations

import time

import pytest

from warden_sandbox import (
    AISandboxService,
    AsyncWardenClient,
    EndEvent,
    ExecResult,
    SandboxRequest,
    SecurityViolationError,
    StderrEvent,
    StdoutEvent,
    WardenClient,
)

TICKS = "import time\nfor i in range(3):\n    print(i, flush=True)\n    time.sleep(0.3)\n"


async def test_output_arrives_while_the_program_runs(client: AsyncWardenClient) -> None:
    arrivals = []
    end = None
    started = time.monotonic()
    async for event in client.execute_stream(TICKS, profile="data_science"):
        if isinstance(event, StdoutEvent) and event.text.strip():
            arrivals.append((event.text.strip(), time.monotonic() - started))
        if isinstance(event, EndEvent):
            end = event
    assert [text for text, _ in arrivals] == ["0", "1", "2"]
    # The first line came well before the program finished (~0.9 s of sleeping).
    assert arrivals[-1][1] - arrivals[0][1] > 0.4
    assert end is not None
    result = end.result()
    assert isinstance(result, ExecResult) and not isinstance(result, EndEvent)
    assert result.stdout == "0\n1\n2\n"
    assert result.is_success


async def test_the_service_streams_stderr_and_ends_with_the_result(service: AISandboxService) -> None:
    events = [e async for e in service.stream(SandboxRequest(code="import sys\nprint('out')\nprint('err', file=sys.stderr)\nsys.exit(2)", profile="data_science"))]
    assert isinstance(events[-1], EndEvent)
    assert events[-1].exit_code == 2
    assert "".join(e.text for e in events if isinstance(e, StderrEvent)) == "err\n"
    assert "".join(e.text for e in events if isinstance(e, StdoutEvent)) == "out\n"
    assert all(e.timestamp > 1_600_000_000_000 for e in events if isinstance(e, (StdoutEvent, StderrEvent)))


async def test_a_refused_stream_raises_before_the_first_event(service: AISandboxService) -> None:
    with pytest.raises(SecurityViolationError):
        async for _ in service.stream(SandboxRequest(code="import socket")):
            pytest.fail("no event expected")


async def test_leaving_a_stream_early_is_fine(client: AsyncWardenClient) -> None:
    agen = client.execute_stream(TICKS, profile="data_science")
    async for event in agen:
        assert isinstance(event, StdoutEvent)
        break
    await agen.aclose()  # type: ignore[attr-defined]
    # The client is still usable afterwards.
    assert (await client.execute("print(1)")).stdout == "1\n"


def test_sync_client_runs_and_streams(sync_client: WardenClient) -> None:
    result = sync_client.execute("print(6 * 7)")
    assert result.stdout == "42\n" and result.is_success
    events = list(sync_client.execute_stream("print('a')\nprint('b')"))
    assert isinstance(events[-1], EndEvent)
    assert events[-1].stdout == "a\nb\n"
    with pytest.raises(SecurityViolationError):
        sync_client.execute("import os")
    assert sync_client.health() == {"status": "ok"}


def test_stdin_is_given_to_the_program(sync_client: WardenClient) -> None:
    result = sync_client.execute("import sys\nprint(sys.stdin.read().upper())", stdin="hello", profile="data_science")
    assert result.stdout == "HELLO\n"
