"""The egress gateway's rules of a live sandbox, changed through the SDK (async and sync)
against a daemon of its own whose settings have a networked profile behind the gateway
(nothing here connects anywhere: the rules' effect on connections is tested in the
repository's ``jail_gateway`` tests)."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from warden_sandbox import AsyncWardenClient, EmbeddedDaemon, GatewayRules, InvalidRequestError, WardenClient

pytestmark = pytest.mark.sandboxes

SETTINGS = """
[sandbox]
default_profile = "gw"
[sandbox.jail.network]
upstream_dns = "192.0.2.53:53"
[sandbox.profiles.gw]
network_enabled = true
enabled_policies = []
[sandbox.profiles.gw.egress.gateway]
allow = ["api.test"]
[sandbox.profiles.plain]
enabled_policies = []
"""


@pytest.fixture(scope="module")
def gateway_daemon(warden_bin: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedDaemon]:
    config = Path(tmp_path_factory.mktemp("egress")) / "settings.toml"
    config.write_text(SETTINGS)
    d = EmbeddedDaemon(warden_bin, config=config)
    d.start()
    yield d
    d.stop()


async def test_rules_of_a_live_sandbox_are_replaced(gateway_daemon: EmbeddedDaemon) -> None:
    assert gateway_daemon.url is not None
    async with AsyncWardenClient(gateway_daemon.url) as client:
        async with await client.create_sandbox(profile="gw") as sb:
            now = await sb.set_egress(allow=["api.test", "*.pypi.org:443"], deny=["bad.pypi.org"])
            assert now == GatewayRules(allow=["api.test", "*.pypi.org:443"], deny=["bad.pypi.org"])
            with pytest.raises(InvalidRequestError) as e:
                await sb.set_egress(allow=["api.test:99999"])
            assert "99999" in str(e.value)
        async with await client.create_sandbox(profile="plain") as plain:
            with pytest.raises(InvalidRequestError) as e:
                await plain.set_egress(allow=["api.test"])
            assert "egress" in str(e.value)


def test_the_same_through_the_sync_client(gateway_daemon: EmbeddedDaemon) -> None:
    assert gateway_daemon.url is not None
    with WardenClient(gateway_daemon.url) as client:
        with client.create_sandbox(profile="gw") as sb:
            assert client.set_egress(sb.id, deny=["api.test"]) == GatewayRules(deny=["api.test"])
            assert sb.set_egress(allow=["api.test"]).allow == ["api.test"]
