"""``SandboxRequest`` and ``SandboxResult``, the source document's entities.

``SandboxResult`` *is* the wire type :class:`~warden_sandbox.models.ExecResult` (the daemon's
result, field for field) and ``SandboxArtifact`` is :class:`~warden_sandbox.models.Artifact`,
so there is one result type whichever API a caller uses.
"""

from __future__ import annotations

from typing import Optional, Union

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, field_validator

from ..enums import PlatformLanguage
from ..models import Artifact, ExecResult

__all__ = ["SandboxRequest", "SandboxResult", "SandboxArtifact"]

SandboxResult = ExecResult
"""The outcome of a sandbox execution: ``stdout``, ``stderr``, ``exit_code``, ``reason``,
``artifacts``, … and ``is_success`` (True if the process exited with code 0)."""

SandboxArtifact = Artifact
"""A file the code left in ``/workspace/output``: ``file_name``, ``mime_type``, ``size``,
``content`` (the bytes), ``sha256``."""


class SandboxRequest(BaseModel):
    """Code to run and the profile to run it under.

    ``profile`` is a profile of the daemon's settings (``standard``, ``data_science``, …);
    None means the daemon's default profile. ``timeout_seconds`` (also accepted as
    ``timeout``) and ``memory_mb`` may only lower the profile's limits: asking for more is a
    :class:`~warden_sandbox.exceptions.SecurityViolationError` from the resource quota policy.
    """

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    code: str
    language: Union[PlatformLanguage, str] = PlatformLanguage.PYTHON
    profile: Optional[str] = None
    timeout_seconds: Optional[float] = Field(
        default=None, validation_alias=AliasChoices("timeout_seconds", "timeout")
    )
    memory_mb: Optional[int] = None
    stdin: Optional[str] = None

    @field_validator("language", mode="before")
    @classmethod
    def _known_language(cls, value: object) -> object:
        if isinstance(value, str) and not isinstance(value, PlatformLanguage):
            try:
                return PlatformLanguage(value)
            except ValueError:
                return value.strip().lower()
        return value

    @property
    def language_name(self) -> str:
        """The language as the daemon names it."""
        lang = self.language
        return lang.value if isinstance(lang, PlatformLanguage) else str(lang)
