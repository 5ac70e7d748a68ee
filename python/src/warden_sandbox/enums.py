"""Enumerations of the source document's API (its ``nala.athomic.enums``)."""

from __future__ import annotations

from enum import Enum
from typing import Optional

__all__ = ["PlatformLanguage"]


class PlatformLanguage(str, Enum):
    """The languages Warden's built-in runtimes run. A daemon configured with more runtimes
    accepts their names as plain strings wherever a ``PlatformLanguage`` is accepted."""

    PYTHON = "python"
    JAVASCRIPT = "javascript"
    BASH = "bash"

    @classmethod
    def _missing_(cls, value: object) -> Optional["PlatformLanguage"]:
        if isinstance(value, str):
            lowered = value.strip().lower()
            for member in cls:
                if member.value == lowered:
                    return member
        return None

    def __str__(self) -> str:
        return self.value
