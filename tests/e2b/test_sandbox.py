"""The control plane through the official SDK: create (metadata, envs, timeout, templates),
get_info, is_running, list with a metadata filter, connect, set_timeout (honoured: the sandbox
is gone after it), kill; a sandbox made through E2B is a Warden sandbox."""

from __future__ import annotations

import time
import uuid

import httpx
import pytest
from e2b import SandboxQuery
from e2b.exceptions import NotFoundException, SandboxException
from e2b_code_interpreter import Sandbox


def test_the_issue_example_runs_unchanged(daemon):
    sbx = Sandbox.create()
    execution = sbx.run_code("x = 1\nx + 1")
    assert execution.text == "2"
    sbx.files.write("/home/user/data.csv", "a,b\n1,2\n")
    assert sbx.files.read("/home/user/data.csv") == "a,b\n1,2\n"
    listing = sbx.commands.run("ls -la /home/user").stdout
    assert "data.csv" in listing
    sbx.kill()


def test_create_info_list_connect_kill(daemon):
    tag = uuid.uuid4().hex[:8]
    sbx = Sandbox.create(metadata={"suite": "e2b", "tag": tag}, envs={"GREETING": "hi there"}, timeout=120)
    try:
        info = sbx.get_info()
        assert info.sandbox_id == sbx.sandbox_id
        assert info.metadata == {"suite": "e2b", "tag": tag}
        assert info.template_id == "code-interpreter-v1"
        assert 110 <= (info.end_at - info.started_at).total_seconds() <= 121
        assert sbx.is_running()
        # The sandbox's environment variables reach commands and code.
        assert sbx.commands.run("echo $GREETING").stdout == "hi there\n"
        assert sbx.run_code("import os; os.environ['GREETING']").text == "'hi there'"
        # Listed by its metadata, and not by another value.
        found = Sandbox.list(query=SandboxQuery(metadata={"tag": tag})).next_items()
        assert [s.sandbox_id for s in found] == [sbx.sandbox_id]
        assert Sandbox.list(query=SandboxQuery(metadata={"tag": "other"})).next_items() == []
        # It is a Warden sandbox: the native API shows it, with its metadata as labels.
        native = httpx.get(f"{daemon.url}/v1/sandboxes", params={"label": f"tag={tag}"}).json()
        assert [s["id"] for s in native["sandboxes"]] == [sbx.sandbox_id]
        # connect: the same sandbox, its state kept.
        sbx.run_code("kept = 41")
        again = Sandbox.connect(sbx.sandbox_id)
        assert again.run_code("kept + 1").text == "42"
    finally:
        assert sbx.kill() is True
    assert not sbx.is_running()
    assert Sandbox.kill(sbx.sandbox_id) is False
    with pytest.raises(NotFoundException):
        Sandbox.get_info(sbx.sandbox_id)


def test_set_timeout_is_honoured(daemon):
    sbx = Sandbox.create(timeout=300)
    sbx.set_timeout(2)
    assert (sbx.get_info().end_at - sbx.get_info().started_at).total_seconds() <= 4
    deadline = time.monotonic() + 15
    while sbx.is_running() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not sbx.is_running()
    assert Sandbox.kill(sbx.sandbox_id) is False


def test_templates_are_profiles(daemon):
    sbx = Sandbox.create(template="restricted")
    try:
        assert sbx.get_info().template_id == "restricted"
        native = httpx.get(f"{daemon.url}/v1/sandboxes/{sbx.sandbox_id}").json()
        assert native["profile"] == "restricted"
    finally:
        sbx.kill()
    with pytest.raises(SandboxException, match="not found"):
        Sandbox.create(template="no-such-template")


def test_pause_and_connect(daemon):
    sbx = Sandbox.create()
    try:
        sbx.run_code("before = 'pause'")
        assert sbx.pause() is True
        assert sbx.get_info().state.value == "paused"
        assert Sandbox.pause(sbx.sandbox_id) is False  # already paused
        # connect resumes it, with its state.
        again = Sandbox.connect(sbx.sandbox_id)
        assert again.get_info().state.value == "running"
        assert again.run_code("before").text == "'pause'"
    finally:
        sbx.kill()


def test_unsupported_features_are_clear_sdk_errors(daemon):
    sbx = Sandbox.create()
    try:
        with pytest.raises(SandboxException, match="not supported"):
            sbx.create_snapshot()
        with pytest.raises(SandboxException, match="not supported"):
            sbx.files.watch_dir("/home/user")
        with pytest.raises(SandboxException):
            Sandbox.create(lifecycle={"on_timeout": "pause"})
        # The sandbox is still usable after each refusal.
        assert sbx.run_code("1 + 1").text == "2"
    finally:
        sbx.kill()
