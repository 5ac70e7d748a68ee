"""The SDK's exceptions: every failure is a :class:`WardenError`, never a bare HTTP error.

Two families:

- :class:`WardenAPIError` — the daemon answered with an error. It carries the daemon's
  ``{"error": {"code", "message"}}`` as :attr:`~WardenAPIError.code` and
  :attr:`~WardenAPIError.message` and the HTTP status. Policy refusals are
  :class:`SecurityViolationError` (with the violation as data); unknown profiles, languages
  and profiles the backend cannot apply are :class:`SandboxConfigurationError`, as the source
  document's ``AISandboxService.execute`` raises them.
- :class:`WardenConnectionError` and :class:`WardenTimeoutError` — no answer: the daemon is not
  reachable, went away mid-run (:class:`DaemonGoneError`), or took longer than the client waits.
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Type

from .models import Violation

__all__ = [
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
    "error_from_body",
]


class WardenError(Exception):
    """Base of every error this SDK raises."""


class WardenAPIError(WardenError):
    """The daemon refused or failed a request: ``{"error": {"code", "message"}}``.

    ``status`` is the HTTP status, or ``None`` when the error came inside an NDJSON stream (an
    ``{"type": "error"}`` event) or was found by the SDK before sending (``code`` then says
    what, e.g. ``bad_path``).
    """

    def __init__(
        self,
        message: str,
        *,
        code: str,
        status: Optional[int] = None,
        violation: Optional[Violation] = None,
        retry_after: Optional[float] = None,
        body: Optional[Mapping[str, Any]] = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.status = status
        self.violation = violation
        self.retry_after = retry_after
        self.body: Dict[str, Any] = dict(body) if body is not None else {}

    def __str__(self) -> str:
        where = f"HTTP {self.status}, " if self.status is not None else ""
        return f"{self.message} ({where}{self.code})"

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code!r}, status={self.status!r}, message={self.message!r})"


class SecurityViolationError(WardenAPIError):
    """A policy refused the code before it ran (HTTP 422 or 403 with a ``violation``).

    :attr:`violation` says which policy, what (``forbidden_import`` with the module,
    ``dynamic_import``, ``syntax_error``, ``quota_exceeded``) and where (line, column).
    """


class SandboxConfigurationError(WardenAPIError):
    """The request names a profile or language the daemon does not have, or a profile the
    backend cannot apply as configured (the daemon fails closed rather than run weaker)."""


class InvalidRequestError(WardenAPIError):
    """Malformed input: a bad field value, invalid JSON, a workspace path that leaves the
    workspace. The message names the field."""


class PayloadTooLargeError(InvalidRequestError):
    """The request body was larger than the daemon accepts (HTTP 413)."""


class AuthenticationError(WardenAPIError):
    """Missing or wrong API key (HTTP 401/403)."""


class NotFoundError(WardenAPIError):
    """No such sandbox, file or route (HTTP 404)."""


class SandboxGoneError(NotFoundError):
    """The sandbox existed but has been destroyed, e.g. by its TTL (HTTP 410)."""


class ConflictError(WardenAPIError):
    """The name is taken by a live sandbox, or a pause came while an execution runs (HTTP 409)."""


class RateLimitedError(WardenAPIError):
    """The daemon's queue is full, or the limit of live sandboxes is reached (HTTP 429);
    :attr:`retry_after` is its Retry-After, seconds, when it sent one."""


class ServiceUnavailableError(WardenAPIError):
    """The backend is unavailable or the daemon is stopping (HTTP 503)."""


class InternalServerError(WardenAPIError):
    """The daemon failed internally (HTTP 500); details are in the daemon's log."""


class StorageFullError(WardenAPIError):
    """No room on the daemon's disk for durable state (``storage_full``, HTTP 507), or the API
    key's snapshots would pass its quota (``snapshot_quota_exceeded``); the message says which
    operation. Nothing saved before is lost."""


class WardenConnectionError(WardenError):
    """The daemon could not be reached."""


class DaemonGoneError(WardenConnectionError):
    """The connection to the daemon broke while a request or a stream was in flight."""


class WardenTimeoutError(WardenError):
    """The daemon did not answer within the client's timeout."""


class WardenProtocolError(WardenError):
    """The daemon's answer was not the JSON the API documents."""


class DaemonStartError(WardenError):
    """The embedded ``warden serve`` could not be found or did not become ready."""


# The daemon's error codes (crates/warden-server/src/error.rs and docs/api.md).
_BY_CODE: Dict[str, Type[WardenAPIError]] = {
    "policy_violation": SecurityViolationError,
    "unknown_profile": SandboxConfigurationError,
    "unknown_language": SandboxConfigurationError,
    "refused": SandboxConfigurationError,
    "runtime_unavailable": SandboxConfigurationError,
    "limit_exceeded": SandboxConfigurationError,
    "disabled": SandboxConfigurationError,
    "invalid_request": InvalidRequestError,
    "invalid_json": InvalidRequestError,
    "bad_path": InvalidRequestError,
    "unsupported_media_type": InvalidRequestError,
    "body_too_large": PayloadTooLargeError,
    "request_timeout": InvalidRequestError,
    "not_found": NotFoundError,
    "sandbox_not_found": NotFoundError,
    "name_taken": ConflictError,
    "sandbox_busy": ConflictError,
    "too_many_sandboxes": RateLimitedError,
    "context_not_found": NotFoundError,
    "too_many_contexts": RateLimitedError,
    "host_contexts_full": ServiceUnavailableError,
    "unauthorized": AuthenticationError,
    "sandbox_gone": SandboxGoneError,
    "too_many_requests": RateLimitedError,
    "backend_unavailable": ServiceUnavailableError,
    "sandbox_lost": ServiceUnavailableError,
    "method_not_allowed": InvalidRequestError,
    "shutting_down": ServiceUnavailableError,
    "internal": InternalServerError,
    "storage_full": StorageFullError,
    "storage_failed": InternalServerError,
    "snapshot_not_found": NotFoundError,
    "snapshot_quota_exceeded": StorageFullError,
}

_BY_STATUS: Dict[int, Type[WardenAPIError]] = {
    400: InvalidRequestError,
    401: AuthenticationError,
    403: AuthenticationError,
    404: NotFoundError,
    409: ConflictError,
    410: SandboxGoneError,
    413: PayloadTooLargeError,
    422: InvalidRequestError,
    429: RateLimitedError,
    500: InternalServerError,
    503: ServiceUnavailableError,
    507: StorageFullError,
}


def _class_for(code: str, status: Optional[int], has_violation: bool) -> Type[WardenAPIError]:
    if has_violation:
        return SecurityViolationError
    if code in _BY_CODE:
        return _BY_CODE[code]
    if status is not None:
        if status in _BY_STATUS:
            return _BY_STATUS[status]
        if status >= 500:
            return ServiceUnavailableError
        if 400 <= status < 500:
            return InvalidRequestError
    return WardenAPIError


def error_from_body(
    status: Optional[int],
    body: Any,
    *,
    fallback_message: str = "",
    retry_after: Optional[float] = None,
) -> WardenAPIError:
    """The typed exception for an error answer: ``body`` is the decoded JSON (or anything else
    when the answer was not JSON, in which case ``fallback_message`` is used)."""
    detail = body.get("error") if isinstance(body, dict) else None
    if isinstance(detail, dict) and isinstance(detail.get("code"), str):
        code = detail["code"]
        message = str(detail.get("message", ""))
        violation = None
        raw_violation = detail.get("violation")
        if isinstance(raw_violation, dict):
            try:
                violation = Violation.model_validate(raw_violation)
            except ValueError:
                violation = None
        cls = _class_for(code, status, violation is not None)
        return cls(
            message,
            code=code,
            status=status,
            violation=violation,
            retry_after=retry_after,
            body=body,
        )
    code = f"http_{status}" if status is not None else "unknown"
    message = fallback_message or "the daemon answered with an error and no error body"
    cls = _class_for(code, status, False)
    return cls(message, code=code, status=status, retry_after=retry_after)
