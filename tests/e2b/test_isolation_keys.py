"""Sandboxes made through E2B keep Warden's isolation (no network, read-only root, limits, a
forbidden import refused under a restrictive profile), and E2B keys are Warden keys."""

from __future__ import annotations

import httpx
import pytest
from e2b import CommandExitException
from e2b.exceptions import AuthenticationException, NotFoundException, SandboxException
from e2b_code_interpreter import Sandbox

from conftest import KEY_A, KEY_B


@pytest.fixture(scope="module")
def sbx(daemon):
    s = Sandbox.create()
    yield s
    s.kill()


def test_no_network(sbx):
    execution = sbx.run_code(
        "import socket\ns = socket.socket()\ns.settimeout(3)\ns.connect(('1.1.1.1', 53))"
    )
    assert execution.error is not None and execution.error.name in ("OSError", "PermissionError", "ConnectionRefusedError"), execution
    r = sbx.commands.run("cat /sys/class/net/*/operstate 2>/dev/null; ls /sys/class/net 2>/dev/null || true")
    assert "eth" not in r.stdout


def test_read_only_root_and_no_host_secrets(sbx):
    with pytest.raises(CommandExitException) as e:
        sbx.commands.run("touch /usr/evil")
    assert "Read-only" in e.value.stderr or "Permission denied" in e.value.stderr
    with pytest.raises(CommandExitException):
        sbx.commands.run("cat /etc/shadow")
    with pytest.raises(SandboxException):
        sbx.files.write("/usr/evil", "x")
    assert sbx.commands.run("id -u").stdout.strip() != "0"


def test_limits(sbx):
    # The profile's memory limit (512 MB) ends a cell that wants more.
    execution = sbx.run_code("x = bytearray(2 * 1024 * 1024 * 1024)")
    assert execution.error is not None, execution
    # The pids limit: a fork bomb ends, and the sandbox lives on.
    with pytest.raises(CommandExitException):
        sbx.commands.run("for i in $(seq 400); do sleep 5 & done; wait", timeout=30)
    assert sbx.commands.run("echo alive").stdout == "alive\n"


def test_a_forbidden_import_is_refused_under_a_restrictive_profile(daemon):
    s = Sandbox.create(template="restricted")
    try:
        execution = s.run_code("import socket")
        assert execution.error is not None and execution.error.name == "PolicyViolation", execution
        assert "socket" in execution.error.value
        assert s.run_code("import math\nmath.sqrt(16)").text == "4.0"
    finally:
        s.kill()


def _opts(d, key):
    return dict(api_url=d.url, sandbox_url=d.url, api_key=key)


def test_keys_are_warden_keys(keyed_daemon):
    with pytest.raises(AuthenticationException):
        Sandbox.create(**_opts(keyed_daemon, "e2b_" + "c3" * 20))
    a = Sandbox.create(**_opts(keyed_daemon, KEY_A))
    try:
        assert a.run_code("1 + 2").text == "3"
        # Key b neither sees nor reaches key a's sandbox.
        assert Sandbox.list(**_opts(keyed_daemon, KEY_B)).next_items() == []
        with pytest.raises(NotFoundException):
            Sandbox.get_info(a.sandbox_id, **_opts(keyed_daemon, KEY_B))
        with pytest.raises(SandboxException):
            Sandbox.connect(a.sandbox_id, **_opts(keyed_daemon, KEY_B))
        assert Sandbox.kill(a.sandbox_id, **_opts(keyed_daemon, KEY_B)) is False
        # Key a sees it on Warden's own API too.
        native = httpx.get(
            f"{keyed_daemon.url}/v1/sandboxes", headers={"Authorization": f"Bearer {KEY_A}"}
        ).json()
        assert [s["id"] for s in native["sandboxes"]] == [a.sandbox_id]
        # The access token is enforced where the SDK sends it.
        envd = {"E2b-Sandbox-Id": a.sandbox_id, "E2b-Sandbox-Port": "49983"}
        r = httpx.get(f"{keyed_daemon.url}/files", params={"path": "x"}, headers={**envd, "X-Access-Token": "wrong"})
        assert r.status_code == 401
        r = httpx.get(f"{keyed_daemon.url}/files", params={"path": "x"}, headers=envd)
        assert r.status_code == 401
        jupyter = {"E2b-Sandbox-Id": a.sandbox_id, "E2b-Sandbox-Port": "49999"}
        r = httpx.post(f"{keyed_daemon.url}/execute", json={"code": "1"}, headers=jupyter)
        assert r.status_code == 401
    finally:
        assert a.kill() is True
