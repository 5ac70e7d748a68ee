"""Durable sandboxes' snapshots and forks through the SDK (async and sync): a snapshot is the
key's, listed with its size, makes new sandboxes with the files as they were; forks are
independent copies; deleting a snapshot removes it from the list."""

from __future__ import annotations

import uuid

import pytest

from warden_sandbox import AsyncWardenClient, NotFoundError, WardenClient

pytestmark = pytest.mark.sandboxes


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def test_snapshot_fork_and_from_snapshot(client: AsyncWardenClient) -> None:
    async with await client.create_sandbox() as parent:
        await parent.run("open('state.txt', 'w').write('then')")
        name = unique("snap")
        snap = await parent.snapshot(name)
        assert (snap.name, snap.sandbox_id) == (name, parent.id)
        assert snap.size_bytes >= snap.workspace_mb * 1024 * 1024
        await parent.run("open('state.txt', 'w').write('now')")
        forks = await parent.fork(2)
        assert len(forks) == 2
        for n, fork in enumerate(forks):
            async with fork:
                await fork.run(f"open('state.txt', 'w').write('fork {n}')")
                result = await fork.run("print(open('state.txt').read())")
                assert result.stdout == f"fork {n}\n"
        result = await parent.run("print(open('state.txt').read())")
        assert result.stdout == "now\n"
        async with await client.create_sandbox(from_snapshot=name) as child:
            result = await child.run("print(open('state.txt').read())")
            assert result.stdout == "then\n"
        listed = await client.list_snapshots()
        assert name in [s.name for s in listed.snapshots]
        assert listed.used_bytes <= listed.quota_bytes
        await client.delete_snapshot(name)
        assert name not in [s.name for s in (await client.list_snapshots()).snapshots]
        with pytest.raises(NotFoundError):
            await client.delete_snapshot(name)


def test_the_same_through_the_sync_client(sync_client: WardenClient) -> None:
    with sync_client.create_sandbox() as sb:
        sb.run("open('a.txt', 'w').write('a')")
        name = unique("sync")
        assert sb.snapshot(name).name == name
        (fork,) = sb.fork()
        with fork:
            assert fork.run("print(open('a.txt').read())").stdout == "a\n"
        sync_client.delete_snapshot(name)
