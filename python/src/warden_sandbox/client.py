"""The async client of Warden's REST API, and :class:`AsyncSandbox`, a handle on a sandbox with
a lifetime.

>>> async with AsyncWardenClient("http://127.0.0.1:8080") as client:   # doctest: +SKIP
...     result = await client.execute("print(6 * 7)")
...     async with await client.create_sandbox(profile="data_science") as sb:
...         await sb.run("x = 41")
"""

from __future__ import annotations

import os
from types import TracebackType
from typing import TypeVar, Any, AsyncIterator, Dict, List, Mapping, Optional, Sequence, Type, Union

import httpx

from . import _ops
from ._ops import Call
from ._stream import STREAM_CUT, decode_line
from .exceptions import DaemonGoneError, NotFoundError, WardenError
from .models import (
    CreateSandboxRequest,
    EndEvent,
    ExecEvent,
    GatewayRules,
    ExecResult,
    ExecuteRequest,
    FileEntry,
    ForkRequest,
    Paused,
    Resumed,
    SandboxExecRequest,
    SandboxInfo,
    SnapshotInfo,
    SnapshotList,
    SnapshotRequest,
    WrittenFile,
)

T = TypeVar("T")

__all__ = ["AsyncWardenClient", "AsyncSandbox", "DEFAULT_TIMEOUT", "auth_headers"]

DEFAULT_TIMEOUT = 300.0
"""Seconds the client waits for an answer by default (stretched for longer executions)."""


def auth_headers(api_key: Optional[str]) -> Dict[str, str]:
    """The headers that carry an API key (``WARDEN_API_KEY`` when ``api_key`` is None)."""
    key = api_key if api_key is not None else os.environ.get("WARDEN_API_KEY")
    return {"authorization": f"Bearer {key}"} if key else {}


class AsyncWardenClient:
    """Async client of ``warden serve``'s REST API (``docs/api.md``).

    Every failure is a :class:`~warden_sandbox.exceptions.WardenError`: the daemon's errors as
    typed :class:`~warden_sandbox.exceptions.WardenAPIError` subclasses, an unreachable or
    vanished daemon as :class:`~warden_sandbox.exceptions.WardenConnectionError`, a slow one as
    :class:`~warden_sandbox.exceptions.WardenTimeoutError`.

    :param base_url: the daemon's address, e.g. ``http://127.0.0.1:8080``.
    :param api_key: sent as ``Authorization: Bearer``; default ``WARDEN_API_KEY`` if set.
    :param timeout: seconds to wait for an answer; an execution with a longer
        ``timeout_seconds`` is waited for that long plus a grace period. None: wait forever.
    :param connect_timeout: seconds to wait for the connection itself.
    :param transport: an httpx transport (tests, custom TLS).
    """

    def __init__(
        self,
        base_url: str,
        *,
        api_key: Optional[str] = None,
        timeout: Optional[float] = DEFAULT_TIMEOUT,
        connect_timeout: float = 5.0,
        transport: Optional[httpx.AsyncBaseTransport] = None,
    ) -> None:
        self.base_url = _ops.check_base_url(base_url)
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self._http = httpx.AsyncClient(
            base_url=self.base_url,
            headers={"user-agent": "warden-sandbox-python", **auth_headers(api_key)},
            timeout=httpx.Timeout(timeout, connect=connect_timeout),
            transport=transport,
        )

    async def aclose(self) -> None:
        """Closes the connection pool."""
        await self._http.aclose()

    async def __aenter__(self) -> "AsyncWardenClient":
        return self

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        await self.aclose()

    # ---- plumbing ---------------------------------------------------------------------------

    def _timeout(self, call: Call[Any]) -> httpx.Timeout:
        return httpx.Timeout(
            _ops.read_timeout(self.timeout, call.exec_timeout), connect=self.connect_timeout
        )

    async def _call(self, call: Call[T]) -> T:
        try:
            response = await self._http.request(
                call.method,
                call.path,
                json=call.json,
                content=call.content,
                params=call.params,
                headers=call.headers,
                timeout=self._timeout(call),
            )
        except httpx.HTTPError as e:
            raise _ops.transport_error(e, self.base_url, in_flight=False) from e
        _ops.raise_for_status(response)
        return call.parse(response)

    async def _stream(self, call: Call[ExecResult]) -> AsyncIterator[ExecEvent]:
        started = False
        try:
            async with self._http.stream(
                call.method,
                call.path,
                json=call.json,
                headers=call.headers,
                timeout=self._timeout(call),
            ) as response:
                if response.status_code >= 400:
                    await response.aread()
                    _ops.raise_for_status(response)
                started = True
                async for line in response.aiter_lines():
                    if not line.strip():
                        continue
                    event = decode_line(line)
                    yield event
                    if isinstance(event, EndEvent):
                        return
        except WardenError:
            raise
        except httpx.HTTPError as e:
            raise _ops.transport_error(e, self.base_url, in_flight=started) from e
        raise DaemonGoneError(STREAM_CUT)

    # ---- operations -------------------------------------------------------------------------

    async def health(self) -> Dict[str, Any]:
        """``GET /healthz``."""
        return await self._call(_ops.healthz())

    async def ready(self) -> Dict[str, Any]:
        """``GET /readyz``: ready to run code, with free execution slots."""
        return await self._call(_ops.readyz())

    async def openapi(self) -> Dict[str, Any]:
        """``GET /openapi.json``: the API's machine-readable description."""
        return await self._call(_ops.openapi())

    async def metrics(self) -> str:
        """``GET /metrics``: Prometheus text."""
        return await self._call(_ops.metrics())

    async def execute(
        self,
        code: str,
        *,
        language: Optional[str] = None,
        profile: Optional[str] = None,
        timeout_seconds: Optional[float] = None,
        memory_mb: Optional[int] = None,
        stdin: Optional[str] = None,
    ) -> ExecResult:
        """Runs ``code`` once in a fresh sandbox (``POST /v1/execute``)."""
        request = ExecuteRequest(
            code=code,
            language=language,
            profile=profile,
            timeout_seconds=timeout_seconds,
            memory_mb=memory_mb,
            stdin=stdin,
        )
        return await self._call(_ops.execute(request))

    def execute_stream(
        self,
        code: str,
        *,
        language: Optional[str] = None,
        profile: Optional[str] = None,
        timeout_seconds: Optional[float] = None,
        memory_mb: Optional[int] = None,
        stdin: Optional[str] = None,
    ) -> AsyncIterator[ExecEvent]:
        """Runs ``code`` once and yields its output as it happens: stdout and stderr events, then
        one :class:`~warden_sandbox.models.EndEvent` with the whole result."""
        request = ExecuteRequest(
            code=code,
            language=language,
            profile=profile,
            timeout_seconds=timeout_seconds,
            memory_mb=memory_mb,
            stdin=stdin,
            stream=True,
        )
        return self._stream(_ops.execute(request))

    async def create_sandbox(
        self,
        *,
        profile: Optional[str] = None,
        language: Optional[str] = None,
        name: Optional[str] = None,
        labels: Optional[Mapping[str, str]] = None,
        idle_ttl_seconds: Optional[int] = None,
        max_lifetime_seconds: Optional[int] = None,
        memory_mb: Optional[int] = None,
        from_snapshot: Optional[str] = None,
    ) -> "AsyncSandbox":
        """Creates a sandbox with a lifetime (``POST /v1/sandboxes``). Use it as
        ``async with await client.create_sandbox() as sb:`` to destroy it at the end."""
        request = CreateSandboxRequest(
            profile=profile,
            language=language,
            name=name,
            labels=dict(labels) if labels is not None else None,
            idle_ttl_seconds=idle_ttl_seconds,
            max_lifetime_seconds=max_lifetime_seconds,
            memory_mb=memory_mb,
            from_snapshot=from_snapshot,
        )
        info = await self._call(_ops.create_sandbox(request))
        return AsyncSandbox(self, info)

    async def get_sandbox(self, sandbox_id: str) -> "AsyncSandbox":
        """A handle on an existing sandbox, by id or name."""
        info = await self._call(_ops.get_sandbox(sandbox_id))
        return AsyncSandbox(self, info)

    async def list_sandboxes(
        self, labels: Union[None, Mapping[str, str], Sequence[str]] = None
    ) -> List[SandboxInfo]:
        """The live sandboxes, optionally only those with all the given labels."""
        return await self._call(_ops.list_sandboxes(labels))

    async def pause_sandbox(self, sandbox_id: str, evict: bool = False) -> Paused:
        """Pauses a sandbox (``POST /v1/sandboxes/{id}/pause``): its processes stop where they
        are, its files and contexts' variables are kept; its next use resumes it. 409
        (``sandbox_busy``) while an execution runs in it. ``evict=True`` also saves its Python
        contexts and ends their interpreters to free their memory; the answer's ``evicted``
        names what could not be saved."""
        return await self._call(_ops.pause_sandbox(sandbox_id, evict))

    async def resume_sandbox(self, sandbox_id: str) -> Resumed:
        """Resumes a paused sandbox (``POST /v1/sandboxes/{id}/resume``) and loads the state of
        the contexts its pause evicted (``restored``)."""
        return await self._call(_ops.resume_sandbox(sandbox_id))

    async def set_egress(
        self, sandbox_id: str, allow: Sequence[str] = (), deny: Sequence[str] = ()
    ) -> GatewayRules:
        """Replaces the egress gateway's rules of a sandbox whose profile has one (``PATCH
        /v1/sandboxes/{id}/egress``); answers the rules now in force. Executions started
        afterwards get them; a running context gets them at its next cell (on the jail backend
        by restarting its interpreter: that cell's result has ``context_restarted``). A sandbox
        without a gateway is refused (``InvalidRequestError`` naming ``egress``)."""
        return await self._call(_ops.set_egress(sandbox_id, allow, deny))

    async def snapshot_sandbox(self, sandbox_id: str, name: str) -> SnapshotInfo:
        """Records a durable sandbox's files under ``name`` (``POST
        /v1/sandboxes/{id}/snapshot``): the API key's own, counted against its snapshot quota
        (``StorageFullError`` past it); ``create_sandbox(from_snapshot=name)`` makes a sandbox
        from it."""
        return await self._call(_ops.snapshot_sandbox(sandbox_id, SnapshotRequest(name=name)))

    async def list_snapshots(self) -> SnapshotList:
        """The API key's snapshots, with the disk they take and the key's quota."""
        return await self._call(_ops.list_snapshots())

    async def delete_snapshot(self, name: str) -> None:
        """Deletes one of the API key's snapshots."""
        await self._call(_ops.delete_snapshot(name))

    async def fork_sandbox(self, sandbox_id: str, count: int = 1) -> List["AsyncSandbox"]:
        """Makes ``count`` (1 to 16) independent copies of a durable sandbox as it is now
        (``POST /v1/sandboxes/{id}/fork``): each has its own copy of the files, none of the
        contexts' variables."""
        infos = await self._call(_ops.fork_sandbox(sandbox_id, ForkRequest(count=count)))
        return [AsyncSandbox(self, info) for info in infos]

    async def destroy_sandbox(self, sandbox_id: str) -> None:
        """Destroys a sandbox (``DELETE /v1/sandboxes/{id}``)."""
        await self._call(_ops.destroy_sandbox(sandbox_id))

    async def sandbox_info(self, sandbox_id: str) -> SandboxInfo:
        """``GET /v1/sandboxes/{id}``."""
        return await self._call(_ops.get_sandbox(sandbox_id))

    async def exec(
        self,
        sandbox_id: str,
        code: str,
        *,
        language: Optional[str] = None,
        timeout_seconds: Optional[float] = None,
        stdin: Optional[str] = None,
        args: Optional[Sequence[str]] = None,
        context: Optional[str] = None,
    ) -> ExecResult:
        """Runs ``code`` in a sandbox (``POST /v1/sandboxes/{id}/exec``); with ``context``, as
        a cell of that notebook context (``"default"`` is made on first use)."""
        request = SandboxExecRequest(
            code=code,
            language=language,
            timeout_seconds=timeout_seconds,
            stdin=stdin,
            args=list(args) if args is not None else None,
            context=context,
        )
        return await self._call(_ops.sandbox_exec(sandbox_id, request))

    def exec_stream(
        self,
        sandbox_id: str,
        code: str,
        *,
        language: Optional[str] = None,
        timeout_seconds: Optional[float] = None,
        stdin: Optional[str] = None,
        args: Optional[Sequence[str]] = None,
    ) -> AsyncIterator[ExecEvent]:
        """Runs ``code`` in a sandbox and yields its events as they happen."""
        request = SandboxExecRequest(
            code=code,
            language=language,
            timeout_seconds=timeout_seconds,
            stdin=stdin,
            args=list(args) if args is not None else None,
            stream=True,
        )
        return self._stream(_ops.sandbox_exec(sandbox_id, request))

    async def write_file(self, sandbox_id: str, path: str, data: Union[bytes, str]) -> WrittenFile:
        """Uploads ``data`` to ``path`` in the sandbox's workspace (str is UTF-8 encoded)."""
        return await self._call(_ops.write_file(sandbox_id, path, data))

    async def read_file(self, sandbox_id: str, path: str) -> bytes:
        """Downloads a file from the sandbox's workspace."""
        return await self._call(_ops.read_file(sandbox_id, path))

    async def list_files(self, sandbox_id: str) -> List[FileEntry]:
        """The files of the sandbox's workspace."""
        return await self._call(_ops.list_files(sandbox_id))


class AsyncSandbox:
    """A sandbox with a lifetime: executions share ``/workspace`` and run one at a time.

    As an async context manager it is destroyed on exit (unless ``keep=True`` was given to
    :meth:`AISandboxService.sandbox` or :attr:`keep` is set).
    """

    def __init__(self, client: AsyncWardenClient, info: SandboxInfo, *, keep: bool = False) -> None:
        self.client = client
        self.info = info
        self.keep = keep
        self._destroyed = False

    @property
    def id(self) -> str:
        return self.info.id

    def __repr__(self) -> str:
        return f"AsyncSandbox(id={self.id!r}, profile={self.info.profile!r})"

    async def __aenter__(self) -> "AsyncSandbox":
        return self

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        if not self.keep:
            await self.destroy()

    async def run(
        self,
        code: str,
        *,
        language: Optional[str] = None,
        timeout_seconds: Optional[float] = None,
        stdin: Optional[str] = None,
        args: Optional[Sequence[str]] = None,
    ) -> ExecResult:
        """Runs ``code`` in this sandbox and returns its result."""
        return await self.client.exec(
            self.id, code, language=language, timeout_seconds=timeout_seconds, stdin=stdin, args=args
        )

    def stream(
        self,
        code: str,
        *,
        language: Optional[str] = None,
        timeout_seconds: Optional[float] = None,
        stdin: Optional[str] = None,
        args: Optional[Sequence[str]] = None,
    ) -> AsyncIterator[ExecEvent]:
        """Runs ``code`` in this sandbox, yielding output events as they happen."""
        return self.client.exec_stream(
            self.id, code, language=language, timeout_seconds=timeout_seconds, stdin=stdin, args=args
        )

    async def upload(self, path: str, data: Union[bytes, str]) -> WrittenFile:
        """Writes ``data`` to ``path`` (relative to ``/workspace``)."""
        return await self.client.write_file(self.id, path, data)

    async def download(self, path: str) -> bytes:
        """Reads ``path`` (relative to ``/workspace``)."""
        return await self.client.read_file(self.id, path)

    async def files(self) -> List[FileEntry]:
        """The workspace's files."""
        return await self.client.list_files(self.id)

    async def pause(self, evict: bool = False) -> Paused:
        """Pauses the sandbox (see ``pause_sandbox``)."""
        paused = await self.client.pause_sandbox(self.id, evict)
        self.info = paused
        return paused

    async def set_egress(self, allow: Sequence[str] = (), deny: Sequence[str] = ()) -> GatewayRules:
        """Replaces the sandbox's egress gateway rules (see ``set_egress`` of the client)."""
        return await self.client.set_egress(self.id, allow, deny)

    async def snapshot(self, name: str) -> SnapshotInfo:
        """Records the sandbox's files under ``name`` (see ``snapshot_sandbox``)."""
        return await self.client.snapshot_sandbox(self.id, name)

    async def fork(self, count: int = 1) -> List["AsyncSandbox"]:
        """Independent copies of the sandbox as it is now (see ``fork_sandbox``)."""
        return await self.client.fork_sandbox(self.id, count)

    async def resume(self) -> Resumed:
        """Resumes the sandbox (see ``resume_sandbox``)."""
        resumed = await self.client.resume_sandbox(self.id)
        self.info = resumed
        return resumed

    async def refresh(self) -> SandboxInfo:
        """Fetches the sandbox's current description."""
        self.info = await self.client.sandbox_info(self.id)
        return self.info

    async def destroy(self) -> None:
        """Destroys the sandbox. Idempotent: a sandbox already gone (destroyed elsewhere, or
        reaped by its TTL) is not an error."""
        if self._destroyed:
            return
        try:
            await self.client.destroy_sandbox(self.id)
        except NotFoundError:
            pass
        self._destroyed = True
