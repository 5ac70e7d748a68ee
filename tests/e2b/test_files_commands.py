"""files and commands through the official SDK."""

from __future__ import annotations

import io

import pytest
from e2b import CommandExitException, FileType
from e2b.exceptions import SandboxException, TimeoutException
from e2b_code_interpreter import Sandbox


@pytest.fixture(scope="module")
def sbx(daemon):
    s = Sandbox.create()
    yield s
    s.kill()


def test_files(sbx):
    info = sbx.files.write("/home/user/notes/a.txt", "hello")
    assert info.path == "/home/user/notes/a.txt" and info.name == "a.txt"
    assert sbx.files.read("/home/user/notes/a.txt") == "hello"
    assert sbx.files.read("notes/a.txt") == "hello"  # relative to /home/user
    sbx.files.write("/home/user/blob.bin", b"\x00\xff\x10")
    assert bytes(sbx.files.read("/home/user/blob.bin", format="bytes")) == b"\x00\xff\x10"
    names = {e.name: e for e in sbx.files.list("/home/user")}
    assert names["notes"].type == FileType.DIR and names["blob.bin"].type == FileType.FILE
    assert names["blob.bin"].size == 3
    assert sbx.files.exists("/home/user/notes/a.txt")
    assert not sbx.files.exists("/home/user/nope.txt")
    assert sbx.files.make_dir("/home/user/newdir") is True
    assert sbx.files.make_dir("/home/user/newdir") is False
    moved = sbx.files.rename("/home/user/notes/a.txt", "/home/user/newdir/b.txt")
    assert moved.path == "/home/user/newdir/b.txt"
    got = sbx.files.get_info("/home/user/newdir/b.txt")
    assert got.type == FileType.FILE and got.size == 5
    assert sbx.files.get_info("/home/user/newdir").type == FileType.DIR
    sbx.files.remove("/home/user/newdir")
    assert not sbx.files.exists("/home/user/newdir/b.txt")
    # Outside the workspace: through the sandbox itself (its /tmp).
    sbx.files.write("/tmp/t.txt", "in tmp")
    assert sbx.files.read("/tmp/t.txt") == "in tmp"
    assert sbx.commands.run("cat /tmp/t.txt").stdout == "in tmp"
    with pytest.raises(SandboxException):
        sbx.files.read("/home/user/nope.txt")


def test_uploads_of_every_kind(sbx):
    # A file object goes as application/octet-stream (envd >= 0.5.7), text and bytes as
    # multipart, several files as one multipart body without a path parameter.
    sbx.files.write("/home/user/io.bin", io.BytesIO(b"from a file object"))
    assert sbx.files.read("/home/user/io.bin") == "from a file object"
    infos = sbx.files.write_files(
        [{"path": "/home/user/m/one.txt", "data": "1"}, {"path": "m/two.bin", "data": b"\x02"}]
    )
    assert sorted(i.path for i in infos) == ["/home/user/m/one.txt", "/home/user/m/two.bin"]
    assert sbx.files.read("m/one.txt") == "1"
    assert bytes(sbx.files.read("/home/user/m/two.bin", format="bytes")) == b"\x02"
    chunks = b"".join(sbx.files.read("/home/user/io.bin", format="stream"))
    assert chunks == b"from a file object"


def test_commands(sbx):
    r = sbx.commands.run("echo out; echo err >&2")
    assert (r.stdout, r.stderr, r.exit_code) == ("out\n", "err\n", 0)
    assert sbx.commands.run("pwd").stdout == "/home/user\n"
    assert sbx.commands.run("pwd", cwd="/tmp").stdout == "/tmp\n"
    assert sbx.commands.run("echo \"$A-$B\"", envs={"A": "x y", "B": "it's"}).stdout == "x y-it's\n"
    seen = []
    sbx.commands.run("echo one; echo two", on_stdout=seen.append)
    assert "".join(seen) == "one\ntwo\n"
    with pytest.raises(CommandExitException) as e:
        sbx.commands.run("echo partial; exit 3")
    assert e.value.exit_code == 3 and e.value.stdout == "partial\n"
    with pytest.raises(TimeoutException):
        sbx.commands.run("sleep 20", timeout=1)
    # The sandbox is usable right after a timeout.
    assert sbx.commands.run("echo after").stdout == "after\n"


def test_background_commands(sbx):
    handle = sbx.commands.run("echo started; sleep 0.3; echo finished", background=True)
    result = handle.wait()
    assert result.stdout == "started\nfinished\n"
    handle = sbx.commands.run("sleep 30", background=True)
    assert handle.pid in [p.pid for p in sbx.commands.list()]
    assert handle.kill() is True
    with pytest.raises(CommandExitException):
        handle.wait()
    assert sbx.commands.kill(handle.pid) is False
