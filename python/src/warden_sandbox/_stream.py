"""Reading an NDJSON execution stream, shared by the async and the sync client."""

from __future__ import annotations

import json

from .exceptions import WardenProtocolError, error_from_body
from .models import EndEvent, ErrorEvent, ExecEvent, parse_event


def decode_line(line: str) -> ExecEvent:
    """One NDJSON line → its event. An ``error`` event is raised as the typed exception its
    ``name`` (the error code) calls for."""
    try:
        data = json.loads(line)
    except ValueError as e:
        raise WardenProtocolError(f"the daemon's stream has a line that is not JSON: {line[:200]!r}") from e
    if not isinstance(data, dict):
        raise WardenProtocolError(f"the daemon's stream has a line that is not an object: {line[:200]!r}")
    try:
        event = parse_event(data)
    except ValueError as e:
        raise WardenProtocolError(f"the daemon's stream has an event that does not match its type: {e}") from e
    if isinstance(event, ErrorEvent):
        raise error_from_body(None, {"error": {"code": event.name, "message": event.value}})
    return event


def is_end(event: ExecEvent) -> bool:
    return isinstance(event, EndEvent)


STREAM_CUT = (
    "the daemon's stream ended before the execution's end event (did the daemon stop?)"
)
