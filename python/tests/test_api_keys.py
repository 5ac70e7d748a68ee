"""API keys (``[[server.api_keys]]``): the SDK sends ``Authorization: Bearer`` from ``api_key``
or ``WARDEN_API_KEY``, and a missing or wrong key is an AuthenticationError."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Iterator

import pytest

from warden_sandbox import (
    AISandboxFactory,
    AsyncWardenClient,
    AuthenticationError,
    CodeInterpreterTool,
    EmbeddedDaemon,
    NotFoundError,
    RateLimitedError,
    WardenClient,
)

SETTINGS = Path(__file__).resolve().parents[2] / "profiles" / "settings.toml"
KEY_A, KEY_B = "key-for-agent-a", "key-for-agent-b"


def digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


@pytest.fixture(scope="module")
def keyed_url(warden_bin: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    config = tmp_path_factory.mktemp("keys") / "settings.toml"
    config.write_text(
        SETTINGS.read_text()
        + f'\n[[server.api_keys]]\nname = "agent-a"\nkey_sha256 = "{digest(KEY_A)}"\nmax_sandboxes = 1\n'
        + f'\n[[server.api_keys]]\nname = "agent-b"\nkey_sha256 = "{digest(KEY_B)}"\n'
    )
    with EmbeddedDaemon(warden_bin, config=config) as daemon:
        assert daemon.url is not None
        yield daemon.url


async def test_no_key_and_a_wrong_key_are_authentication_errors(keyed_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WARDEN_API_KEY", raising=False)
    async with AsyncWardenClient(keyed_url) as client:
        assert (await client.health())["status"] == "ok"  # health stays open
        with pytest.raises(AuthenticationError) as info:
            await client.execute("print(1)")
        assert info.value.status == 401
        assert "API key" in info.value.message
    async with AsyncWardenClient(keyed_url, api_key="wrong") as client:
        with pytest.raises(AuthenticationError):
            await client.execute("print(1)")


async def test_the_key_from_the_environment_is_sent(keyed_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WARDEN_URL", keyed_url)
    monkeypatch.setenv("WARDEN_API_KEY", KEY_A)
    async with AISandboxFactory.create_default() as service:
        tool = CodeInterpreterTool(sandbox_service=service)
        assert await tool.execute(code="import math; print(math.sqrt(144))") == "STDOUT:\n12.0"
        # The LangChain/sync path sends it too.
        assert tool.execute_sync(code="print(3)") == "STDOUT:\n3"


async def test_a_key_sees_only_its_own_sandboxes_and_its_limit(keyed_url: str) -> None:
    async with AsyncWardenClient(keyed_url, api_key=KEY_A) as a, AsyncWardenClient(keyed_url, api_key=KEY_B) as b:
        async with await a.create_sandbox() as sb:
            with pytest.raises(RateLimitedError) as info:
                await a.create_sandbox()  # agent-a may have one live sandbox
            assert info.value.status == 429
            assert [s.id for s in await a.list_sandboxes()] == [sb.id]
            assert await b.list_sandboxes() == []
            with pytest.raises(NotFoundError):
                await b.exec(sb.id, "print(1)")
            assert (await sb.run("print('mine')")).stdout == "mine\n"


def test_the_sync_client_sends_the_key(keyed_url: str) -> None:
    with WardenClient(keyed_url, api_key=KEY_B) as client:
        assert client.execute("print(2)").stdout == "2\n"
