"""Every error code the daemon's source can answer with maps to a specific exception class, so a
new code on the Rust side cannot silently fall back to a generic one."""

from __future__ import annotations

import re
from pathlib import Path

from warden_sandbox.exceptions import _BY_CODE, SecurityViolationError, error_from_body

SERVER = Path(__file__).resolve().parents[2] / "crates" / "warden-server" / "src"
CODE = re.compile(r'(?:StatusCode|S)::[A-Z_]+\s*,\s*"([a-z_]+)"')


def daemon_codes() -> set:
    codes = set()
    for source in SERVER.rglob("*.rs"):
        if source.name != "tests.rs":
            codes |= set(CODE.findall(source.read_text()))
    return codes


def test_every_daemon_error_code_is_mapped() -> None:
    codes = daemon_codes()
    assert {"unknown_profile", "policy_violation", "not_found"} <= codes  # the scan works
    assert codes - set(_BY_CODE) == set()


def test_a_violation_wins_over_the_code() -> None:
    body = {"error": {"code": "whatever", "message": "m", "violation": {"policy": "p", "kind": "k", "message": "m"}}}
    assert isinstance(error_from_body(400, body), SecurityViolationError)
