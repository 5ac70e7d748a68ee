"""The package ships py.typed, so its annotations must hold: mypy --strict over the source."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src" / "warden_sandbox"


def test_py_typed_is_shipped() -> None:
    assert (SRC / "py.typed").is_file()


def test_mypy_strict(tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(tmp_path), str(SRC)],
        capture_output=True, text=True, timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr
