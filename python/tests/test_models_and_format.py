"""The wire models and the LLM-facing report, without a daemon."""

from __future__ import annotations

import base64

import pytest
from pydantic import ValidationError

from warden_sandbox import (
    Artifact,
    ExecResult,
    PlatformLanguage,
    Reason,
    SandboxRequest,
    SandboxResult,
    format_result,
)
from warden_sandbox.models import EndEvent, UnknownEvent, parse_event
from warden_sandbox.tool import sanitize, truncate


def result(**fields) -> ExecResult:  # type: ignore[no-untyped-def]
    base = dict(stdout="", stderr="", exit_code=0, signal=None, reason="exited", duration_ms=5,
                stdout_truncated=False, stderr_truncated=False, artifacts=[])
    base.update(fields)
    return ExecResult.model_validate(base)


def test_artifact_bytes_are_base64_in_json_both_ways() -> None:
    a = Artifact.model_validate({"name": "a.txt", "size": 2, "mime_type": "text/plain", "sha256": "x", "bytes": "aGk="})
    assert a.content == b"hi"
    assert a.file_name == "a.txt"
    assert a.model_dump(mode="json", by_alias=True)["bytes"] == "aGk="
    with pytest.raises(ValidationError):
        Artifact.model_validate({"name": "a", "size": 1, "mime_type": "x", "sha256": "x", "bytes": "not base64!"})


def test_sandbox_result_is_the_wire_result() -> None:
    assert SandboxResult is ExecResult
    r = result(exit_code=0)
    assert r.is_success
    assert not result(exit_code=1).is_success
    assert not result(exit_code=None, reason="timeout").is_success
    assert result(exit_code=None, signal=9, reason="timeout").shell_status == 124
    assert result(exit_code=None, signal=11, reason="signal").shell_status == 139


def test_unknown_fields_from_a_newer_daemon_are_ignored() -> None:
    r = result(new_field={"x": 1})
    assert r.is_success


def test_events_parse_by_type() -> None:
    end = parse_event({"type": "end", **result(stdout="x").model_dump(mode="json", by_alias=True)})
    assert isinstance(end, EndEvent) and end.stdout == "x"
    unknown = parse_event({"type": "result", "text": "3", "is_main_result": True})
    assert isinstance(unknown, UnknownEvent) and unknown.data["text"] == "3"


def test_reason_limits() -> None:
    assert Reason.TIMEOUT.is_limit and Reason.OUTPUT.is_limit
    assert not Reason.EXITED.is_limit and not Reason.SIGNAL.is_limit


def test_request_language_and_timeout_alias() -> None:
    assert SandboxRequest(code="x", language="Python").language is PlatformLanguage.PYTHON
    assert SandboxRequest(code="x", language="ruby").language_name == "ruby"
    assert SandboxRequest(code="x", timeout=5).timeout_seconds == 5
    assert SandboxRequest(code="x").language_name == "python"
    with pytest.raises(ValidationError):
        SandboxRequest(code="x", bogus=1)


def test_truncate_keeps_both_ends_and_says_how_much() -> None:
    text = "".join(chr(ord("a") + i % 26) for i in range(100))
    cut = truncate(text, 20)
    assert cut.startswith(text[:10]) and cut.endswith(text[-10:])
    assert "[... 80 characters truncated ...]" in cut
    assert truncate("short", 20) == "short"


def test_report_sections() -> None:
    art = Artifact(name="plot.png", size=3, mime_type="image/png", sha256="x", content=b"abc")
    r = result(stdout="12.0\n", stderr="warning\n", exit_code=1, artifacts=[art],
               skipped_artifacts=[{"name": "link", "why": "not a regular file"}])
    assert format_result(r) == (
        "STDOUT:\n12.0\n\n"
        "STDERR:\nwarning\n\n"
        "ERROR:\nthe program exited with code 1\n\n"
        "FILES:\n- plot.png (image/png, 3 bytes)\n- link: not returned (not a regular file)"
    )
    assert format_result(result()) == "(no output)"
    assert format_result(result(stdout="x" * 50), max_output_length=10).count("truncated") == 1
    flooded = format_result(result(stdout="y\n", stdout_truncated=True, reason="output", exit_code=None, signal=9))
    assert "output limit" in flooded and "ERROR:\nthe output passed its size limit" in flooded


def test_report_of_memory_and_signal() -> None:
    assert format_result(result(reason="memory", exit_code=None, signal=9)).startswith("ERROR:\nthe memory limit")
    assert format_result(result(reason="signal", exit_code=None, signal=11)) == "ERROR:\nthe program was killed by signal 11"


def test_base64_is_strict() -> None:
    good = base64.b64encode(b"\x00\xff").decode()
    a = Artifact.model_validate({"name": "b", "size": 2, "mime_type": "x", "sha256": "x", "bytes": good})
    assert a.content == b"\x00\xff"


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("\x1b[31mred\x1b[0m plain", "red plain"),
        ("\x1b[1;38;5;208mbold\x1b[m", "bold"),
        ("\x1b[2J\x1b[Hcleared", "cleared"),
        ("\x1b[?25lhidden cursor\x1b[?25h", "hidden cursor"),
        ("\x1b]0;window title\x07text", "text"),
        ("\x1b]8;;https://evil.example\x1b\\link\x1b]8;;\x1b\\", "link"),
        ("\x1bP1$r0m\x1b\\dcs", "dcs"),
        ("\x1b_apc\x07\x1b^pm\x07\x1bXsos\x07after", "after"),
        ("\x1b7saved\x1b8", "saved"),
        ("\x1b(Bcharset", "charset"),
        ("\x1b=keypad\x1b>", "keypad"),
        ("\x9b31m8-bit csi", "8-bit csi"),
        ("\x9d0;title\x9c8-bit osc", "8-bit osc"),
        ("lone escape at the end\x1b", "lone escape at the end"),
        ("\x1b\x1b[31mtwo", "two"),
        ("\x1b]0;no end\nvisible", "\nvisible"),
        ("\x1b[31\néa", "\néa"),
        ("a\tb\nc", "a\tb\nc"),
        ("bell\x07 nul\x00 bs\x08 del\x7f c1\x85.", "bell nul bs del c1."),
        ("\x01\x02\x0b\x0c\x1c\x1f", ""),
        (b"bad \xff\xfe bytes", "bad \ufffd\ufffd bytes"),
        ("lone \udcff surrogate", "lone \ufffd surrogate"),
        ("ünïcödé ✓ 😀", "ünïcödé ✓ 😀"),
        ("windows\r\nlines\r\n", "windows\nlines\n"),
        ("10%\r50%\r100%\ndone", "100%\ndone"),
        ("progress 100%\r\n", "progress 100%\n"),
        ("kept\r", "kept"),
        ("\r\r", ""),
    ],
)
def test_sanitize_is_the_rust_formatters(text, want) -> None:  # type: ignore[no-untyped-def]
    assert sanitize(text) == want


def test_escapes_and_controls_never_reach_the_model() -> None:
    art = Artifact(name="out\x1b[8m.csv", size=3, mime_type="text/csv", sha256="00", content=b"a,b")
    r = result(
        stdout="\x1b[32mok\x1b[0m 3 tests\r\n\x1b]0;pwned\x07downloading 10%\rdownloading 100%\n\tdone\x07\n",
        stderr="\x1b[1;31mwarning\x1b[0m: \x1b[4mdeprecated\x1b[24m \ufffd\x00\n",
        exit_code=1,
        artifacts=[art],
    )
    assert format_result(r) == (
        "STDOUT:\nok 3 tests\ndownloading 100%\n\tdone\n\n"
        "STDERR:\nwarning: deprecated \ufffd\n\n"
        "ERROR:\nthe program exited with code 1\n\n"
        "FILES:\n- out.csv (text/csv, 3 bytes)"
    )


def test_egress_refusals_are_typed_and_reported_to_the_model() -> None:
    result = SandboxResult.model_validate(
        {
            "stdout": "",
            "stderr": "",
            "exit_code": 0,
            "signal": None,
            "reason": "exited",
            "duration_ms": 5,
            "artifacts": [],
            "egress_denied": [{"host": "evil.test", "port": 443, "why": "not in the allow-list"}],
            "secrets_used": [{"name": "api", "host": "api.test"}],
        }
    )
    assert result.egress_denied[0].why == "not in the allow-list"
    assert result.secrets_used[0].host == "api.test"
    assert format_result(result) == "EGRESS:\n- evil.test:443 refused: not in the allow-list"
