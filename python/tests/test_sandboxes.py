"""Sandboxes with a lifetime (``/v1/sandboxes``): shared workspace, files, names, labels, and
the same through the sync client."""

from __future__ import annotations

import uuid

import pytest

from warden_sandbox import (
    AISandboxService,
    ConflictError,
    EndEvent,
    InvalidRequestError,
    NotFoundError,
    SandboxConfigurationError,
    SandboxState,
    SecurityViolationError,
    StdoutEvent,
    WardenAPIError,
    WardenClient,
)

pytestmark = pytest.mark.sandboxes


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def test_runs_in_one_sandbox_share_the_workspace(service: AISandboxService) -> None:
    label = unique("suite")
    async with service.sandbox(profile="data_science", labels={"suite": label}) as sb:
        assert sb.info.profile == "data_science"
        assert sb.info.labels == {"suite": label}
        assert sb.info.limits.memory_mb > 0
        first = await sb.run("open('state.txt', 'w').write('41')")
        assert first.is_success, first
        second = await sb.run("print(int(open('state.txt').read()) + 1)")
        assert second.stdout == "42\n"
        info = await sb.refresh()
        assert info.executions == 2
        listed = await service.list_sandboxes({"suite": label})
        assert [s.id for s in listed] == [sb.id]
        sandbox_id = sb.id
    # Leaving the block destroyed it.
    with pytest.raises(NotFoundError):
        await service.get_sandbox(sandbox_id)
    assert await service.list_sandboxes({"suite": label}) == []


async def test_upload_run_download_and_list(service: AISandboxService) -> None:
    async with service.sandbox(profile="data_science") as sb:
        written = await sb.upload("in/data.csv", "x\n1\n2\n3\n")
        assert written.size == 8
        await sb.upload("/workspace/in/blob.bin", bytes(range(256)))
        result = await sb.run(
            "rows = open('in/data.csv').read().split()[1:]\n"
            "open('sum.txt', 'w').write(str(sum(map(int, rows))))\n"
            "print(len(open('in/blob.bin', 'rb').read()))"
        )
        assert result.stdout == "256\n"
        assert await sb.download("sum.txt") == b"6"
        assert await sb.download("in/blob.bin") == bytes(range(256))
        entries = {e.path: e for e in await sb.files()}
        assert entries["in/data.csv"].size == 8 and not entries["in/data.csv"].is_dir
        assert entries["sum.txt"].size == 1
        with pytest.raises(NotFoundError):
            await sb.download("missing.txt")


async def test_a_symlink_out_of_the_workspace_is_not_followed(service: AISandboxService) -> None:
    async with service.sandbox(profile="data_science") as sb:
        made = await sb.run("import os\nos.symlink('/etc/passwd', 'leak')\nprint('ok')")
        assert made.stdout == "ok\n"
        with pytest.raises(WardenAPIError) as info:
            data = await sb.download("leak")
            assert b"root:" not in data
        assert info.value.status in (400, 403, 404)


async def test_names_are_unique_and_resolve(service: AISandboxService) -> None:
    name = unique("pysdk")
    async with service.sandbox(name=name) as sb:
        assert sb.info.name == name
        assert sb.id.startswith(f"{name}-")
        same = await service.get_sandbox(name)
        assert same.id == sb.id
        with pytest.raises(ConflictError) as info:
            await service.create_sandbox(name=name)
        assert info.value.status == 409


async def test_streaming_in_a_sandbox(service: AISandboxService) -> None:
    async with service.sandbox(profile="data_science") as sb:
        events = [e async for e in sb.stream("print('a', flush=True)\nprint('b')")]
        assert isinstance(events[-1], EndEvent) and events[-1].stdout == "a\nb\n"
        assert "".join(e.text for e in events if isinstance(e, StdoutEvent)) == "a\nb\n"


async def test_args_and_stdin(service: AISandboxService) -> None:
    async with service.sandbox(profile="data_science") as sb:
        result = await sb.run("import sys\nprint(sys.argv[1:], sys.stdin.read())", args=["x", "y"], stdin="in")
        assert result.stdout == "['x', 'y'] in\n"


async def test_policies_apply_in_a_sandbox(service: AISandboxService) -> None:
    async with service.sandbox() as sb:  # the default profile: standard, with forbidden_imports
        with pytest.raises(SecurityViolationError):
            await sb.run("import subprocess")
        assert (await sb.run("import math; print(math.floor(2.5))")).stdout == "2\n"


async def test_unknown_profile_on_create(service: AISandboxService) -> None:
    with pytest.raises(SandboxConfigurationError):
        await service.create_sandbox(profile="no_such_profile")


async def test_a_destroyed_sandbox_is_gone(service: AISandboxService) -> None:
    sb = await service.sandbox(keep=True)
    await sb.destroy()
    await sb.destroy()  # idempotent on the client side
    with pytest.raises(NotFoundError):
        await service.client.exec(sb.id, "print(1)")


def test_the_sync_client_has_sandboxes_too(sync_client: WardenClient) -> None:
    with sync_client.create_sandbox(profile="data_science") as sb:
        sb.upload("n.txt", "5")
        assert sb.run("print(int(open('n.txt').read()) * 2)").stdout == "10\n"
        assert sb.download("n.txt") == b"5"
        assert any(e.path == "n.txt" for e in sb.files())
        sandbox_id = sb.id
    with pytest.raises(NotFoundError):
        sync_client.get_sandbox(sandbox_id)


async def test_lifetimes_may_be_lowered_not_raised(service: AISandboxService) -> None:
    async with service.sandbox(idle_ttl_seconds=60, max_lifetime_seconds=120) as sb:
        assert sb.info.idle_ttl_seconds == 60
        assert sb.info.max_lifetime_seconds == 120
        assert sb.info.created_at < sb.info.expires_at
        assert sb.info.backend == "jail"
    with pytest.raises(InvalidRequestError) as info:
        await service.create_sandbox(idle_ttl_seconds=10**6)
    assert "idle_ttl_seconds" in info.value.message
    with pytest.raises(SecurityViolationError) as violation:
        await service.create_sandbox(memory_mb=10**6)
    assert violation.value.violation is not None
    assert violation.value.violation.kind == "quota_exceeded"


async def test_leaving_a_sandbox_that_is_already_gone_is_quiet(service: AISandboxService) -> None:
    async with service.sandbox() as sb:
        await service.client.destroy_sandbox(sb.id)
        with pytest.raises(NotFoundError):
            await sb.run("print(1)")
    with pytest.raises(NotFoundError):
        await service.client.destroy_sandbox(sb.id)


def test_leaving_a_gone_sandbox_is_quiet_for_the_sync_client_too(sync_client: WardenClient) -> None:
    with sync_client.create_sandbox() as sb:
        sync_client.destroy_sandbox(sb.id)


async def test_pause_keeps_the_state_and_a_run_resumes(service: AISandboxService) -> None:
    async with service.sandbox() as sb:
        assert sb.info.state == SandboxState.RUNNING
        r = await service.client.exec(sb.id, "kept = 5", context="default")
        assert r.exit_code == 0, r
        info = await sb.pause()
        assert info.state == SandboxState.PAUSED
        assert (await sb.refresh()).state == SandboxState.PAUSED
        r = await service.client.exec(sb.id, "print(kept * 2)", context="default")
        assert r.stdout == "10\n"
        assert (await sb.refresh()).state == SandboxState.RUNNING
        await sb.pause()
        assert (await sb.resume()).state == SandboxState.RUNNING


def test_the_sync_client_pauses_and_resumes(sync_client: WardenClient) -> None:
    with sync_client.create_sandbox() as sb:
        assert sb.pause().state == SandboxState.PAUSED
        assert sb.resume().state == SandboxState.RUNNING
        assert sb.run("print(3)").stdout == "3\n"


async def test_an_evicting_pause_saves_the_variables_and_names_the_rest(service: AISandboxService) -> None:
    async with service.sandbox() as sb:
        code = "import math\nkept = [1, 2]\nnumbers = (i for i in range(3))"
        r = await service.client.exec(sb.id, code, context="default")
        assert r.exit_code == 0, r
        paused = await sb.pause(evict=True)
        assert paused.state == SandboxState.PAUSED
        [evicted] = paused.evicted
        assert evicted.context == "default"
        assert "kept" in evicted.saved and "math" in evicted.saved
        assert [u.name for u in evicted.unsaved] == ["numbers"]
        resumed = await sb.resume()
        assert resumed.state == SandboxState.RUNNING
        assert [r.context for r in resumed.restored] == ["default"]
        r = await service.client.exec(sb.id, "print(kept, math.floor(2.5), 'numbers' in globals())", context="default")
        assert r.stdout == "[1, 2] 2 False\n"


def test_the_sync_client_evicts_too(sync_client: WardenClient) -> None:
    with sync_client.create_sandbox() as sb:
        assert sync_client.exec(sb.id, "x = 3", context="default").exit_code == 0
        assert [e.saved for e in sb.pause(evict=True).evicted] == [["x"]]
        assert sync_client.exec(sb.id, "print(x * 2)", context="default").stdout == "6\n"
