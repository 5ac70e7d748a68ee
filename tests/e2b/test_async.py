"""The async SDK (AsyncSandbox) against the same daemon."""

from __future__ import annotations

import pytest
from e2b import CommandExitException
from e2b_code_interpreter import AsyncSandbox


async def test_async_sandbox(daemon):
    sbx = await AsyncSandbox.create(metadata={"flavour": "async"})
    try:
        assert await sbx.is_running()
        seen = []
        execution = await sbx.run_code("y = 20\nprint('hi')\ny + 1", on_stdout=lambda m: seen.append(m.line))
        assert execution.text == "21" and seen == ["hi\n"]
        assert (await sbx.run_code("y * 2")).text == "40"
        await sbx.files.write("/home/user/async.txt", "async text")
        assert await sbx.files.read("/home/user/async.txt") == "async text"
        assert (await sbx.commands.run("cat async.txt")).stdout == "async text"
        with pytest.raises(CommandExitException):
            await sbx.commands.run("exit 5")
        handle = await sbx.commands.run("sleep 30", background=True)
        assert await handle.kill() is True
        ctx = await sbx.create_code_context()
        await sbx.run_code("z = 1", context=ctx)
        assert (await sbx.run_code("z", context=ctx)).text == "1"
        info = await sbx.get_info()
        assert info.metadata == {"flavour": "async"}
        await sbx.set_timeout(60)
    finally:
        assert await sbx.kill() is True
    assert not await sbx.is_running()
