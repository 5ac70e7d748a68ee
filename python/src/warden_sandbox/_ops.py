"""The REST API's operations as data, shared by the async and the sync client.

Each function returns a :class:`Call`: the HTTP request to make and how to read a successful
answer. The clients only do I/O and turn transport failures and error answers into
:mod:`warden_sandbox.exceptions`; nothing here touches the network.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Dict, Generic, List, Mapping, Optional, Sequence, Type, TypeVar, Union
from urllib.parse import quote

import httpx
from pydantic import BaseModel, ValidationError

from .exceptions import (
    DaemonGoneError,
    InvalidRequestError,
    WardenConnectionError,
    WardenError,
    WardenProtocolError,
    WardenTimeoutError,
    error_from_body,
)
from .models import (
    CreateSandboxRequest,
    Destroyed,
    ExecResult,
    ExecuteRequest,
    FileEntry,
    FileList,
    ForkRequest,
    GatewayRules,
    Paused,
    Resumed,
    SandboxExecRequest,
    SandboxInfo,
    SandboxList,
    Forked,
    SnapshotDeleted,
    SnapshotInfo,
    SnapshotList,
    SnapshotRequest,
    WrittenFile,
)

M = TypeVar("M", bound=BaseModel)
T = TypeVar("T")

# Extra seconds the client waits beyond an execution's own timeout: the daemon needs a moment
# to set up the sandbox, kill it and collect artifacts.
EXEC_GRACE_SECONDS = 30.0


class Call(Generic[T]):
    """One request and how to read its successful answer.

    ``exec_timeout`` is the execution's own timeout, seconds, when this call runs code: the
    client then waits at least that plus :data:`EXEC_GRACE_SECONDS`.
    """

    def __init__(
        self,
        method: str,
        path: str,
        parse: Callable[[httpx.Response], T],
        *,
        json: Optional[Dict[str, Any]] = None,
        content: Optional[bytes] = None,
        params: Optional[Dict[str, List[str]]] = None,
        headers: Optional[Dict[str, str]] = None,
        exec_timeout: Optional[float] = None,
    ) -> None:
        self.method = method
        self.path = path
        self.parse = parse
        self.json = json
        self.content = content
        self.params = params
        self.headers = headers or {}
        self.exec_timeout = exec_timeout


def check_base_url(base_url: str) -> str:
    """The daemon's address without a trailing slash; ValueError unless it is an http(s) URL
    with a host."""
    try:
        url = httpx.URL(base_url)
    except (httpx.InvalidURL, TypeError) as e:
        raise ValueError(f"not a URL: {base_url!r}: {e}") from e
    if url.scheme not in ("http", "https") or not url.host:
        raise ValueError(f"the daemon's address must be an http:// or https:// URL with a host, not {base_url!r}")
    return base_url.rstrip("/")


def read_timeout(default: Optional[float], exec_timeout: Optional[float]) -> Optional[float]:
    """How long to wait for an answer: the client's default, stretched to cover an execution
    that may legitimately run longer."""
    if default is None:
        return None
    if exec_timeout is not None:
        return max(default, exec_timeout + EXEC_GRACE_SECONDS)
    return default


def decode_json(response: httpx.Response) -> Any:
    try:
        return json.loads(response.content)
    except ValueError as e:
        raise WardenProtocolError(
            f"{response.request.method} {response.request.url.path}: the daemon's answer is not JSON: {e}"
        ) from e


def model_parser(model: Type[M]) -> Callable[[httpx.Response], M]:
    def parse(response: httpx.Response) -> M:
        data = decode_json(response)
        try:
            return model.model_validate(data)
        except ValidationError as e:
            raise WardenProtocolError(
                f"{response.request.url.path}: the daemon's answer does not match {model.__name__}: {e}"
            ) from e

    return parse


def json_parser(response: httpx.Response) -> Dict[str, Any]:
    data = decode_json(response)
    if not isinstance(data, dict):
        raise WardenProtocolError(f"{response.request.url.path}: the daemon's answer is not a JSON object")
    return data


def raise_for_status(response: httpx.Response) -> None:
    """Raises the typed exception for an error answer (its body must have been read)."""
    if response.status_code < 400:
        return
    retry_after: Optional[float] = None
    header = response.headers.get("retry-after")
    if header is not None:
        try:
            retry_after = float(header)
        except ValueError:
            retry_after = None
    try:
        body: Any = json.loads(response.content)
    except ValueError:
        body = None
    text = response.content[:500].decode("utf-8", "replace").strip()
    raise error_from_body(
        response.status_code,
        body,
        fallback_message=text or response.reason_phrase,
        retry_after=retry_after,
    )


def transport_error(exc: Exception, base_url: str, *, in_flight: bool) -> WardenError:
    """An httpx failure as the SDK's exception. ``in_flight``: the request had been sent (or a
    stream had started), so a broken connection means the daemon went away mid-run."""
    if isinstance(exc, httpx.TimeoutException):
        what = "connecting to" if isinstance(exc, httpx.ConnectTimeout) else "waiting for"
        return WardenTimeoutError(f"timed out {what} Warden at {base_url}: {exc or type(exc).__name__}")
    if isinstance(exc, httpx.ConnectError):
        return WardenConnectionError(f"cannot connect to Warden at {base_url}: {exc}")
    if isinstance(exc, (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)) or in_flight:
        return DaemonGoneError(
            f"the connection to Warden at {base_url} broke before the answer was complete "
            f"(did the daemon stop?): {exc or type(exc).__name__}"
        )
    return WardenConnectionError(f"cannot talk to Warden at {base_url}: {exc}")


def _segment(value: str, what: str) -> str:
    if not value:
        raise InvalidRequestError(f"{what}: must not be empty", code="invalid_request")
    return quote(value, safe="")


def workspace_path(path: str) -> str:
    """Checks a workspace path as the daemon does (``WorkspacePath`` in warden-types) and returns
    it URL-encoded. Checked here too because HTTP clients normalize ``..`` in URLs, which would
    turn a bad path into a request for another route."""

    def bad(why: str) -> InvalidRequestError:
        return InvalidRequestError(f"invalid workspace path {path!r}: {why}", code="bad_path")

    rel = path[len("/workspace/"):] if path.startswith("/workspace/") else path
    if not rel:
        raise bad("empty")
    if len(rel.encode("utf-8")) > 4096:
        raise bad("longer than 4096 bytes")
    if "\0" in rel:
        raise bad("contains a NUL byte")
    if rel.startswith("/"):
        raise bad("absolute paths are outside the workspace")
    parts = rel.split("/")
    if len(parts) > 64:
        raise bad("more than 64 components")
    for part in parts:
        if part == "":
            raise bad("empty component (`//` or a trailing `/`)")
        if part in (".", ".."):
            raise bad("`.` and `..` components are not allowed")
        if len(part.encode("utf-8")) > 255:
            raise bad("a component longer than 255 bytes")
    return "/".join(quote(p, safe="") for p in parts)


def _end_result(response: httpx.Response) -> ExecResult:
    return model_parser(ExecResult)(response)


# ---- operations ----------------------------------------------------------------------------


def healthz() -> Call[Dict[str, Any]]:
    return Call("GET", "/healthz", parse=json_parser)


def readyz() -> Call[Dict[str, Any]]:
    return Call("GET", "/readyz", parse=json_parser)


def openapi() -> Call[Dict[str, Any]]:
    return Call("GET", "/openapi.json", parse=json_parser)


def metrics() -> Call[str]:
    return Call("GET", "/metrics", parse=lambda r: r.text)


def execute(request: ExecuteRequest) -> Call[ExecResult]:
    return Call(
        "POST",
        "/v1/execute",
        json=request.body(),
        exec_timeout=request.timeout_seconds,
        parse=_end_result,
    )


def create_sandbox(request: CreateSandboxRequest) -> Call[SandboxInfo]:
    return Call("POST", "/v1/sandboxes", json=request.body(), parse=model_parser(SandboxInfo))


def list_sandboxes(labels: Union[None, Mapping[str, str], Sequence[str]] = None) -> Call[List[SandboxInfo]]:
    selectors: List[str] = []
    if isinstance(labels, Mapping):
        selectors = [f"{k}={v}" for k, v in labels.items()]
    elif labels is not None:
        selectors = list(labels)

    def parse(response: httpx.Response) -> List[SandboxInfo]:
        return model_parser(Forked)(response).sandboxes

    return Call("GET", "/v1/sandboxes", params={"label": selectors} if selectors else None, parse=parse)


def get_sandbox(sandbox_id: str) -> Call[SandboxInfo]:
    return Call(
        "GET", f"/v1/sandboxes/{_segment(sandbox_id, 'sandbox id')}", parse=model_parser(SandboxInfo)
    )


def pause_sandbox(sandbox_id: str, evict: bool = False) -> Call[Paused]:
    return Call(
        "POST",
        f"/v1/sandboxes/{_segment(sandbox_id, 'sandbox id')}/pause",
        json={"evict": True} if evict else None,
        parse=model_parser(Paused),
    )


def resume_sandbox(sandbox_id: str) -> Call[Resumed]:
    return Call(
        "POST", f"/v1/sandboxes/{_segment(sandbox_id, 'sandbox id')}/resume", parse=model_parser(Resumed)
    )


def set_egress(sandbox_id: str, allow: Sequence[str], deny: Sequence[str]) -> Call[GatewayRules]:
    return Call(
        "PATCH",
        f"/v1/sandboxes/{_segment(sandbox_id, 'sandbox id')}/egress",
        json={"allow": list(allow), "deny": list(deny)},
        parse=model_parser(GatewayRules),
    )


def snapshot_sandbox(sandbox_id: str, request: SnapshotRequest) -> Call[SnapshotInfo]:
    return Call(
        "POST",
        f"/v1/sandboxes/{_segment(sandbox_id, 'sandbox id')}/snapshot",
        json=request.body(),
        parse=model_parser(SnapshotInfo),
    )


def list_snapshots() -> Call[SnapshotList]:
    return Call("GET", "/v1/snapshots", parse=model_parser(SnapshotList))


def delete_snapshot(name: str) -> Call[SnapshotDeleted]:
    return Call("DELETE", f"/v1/snapshots/{_segment(name, 'snapshot name')}", parse=model_parser(SnapshotDeleted))


def fork_sandbox(sandbox_id: str, request: ForkRequest) -> Call[List[SandboxInfo]]:
    def parse(response: httpx.Response) -> List[SandboxInfo]:
        return model_parser(Forked)(response).sandboxes

    return Call(
        "POST",
        f"/v1/sandboxes/{_segment(sandbox_id, 'sandbox id')}/fork",
        json=request.body(),
        parse=parse,
    )


def destroy_sandbox(sandbox_id: str) -> Call[Destroyed]:
    return Call(
        "DELETE", f"/v1/sandboxes/{_segment(sandbox_id, 'sandbox id')}", parse=model_parser(Destroyed)
    )


def sandbox_exec(sandbox_id: str, request: SandboxExecRequest) -> Call[ExecResult]:
    return Call(
        "POST",
        f"/v1/sandboxes/{_segment(sandbox_id, 'sandbox id')}/exec",
        json=request.body(),
        exec_timeout=request.timeout_seconds,
        parse=_end_result,
    )


def write_file(sandbox_id: str, path: str, data: Union[bytes, str]) -> Call[WrittenFile]:
    content = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    return Call(
        "PUT",
        f"/v1/sandboxes/{_segment(sandbox_id, 'sandbox id')}/files/{workspace_path(path)}",
        content=content,
        headers={"content-type": "application/octet-stream"},
        parse=model_parser(WrittenFile),
    )


def read_file(sandbox_id: str, path: str) -> Call[bytes]:
    return Call(
        "GET",
        f"/v1/sandboxes/{_segment(sandbox_id, 'sandbox id')}/files/{workspace_path(path)}",
        parse=lambda r: r.content,
    )


def list_files(sandbox_id: str) -> Call[List[FileEntry]]:
    def parse(response: httpx.Response) -> List[FileEntry]:
        return model_parser(FileList)(response).files

    return Call("GET", f"/v1/sandboxes/{_segment(sandbox_id, 'sandbox id')}/files", parse=parse)
