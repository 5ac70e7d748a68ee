"""run_code through the official SDK: results (text, a matplotlib PNG, a DataFrame as HTML),
errors, timeouts, callbacks, state across calls, contexts."""

from __future__ import annotations

import base64

import pytest
from e2b_code_interpreter import Sandbox


@pytest.fixture(scope="module")
def sbx(daemon):
    s = Sandbox.create()
    yield s
    s.kill()


def test_state_text_and_callbacks(sbx):
    out, err, results, errors = [], [], [], []
    execution = sbx.run_code(
        "import sys\nprint('to out')\nprint('to err', file=sys.stderr)\nvalue = 6 * 7\nvalue",
        on_stdout=lambda m: out.append(m.line),
        on_stderr=lambda m: err.append(m.line),
        on_result=results.append,
        on_error=errors.append,
    )
    assert execution.text == "42"
    assert "".join(out) == "to out\n" and "".join(err) == "to err\n"
    assert execution.logs.stdout == out
    assert [r.text for r in results] == ["42"] and results[0].is_main_result
    assert errors == [] and execution.error is None
    assert execution.execution_count is not None
    assert sbx.run_code("value + 1").text == "43"


def test_an_exception_is_execution_error(sbx):
    errors = []
    execution = sbx.run_code("1 / 0", on_error=errors.append)
    assert execution.error is not None
    assert execution.error.name == "ZeroDivisionError"
    assert "division by zero" in execution.error.value
    assert "ZeroDivisionError" in execution.error.traceback
    assert errors and errors[0].name == "ZeroDivisionError"
    # The context lives on.
    assert sbx.run_code("value").text == "42"


def test_a_chart_is_a_png_and_a_dataframe_is_html(sbx):
    execution = sbx.run_code(
        "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.title('squares')\nplt.show()"
    )
    pngs = [r.png for r in execution.results if r.png]
    assert len(pngs) == 1, execution
    assert base64.b64decode(pngs[0]).startswith(b"\x89PNG\r\n\x1a\n")
    execution = sbx.run_code("import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': [3, 4]})")
    main = [r for r in execution.results if r.is_main_result]
    assert len(main) == 1 and main[0].html and "<table" in main[0].html
    assert "a" in main[0].text


def test_files_written_by_code_are_files_of_the_sdk(sbx):
    sbx.run_code("open('/home/user/from_code.txt', 'w').write('written by code')")
    assert sbx.files.read("/home/user/from_code.txt") == "written by code"
    assert sbx.run_code("import os; os.getcwd()").text == "'/home/user'"


def test_other_languages_run_in_the_sandbox(sbx):
    execution = sbx.run_code("console.log(6 * 7)", language="javascript")
    assert execution.logs.stdout == ["42\n"]
    execution = sbx.run_code("echo $((6 * 7)); exit 3", language="bash")
    assert execution.logs.stdout == ["42\n"]
    assert execution.error is not None and "3" in execution.error.value


def test_contexts(sbx):
    ctx = sbx.create_code_context()
    assert ctx.language == "python" and ctx.cwd == "/home/user"
    sbx.run_code("inside = 'ctx'", context=ctx)
    assert sbx.run_code("inside", context=ctx).text == "'ctx'"
    # Contexts do not share state with the default one.
    assert sbx.run_code("inside").error.name == "NameError"
    assert ctx.id in [c.id for c in sbx.list_code_contexts()]
    sbx.restart_code_context(ctx)
    assert sbx.run_code("inside", context=ctx).error.name == "NameError"
    sbx.remove_code_context(ctx)
    assert ctx.id not in [c.id for c in sbx.list_code_contexts()]


def test_a_cell_past_the_timeout_is_a_timeout_error(daemon):
    # The `short` template's profile has a 3-second timeout.
    s = Sandbox.create(template="short")
    try:
        execution = s.run_code("import time\ntime.sleep(30)")
        assert execution.error is not None and execution.error.name == "TimeoutError", execution
        # The context was interrupted, not lost with its sandbox.
        assert s.run_code("1 + 1").text == "2"
    finally:
        s.kill()


def test_the_sdk_timeout_raises(daemon):
    from e2b.exceptions import TimeoutException

    s = Sandbox.create(template="short")
    try:
        with pytest.raises(TimeoutException):
            s.run_code("import time\ntime.sleep(10)", timeout=1)
    finally:
        s.kill()
