"""Warden's wire types: the JSON shapes of the REST API, as pydantic models.

These mirror the Rust crate ``warden-types`` and ``docs/api.md`` field for field (a test checks
them against the daemon's ``/openapi.json``), so renaming a field here is a breaking change.
Unknown fields sent by a newer daemon are ignored, never an error.
"""

from __future__ import annotations

import base64
import binascii
from datetime import datetime
from enum import Enum
from typing import Any, Dict, List, Literal, Optional, Type, Union

from pydantic import BaseModel, ConfigDict, Field, field_serializer, field_validator

__all__ = [
    "Reason",
    "Artifact",
    "SkippedArtifact",
    "ExecResult",
    "StdoutEvent",
    "StderrEvent",
    "EndEvent",
    "ErrorEvent",
    "UnknownEvent",
    "ExecEvent",
    "parse_event",
    "Limits",
    "SandboxInfo",
    "SandboxList",
    "Forked",
    "FileEntry",
    "FileList",
    "WrittenFile",
    "Destroyed",
    "Violation",
    "ApiErrorDetail",
    "ExecuteRequest",
    "CreateSandboxRequest",
    "SandboxExecRequest",
]


class _Wire(BaseModel):
    """A shape the daemon sends: unknown fields are ignored so a newer daemon stays readable."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True, frozen=False)


class Reason(str, Enum):
    """Why an execution ended. Exactly one is reported, by precedence: ``output``, ``memory`` or
    ``pids``, ``timeout``, ``signal``, ``exited``."""

    EXITED = "exited"
    """The program exited by itself (any exit code)."""
    TIMEOUT = "timeout"
    """The wall-clock timeout ended it; every process of the sandbox was killed."""
    MEMORY = "memory"
    """The memory limit was hit and the kernel's OOM killer ended a process."""
    PIDS = "pids"
    """The process limit was hit: a fork or thread creation failed."""
    OUTPUT = "output"
    """stdout or stderr passed ``max_output_bytes``; the sandbox was killed."""
    SIGNAL = "signal"
    """A signal ended the program (not one Warden sent for a limit)."""

    @property
    def is_limit(self) -> bool:
        """Whether a limit, not the program, ended the run."""
        return self in (Reason.TIMEOUT, Reason.MEMORY, Reason.PIDS, Reason.OUTPUT)

    def __str__(self) -> str:
        return self.value


class Artifact(_Wire):
    """A file the program left in the workspace's output folder (``/workspace/output``).

    The JSON field ``bytes`` (base64) is the attribute :attr:`content`; :attr:`file_name` is
    the name under which the source document's API knows :attr:`name`.
    """

    name: str
    """Path relative to the output folder, ``/``-separated; never absolute, never ``..``."""
    size: int
    mime_type: str
    sha256: str
    """Lowercase hex SHA-256 of the content."""
    content: bytes = Field(alias="bytes", repr=False)
    """The file's bytes (``bytes`` in JSON, base64)."""

    @field_validator("content", mode="before")
    @classmethod
    def _decode_base64(cls, value: Any) -> Any:
        if isinstance(value, str):
            try:
                return base64.b64decode(value, validate=True)
            except (binascii.Error, ValueError) as e:
                raise ValueError(f"bytes: not valid base64: {e}") from e
        return value

    @field_serializer("content", when_used="json")
    def _encode_base64(self, value: bytes) -> str:
        return base64.b64encode(value).decode("ascii")

    @property
    def file_name(self) -> str:
        """The artifact's name (relative to ``/workspace/output``), as the source document
        calls it."""
        return self.name

    def text(self, encoding: str = "utf-8") -> str:
        """The content decoded as text."""
        return self.content.decode(encoding)


class SkippedArtifact(_Wire):
    """An artifact that was not returned, and why (count or size caps, not a regular file)."""

    name: str
    why: str


class EgressDenied(_Wire):
    """A connection the egress gateway refused, and why."""

    host: str
    port: int
    why: str


class EgressAllowed(_Wire):
    """A connection the egress gateway let through, with its byte counts."""

    host: str
    port: int
    bytes_sent: int
    bytes_received: int


class GatewayRules(_Wire):
    """The egress gateway's rules of a sandbox (``PATCH /v1/sandboxes/{id}/egress``): host
    rules (``name``, ``*.name``, either with ``:port``) a connection must match when any
    ``allow`` is given, and rules that refuse it whatever ``allow`` says."""

    allow: List[str] = Field(default_factory=list)
    deny: List[str] = Field(default_factory=list)


class SecretUse(_Wire):
    """A brokered secret the gateway put into a request (its name, never its value)."""

    name: str
    host: str


class RichResult(_Wire):
    """A notebook cell's rich output: a figure, a ``display()`` or the cell's value."""

    mime_types: List[str] = Field(default_factory=list)
    """The MIME types present in :attr:`data`, sorted."""
    data: Dict[str, str] = Field(default_factory=dict)
    """MIME type to data: text as is, binary data (``image/png``) base64."""
    is_main_result: bool = False
    """Whether this is the cell's trailing expression."""


class CellError(_Wire):
    """The exception a notebook cell raised, the traceback trimmed to the user's code."""

    name: str
    value: str
    traceback: str


class ExecResult(_Wire):
    """What one execution produced: the result of every execution, one-shot or in a sandbox.

    Exported under the source document's name as well: ``SandboxResult``.
    """

    stdout: str
    stderr: str
    exit_code: Optional[int] = None
    """The program's exit code; ``None`` when a signal ended it."""
    signal: Optional[int] = None
    """The signal that ended the program, if one did."""
    reason: Reason
    duration_ms: int
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    artifacts: List[Artifact] = Field(default_factory=list)
    skipped_artifacts: List[SkippedArtifact] = Field(default_factory=list)
    """Artifacts left out because of the caps or because they were not regular files."""
    text: Optional[str] = None
    """In a notebook context: the repr of the cell's trailing expression."""
    results: List[RichResult] = Field(default_factory=list)
    """In a notebook context: the cell's rich outputs, in order."""
    error: Optional[CellError] = None
    """In a notebook context: the exception the cell raised."""
    execution_count: Optional[int] = None
    """In a notebook context: the context's execution counter after this cell."""
    context_restarted: Optional[bool] = None
    """In a notebook context: whether this cell ended the interpreter (state lost)."""
    egress_denied: List[EgressDenied] = Field(default_factory=list)
    """With an egress gateway: the connections it refused, with why."""
    egress_allowed: List[EgressAllowed] = Field(default_factory=list)
    """With an egress gateway: the connections it let through."""
    secrets_used: List[SecretUse] = Field(default_factory=list)
    """With brokered secrets: each request a secret was put into."""

    @property
    def is_success(self) -> bool:
        """True if the process exited by itself with code 0."""
        return self.reason == Reason.EXITED and self.exit_code == 0

    @property
    def timed_out(self) -> bool:
        """True if the wall-clock timeout ended the run."""
        return self.reason == Reason.TIMEOUT

    @property
    def shell_status(self) -> int:
        """The exit status a shell would show: the program's code, 128+signal, 124 for a
        timeout (as ``timeout(1)`` does)."""
        if self.reason == Reason.TIMEOUT:
            return 124
        if self.exit_code is not None:
            return self.exit_code
        if self.signal is not None:
            return 128 + self.signal
        return 1


class StdoutEvent(_Wire):
    """A chunk of the program's stdout, as it happened."""

    type: Literal["stdout"] = "stdout"
    text: str
    timestamp: int
    """When the chunk was read, milliseconds since the Unix epoch."""


class StderrEvent(_Wire):
    """A chunk of the program's stderr, as it happened."""

    type: Literal["stderr"] = "stderr"
    text: str
    timestamp: int
    """When the chunk was read, milliseconds since the Unix epoch."""


class EndEvent(ExecResult):
    """The last event of a stream: the whole :class:`ExecResult`."""

    type: Literal["end"] = "end"

    def result(self) -> ExecResult:
        """The execution's result, without the event's ``type``."""
        return ExecResult.model_validate(self.model_dump(exclude={"type"}))


class ErrorEvent(_Wire):
    """The run failed to start or could not finish; ``name`` is the error code."""

    type: Literal["error"] = "error"
    name: str
    value: str


class UnknownEvent(_Wire):
    """An event type this SDK does not know (a newer daemon); kept whole in :attr:`data`."""

    type: str
    data: Dict[str, Any]


ExecEvent = Union[StdoutEvent, StderrEvent, EndEvent, ErrorEvent, UnknownEvent]
"""One line of an NDJSON execution stream."""

_EVENT_TYPES: Dict[str, Type[_Wire]] = {
    "stdout": StdoutEvent,
    "stderr": StderrEvent,
    "end": EndEvent,
    "error": ErrorEvent,
}


def parse_event(data: Dict[str, Any]) -> ExecEvent:
    """One decoded NDJSON line → its event model."""
    kind = data.get("type")
    model = _EVENT_TYPES.get(kind) if isinstance(kind, str) else None
    if model is None:
        return UnknownEvent(type=str(kind), data=data)
    event: ExecEvent = model.model_validate(data)  # type: ignore[assignment]
    return event


class Limits(_Wire):
    """The hard limits one execution runs under."""

    timeout_ms: int
    memory_mb: int
    max_pids: int
    cpus: float
    max_output_bytes: int
    max_file_size_bytes: int
    workspace_mb: int
    max_artifacts: int
    max_artifact_bytes: int


class SandboxInfo(_Wire):
    """A sandbox with a lifetime, as ``GET /v1/sandboxes/{id}`` describes it."""

    id: str
    name: Optional[str] = None
    profile: str
    language: str
    labels: Dict[str, str] = Field(default_factory=dict)
    created_at: datetime
    last_used_at: datetime
    expires_at: datetime
    idle_ttl_seconds: int
    max_lifetime_seconds: int
    limits: Limits
    executions: int
    backend: str
    """``jail``, ``docker`` or ``kubernetes``."""
    state: "SandboxState" = Field(default_factory=lambda: SandboxState.RUNNING)
    """``running``, or ``paused`` (its processes frozen; its next use resumes it)."""


class Unsaved(_Wire):
    """A variable a pause could not save (or a resume could not load again), and why."""

    name: str
    why: str


class EvictedContext(_Wire):
    """A context a pause evicted: its interpreter ended, what could be saved of it kept."""

    context: str
    saved: List[str] = Field(default_factory=list)
    unsaved: List[Unsaved] = Field(default_factory=list)
    """Gone after the resume."""
    bytes: int = 0


class KeptContext(_Wire):
    """A context an evicting pause kept in memory (frozen), and why."""

    context: str
    why: str


class RestoredContext(_Wire):
    """An evicted context that a resume loaded again."""

    context: str
    restored: List[str] = Field(default_factory=list)
    unsaved: List[Unsaved] = Field(default_factory=list)


class Paused(SandboxInfo):
    """A paused sandbox, and (``evict=True``) what became of its contexts."""

    evicted: List[EvictedContext] = Field(default_factory=list)
    kept_in_memory: List[KeptContext] = Field(default_factory=list)


class Resumed(SandboxInfo):
    """A resumed sandbox, and the evicted contexts it loaded again."""

    restored: List[RestoredContext] = Field(default_factory=list)


class SandboxState(str, Enum):
    """Whether a sandbox's processes may run."""

    RUNNING = "running"
    PAUSED = "paused"


class SandboxList(_Wire):
    sandboxes: List[SandboxInfo]
    count: int


class Forked(_Wire):
    """A fork's answer (``POST /v1/sandboxes/{id}/fork``): the copies made, and what their
    contexts have of the parent's state (the same for every copy)."""

    sandboxes: List[SandboxInfo]
    count: int
    contexts: List[EvictedContext] = Field(default_factory=list)


class SnapshotInfo(_Wire):
    """A named copy of a durable sandbox's workspace (``POST /v1/sandboxes/{id}/snapshot``),
    the API key's own."""

    name: str
    sandbox_id: str
    """The sandbox it was taken of."""
    profile: str
    language: str
    workspace_mb: int
    size_bytes: int
    """What it takes of the daemon's disk, counted against the key's snapshot quota."""
    created_at: datetime
    contexts: List[EvictedContext] = Field(default_factory=list)
    """The contexts a sandbox made from it has, each with what was saved of its variables and
    what was not (``*``: nothing, it starts afresh)."""


class SnapshotList(_Wire):
    snapshots: List[SnapshotInfo]
    count: int
    used_bytes: int
    quota_bytes: int


class SnapshotDeleted(_Wire):
    name: str
    deleted: bool


class FileEntry(_Wire):
    """An entry of a workspace listing."""

    path: str
    """Relative to the workspace, ``/``-separated."""
    size: int
    is_dir: bool


class FileList(_Wire):
    files: List[FileEntry]


class WrittenFile(_Wire):
    """The answer to an upload."""

    path: str
    size: int


class Destroyed(_Wire):
    id: str
    destroyed: bool


class Violation(_Wire):
    """A policy refusal, as data: which policy, what (``kind`` and its fields), where."""

    model_config = ConfigDict(extra="allow")

    policy: str
    kind: str
    """``forbidden_import`` (with ``module``), ``dynamic_import``, ``syntax_error``,
    ``quota_exceeded`` (with ``field``, ``requested``, ``maximum``)."""
    message: str
    line: Optional[int] = None
    column: Optional[int] = None

    @property
    def module(self) -> Optional[str]:
        """The forbidden module, for ``forbidden_import``."""
        extra = self.model_extra or {}
        value = extra.get("module")
        return value if isinstance(value, str) else None


class ApiErrorDetail(_Wire):
    """The ``error`` object of every error answer."""

    code: str
    message: str
    violation: Optional[Violation] = None


class _Request(BaseModel):
    """A request body: optional fields left unset are not sent."""

    model_config = ConfigDict(extra="forbid")

    def body(self) -> Dict[str, Any]:
        return self.model_dump(mode="json", exclude_none=True)


class ExecuteRequest(_Request):
    """``POST /v1/execute``: one-shot execution in a fresh sandbox."""

    code: str
    language: Optional[str] = None
    profile: Optional[str] = None
    timeout_seconds: Optional[float] = None
    memory_mb: Optional[int] = None
    stdin: Optional[str] = None
    stream: Optional[bool] = None


class CreateSandboxRequest(_Request):
    """``POST /v1/sandboxes``."""

    profile: Optional[str] = None
    language: Optional[str] = None
    name: Optional[str] = None
    labels: Optional[Dict[str, str]] = None
    idle_ttl_seconds: Optional[int] = None
    max_lifetime_seconds: Optional[int] = None
    memory_mb: Optional[int] = None
    from_snapshot: Optional[str] = None
    """One of the API key's snapshots: the sandbox starts with its files (and is durable)."""


class SnapshotRequest(_Request):
    """``POST /v1/sandboxes/{id}/snapshot``."""

    name: str


class ForkRequest(_Request):
    """``POST /v1/sandboxes/{id}/fork``."""

    count: Optional[int] = None


class SandboxExecRequest(_Request):
    """``POST /v1/sandboxes/{id}/exec``."""

    code: str
    language: Optional[str] = None
    timeout_seconds: Optional[float] = None
    stdin: Optional[str] = None
    args: Optional[List[str]] = None
    stream: Optional[bool] = None
    context: Optional[str] = None
    """A notebook context of the sandbox (``"default"`` is made on first use)."""
    env: Optional[Dict[str, str]] = None
    """Environment variables of this run only, after the sandbox's (not in a context)."""
    cwd: Optional[str] = None
    """This run's working directory: inside /workspace, /tmp or the sandbox's home."""
