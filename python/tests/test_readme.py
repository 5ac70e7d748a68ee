"""Every ```python example of README.md that is followed by a ```text block runs, against the
session's daemon (``WARDEN_URL``), and prints exactly that block (a line that is only ``...``
stands for any lines, as doctest's ELLIPSIS)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import List, Tuple

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
BLOCK = re.compile(r"```python\n(.*?)```\s*```text\n(.*?)```", re.S)


def examples() -> List[Tuple[str, str, str]]:
    text = README.read_text()
    found = []
    for match in BLOCK.finditer(text):
        heading = re.findall(r"^## (.+)$", text[: match.start()], re.M)
        found.append((heading[-1] if heading else "top", match.group(1), match.group(2)))
    return found


EXAMPLES = examples()


def test_the_readme_has_examples() -> None:
    assert len(EXAMPLES) >= 8


@pytest.mark.parametrize("code,expected", [(c, e) for _, c, e in EXAMPLES],
                         ids=[f"{i}-{h}" for i, (h, _, _) in enumerate(EXAMPLES)])
def test_readme_example(code: str, expected: str, base_url: str, tmp_path: Path) -> None:
    env = {**os.environ, "WARDEN_URL": base_url}
    run = subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert matches(expected, run.stdout), f"expected:\n{expected}\ngot:\n{run.stdout}"


def matches(expected: str, actual: str) -> bool:
    parts = []
    for line in expected.splitlines(keepends=True):
        parts.append(r"(?:.*\n)*?" if line.strip() == "..." else re.escape(line))
    return re.fullmatch("".join(parts), actual) is not None


def test_ellipsis_matching() -> None:
    assert matches("a\n  ...\nz\n", "a\nb\nc\nz\n")
    assert matches("a\n...\nz\n", "a\nz\n")
    assert not matches("a\n...\nz\n", "a\nb\n")
    assert not matches("a\nz\n", "a\nb\nz\n")
