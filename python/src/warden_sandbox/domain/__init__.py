"""The source document's domain entities (``nala.athomic.ai.sandbox.domain``)."""

from .entities import SandboxArtifact, SandboxRequest, SandboxResult

__all__ = ["SandboxRequest", "SandboxResult", "SandboxArtifact"]
