"""Every error code the daemon's source can answer with maps to a specific exception class, so a
new code on the Rust side cannot silently fall back to a generic one."""

from __future__ import annotations

import re
from pathlib import Path

from warden_sandbox.exceptions import _BY_CODE, SecurityViolationError, error_from_body

CRATES = Path(__file__).resolve().parents[2] / "crates"
SERVER = CRATES / "warden-server" / "src"
CODE = re.compile(r'(?:StatusCode|S)::[A-Z_]+\s*,\s*"([a-z_]+)"')
# The engine's codes (one list for every front-end): the arms of `EngineError::code`.
ENGINE_CODE_FN = re.compile(r"pub fn code\(&self\) -> &'static str \{(.*?)\n    \}\n", re.S)
ARM = re.compile(r'=>\s*"([a-z_]+)"')


def daemon_codes() -> set:
    codes = set()
    for source in SERVER.rglob("*.rs"):
        # Not the tests, nor the E2B drop-in (src/e2b/): its answers are in E2B's protocols,
        # with Connect's codes, never on Warden's API.
        if source.name != "tests.rs" and source.relative_to(SERVER).parts[0] not in ("e2b", "tests"):
            codes |= set(CODE.findall(source.read_text()))
    engine = ENGINE_CODE_FN.search((CRATES / "warden-engine" / "src" / "lib.rs").read_text())
    assert engine, "EngineError::code not found"
    codes |= set(ARM.findall(engine.group(1)))
    return codes


def test_every_daemon_error_code_is_mapped() -> None:
    codes = daemon_codes()
    assert {"unknown_profile", "policy_violation", "not_found"} <= codes  # the scan works
    assert codes - set(_BY_CODE) == set()


def test_a_violation_wins_over_the_code() -> None:
    body = {"error": {"code": "whatever", "message": "m", "violation": {"policy": "p", "kind": "k", "message": "m"}}}
    assert isinstance(error_from_body(400, body), SecurityViolationError)
