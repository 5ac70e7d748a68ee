"""Fixtures of the playground's browser tests: one daemon and one chromium for the session."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Iterator

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from harness import Daemon, launch  # noqa: E402


@pytest.fixture(scope="session")
def daemon() -> Iterator[Daemon]:
    with Daemon() as d:
        yield d


@pytest.fixture(scope="session")
def browser() -> Iterator[object]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = launch(p)
        yield b
        b.close()
