"""Live commands through the official SDK, sync and async: a command's own environment and
working directory, its live stdin (send_stdin, close_stdin), connecting to a running
background command, and background commands that leave the sandbox usable meanwhile."""

from __future__ import annotations

import pytest
from e2b import CommandExitException
from e2b.exceptions import InvalidArgumentException, NotFoundException, SandboxException
from e2b_code_interpreter import AsyncSandbox, Sandbox


@pytest.fixture(scope="module")
def sbx(daemon):
    s = Sandbox.create(envs={"FROM_SANDBOX": "sandbox"})
    yield s
    s.kill()


def read_until(handle, text: str) -> str:
    """The command's stdout as it streams, until `text` shows (the handle's own iteration)."""
    seen = ""
    for stdout, _, _ in handle:
        seen += stdout or ""
        if text in seen:
            return seen
    raise AssertionError(f"the command ended before {text!r} showed; saw {seen!r}")


def test_a_commands_env_and_cwd_are_its_own(sbx):
    sbx.files.make_dir("/home/user/proj/sub")
    r = sbx.commands.run(
        'pwd; echo "$ONE|$TWO|$FROM_SANDBOX|$HOME"',
        envs={"ONE": "a b", "TWO": "it's $x", "FROM_SANDBOX": "overridden"},
        cwd="/home/user/proj/sub",
    )
    assert r.stdout == "/home/user/proj/sub\na b|it's $x|overridden|/home/user\n"
    # Relative to /home/user, and only for that command.
    assert sbx.commands.run("pwd", cwd="proj").stdout == "/home/user/proj\n"
    assert sbx.commands.run('pwd; echo "$ONE|$FROM_SANDBOX"').stdout == "/home/user\n|sandbox\n"
    assert sbx.commands.run("pwd", cwd="/tmp").stdout == "/tmp\n"
    # What cannot be: the SDK's invalid-argument error, naming the field.
    with pytest.raises(InvalidArgumentException, match="process.cwd"):
        sbx.commands.run("pwd", cwd="/etc")
    with pytest.raises(InvalidArgumentException, match="process.envs"):
        sbx.commands.run("true", envs={"BAD-NAME": "x"})
    with pytest.raises(InvalidArgumentException, match="WARDEN_"):
        sbx.commands.run("true", envs={"WARDEN_OUTPUT_DIR": "/"})
    # A folder that does not exist: the command cannot start, and says where.
    with pytest.raises(SandboxException, match="working directory /home/user/nope"):
        sbx.commands.run("pwd", cwd="/home/user/nope")


def test_a_sandboxs_envs_are_checked_at_create(daemon):
    with pytest.raises(SandboxException, match="envVars"):
        Sandbox.create(envs={"WARDEN_OUTPUT_DIR": "/"})
    with pytest.raises(SandboxException, match="envVars"):
        Sandbox.create(envs={"NOT-A-NAME": "x"})


def test_send_stdin_is_echoed_by_cat_and_close_stdin_ends_it(sbx):
    handle = sbx.commands.run("cat", background=True, stdin=True)
    handle.send_stdin("ping\n")
    assert read_until(handle, "ping\n") == "ping\n"
    sbx.commands.send_stdin(handle.pid, b"pong\n")
    assert read_until(handle, "pong\n") == "pong\n"
    handle.close_stdin()
    result = handle.wait()
    assert (result.exit_code, result.stdout) == (0, "ping\npong\n")
    # The command is gone: its stdin with it.
    with pytest.raises(NotFoundException):
        sbx.commands.send_stdin(handle.pid, "late")


def test_stdin_is_empty_without_stdin_true_and_sending_says_why(sbx):
    assert sbx.commands.run("cat; echo end").stdout == "end\n"
    handle = sbx.commands.run("sleep 30", background=True)
    with pytest.raises(SandboxException, match="without stdin"):
        handle.send_stdin("x")
    assert handle.kill() is True


def test_connect_to_a_running_background_command(sbx):
    handle = sbx.commands.run(
        'read line; echo "got $line"; for i in 1 2 3; do echo tick $i; done',
        background=True,
        stdin=True,
    )
    assert handle.pid in [p.pid for p in sbx.commands.list()]
    # A second stream of the same command: it hears what comes from now on.
    again = sbx.commands.connect(handle.pid)
    assert again.pid == handle.pid
    again.send_stdin("hello\n")
    result = again.wait()
    assert (result.exit_code, result.stdout) == (0, "got hello\ntick 1\ntick 2\ntick 3\n")
    # The first stream saw all of it too.
    assert handle.wait().stdout == "got hello\ntick 1\ntick 2\ntick 3\n"
    with pytest.raises(SandboxException):
        sbx.commands.connect(handle.pid).wait()


def test_a_background_command_leaves_the_sandbox_usable(sbx):
    # `cat` runs until its stdin closes: everything below happens while it runs.
    server = sbx.commands.run("echo up; cat", background=True, stdin=True)
    assert read_until(server, "up\n") == "up\n"
    assert sbx.run_code("21 * 2").text == "42"
    assert sbx.commands.run("echo foreground").stdout == "foreground\n"
    other = sbx.commands.run("sleep 30", background=True)
    sbx.files.write("/home/user/while.txt", "written meanwhile")
    assert sbx.files.read("/home/user/while.txt") == "written meanwhile"
    assert sbx.files.exists("/home/user/while.txt")
    assert "while.txt" in [e.name for e in sbx.files.list("/home/user")]
    running = [p.pid for p in sbx.commands.list()]
    assert server.pid in running and other.pid in running
    assert other.kill() is True
    with pytest.raises(CommandExitException):
        other.wait()
    server.send_stdin("still here\n")
    assert read_until(server, "still here\n") == "still here\n"
    server.close_stdin()
    assert server.wait().stdout == "up\nstill here\n"


async def test_live_commands_async(daemon):
    sbx = await AsyncSandbox.create()
    try:
        r = await sbx.commands.run('pwd; echo "$K"', envs={"K": "v"}, cwd="/tmp")
        assert r.stdout == "/tmp\nv\n"
        seen: list[str] = []
        handle = await sbx.commands.run("cat", background=True, stdin=True, on_stdout=seen.append)
        await handle.send_stdin("async ping\n")
        # While `cat` runs: code, commands and files.
        assert (await sbx.run_code("6 * 7")).text == "42"
        assert (await sbx.commands.run("echo fg")).stdout == "fg\n"
        await sbx.files.write("/home/user/a.txt", "a")
        assert await sbx.files.exists("/home/user/a.txt")
        again = await sbx.commands.connect(handle.pid)
        await sbx.commands.send_stdin(handle.pid, "second\n")
        await handle.close_stdin()
        result = await handle.wait()
        assert (result.exit_code, result.stdout) == (0, "async ping\nsecond\n")
        assert "".join(seen) == "async ping\nsecond\n"
        assert (await again.wait()).stdout.endswith("second\n")
        with pytest.raises(InvalidArgumentException, match="process.cwd"):
            await sbx.commands.run("pwd", cwd="/usr")
    finally:
        await sbx.kill()
