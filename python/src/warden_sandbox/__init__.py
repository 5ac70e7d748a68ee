"""Warden's Python SDK: run code written by AI agents in secure sandboxes.

The source document's API, by its names::

    from warden_sandbox import AISandboxFactory, CodeInterpreterTool

    service = AISandboxFactory.create_default()   # WARDEN_URL, or an embedded `warden serve`
    await service.connect()
    tool = CodeInterpreterTool(sandbox_service=service)
    print(await tool.execute(code="import math; print(math.sqrt(144))", language="python"))
    # STDOUT:
    # 12.0

The same modules as the document (``factory``, ``tool``, ``service``, ``domain.entities``,
``enums``, ``exceptions``) hold the same names, so porting is a change of the package prefix.
Beyond it: :class:`AsyncWardenClient` and :class:`WardenClient` (sync) over the whole REST API,
persistent sandboxes (``service.sandbox()``), streaming, files, and adapters for OpenAI function
calling (:mod:`warden_sandbox.openai_tools`) and LangChain (:mod:`warden_sandbox.langchain`).
"""

from .client import AsyncSandbox, AsyncWardenClient
from .daemon import EmbeddedDaemon
from .domain.entities import SandboxArtifact, SandboxRequest, SandboxResult
from .enums import PlatformLanguage
from .exceptions import (
    AuthenticationError,
    ConflictError,
    DaemonGoneError,
    DaemonStartError,
    InternalServerError,
    StorageFullError,
    InvalidRequestError,
    NotFoundError,
    PayloadTooLargeError,
    RateLimitedError,
    SandboxConfigurationError,
    SandboxGoneError,
    SecurityViolationError,
    ServiceUnavailableError,
    WardenAPIError,
    WardenConnectionError,
    WardenError,
    WardenProtocolError,
    WardenTimeoutError,
)
from .factory import AISandboxFactory
from .models import (
    Artifact,
    EndEvent,
    ErrorEvent,
    ExecEvent,
    ExecResult,
    FileEntry,
    EvictedContext,
    KeptContext,
    Limits,
    GatewayRules,
    Paused,
    Reason,
    RestoredContext,
    Resumed,
    SandboxInfo,
    SandboxState,
    SkippedArtifact,
    StderrEvent,
    StdoutEvent,
    Unsaved,
    Violation,
)
from .service import AISandboxService
from .sync import Sandbox, WardenClient
from .tool import CodeInterpreterSchema, CodeInterpreterTool, format_result

__version__ = "0.1.0"

__all__ = [
    "AISandboxFactory",
    "AISandboxService",
    "CodeInterpreterTool",
    "CodeInterpreterSchema",
    "format_result",
    "SandboxRequest",
    "SandboxResult",
    "SandboxArtifact",
    "PlatformLanguage",
    "AsyncWardenClient",
    "AsyncSandbox",
    "WardenClient",
    "Sandbox",
    "EmbeddedDaemon",
    "Artifact",
    "EndEvent",
    "ErrorEvent",
    "ExecEvent",
    "ExecResult",
    "FileEntry",
    "EvictedContext",
    "KeptContext",
    "Limits",
    "GatewayRules",
    "Paused",
    "Reason",
    "RestoredContext",
    "Resumed",
    "SandboxInfo",
    "SandboxState",
    "SkippedArtifact",
    "StderrEvent",
    "StdoutEvent",
    "Unsaved",
    "Violation",
    "WardenError",
    "WardenAPIError",
    "SecurityViolationError",
    "SandboxConfigurationError",
    "InvalidRequestError",
    "PayloadTooLargeError",
    "AuthenticationError",
    "NotFoundError",
    "SandboxGoneError",
    "ConflictError",
    "RateLimitedError",
    "ServiceUnavailableError",
    "InternalServerError",
    "StorageFullError",
    "WardenConnectionError",
    "DaemonGoneError",
    "WardenTimeoutError",
    "WardenProtocolError",
    "DaemonStartError",
]
