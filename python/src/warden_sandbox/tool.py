"""``CodeInterpreterTool``: the sandbox as a tool an LLM calls, with output formatted for an
LLM's context window.

The report has sections, each present only when it has something to say, separated by a blank
line::

    STDOUT:
    12.0

``STDOUT:`` and ``STDERR:`` hold the program's output (trailing whitespace removed), each cut
to ``max_output_length`` characters around a visible ``[... N characters truncated ...]``
marker that keeps the beginning and the end; ``ERROR:`` says why the run did not succeed (exit
code, the limit that stopped it, a policy refusal, an unknown language); ``FILES:`` lists the
artifacts the code left in ``/workspace/output``. A run that succeeded silently is
``(no output)``. Every section's body first goes through :func:`sanitize` (terminal escape
sequences and control characters removed), as in the daemon's Rust crates.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .domain.entities import SandboxRequest, SandboxResult
from .enums import PlatformLanguage
from .exceptions import InvalidRequestError, SandboxConfigurationError, SecurityViolationError
from .models import Reason
from .service import AISandboxService

__all__ = [
    "CodeInterpreterTool",
    "CodeInterpreterSchema",
    "format_result",
    "format_error",
    "truncate",
    "sanitize",
    "DEFAULT_MAX_OUTPUT_LENGTH",
]

DEFAULT_MAX_OUTPUT_LENGTH = 2000
"""Characters per section, as the daemon's ``max_output_length`` setting defaults."""

DEFAULT_LANGUAGES = tuple(member.value for member in PlatformLanguage)
"""The languages the tool offers by default: Warden's built-in runtimes."""

TOOL_NAME = "code_interpreter"
TOOL_DESCRIPTION = (
    "Run code in a secure, isolated sandbox and get back its output. Use it for calculations, "
    "data analysis and making files or charts. The sandbox has no network and a read-only "
    "filesystem except the working directory; files written to /workspace/output are returned. "
    "Print what you want to see: only stdout and stderr come back."
)


class CodeInterpreterSchema(BaseModel):
    """The arguments an LLM gives the tool."""

    model_config = ConfigDict(extra="forbid")

    code: str = Field(description="The complete program to run.")
    language: str = Field(
        default=PlatformLanguage.PYTHON.value,
        description="The language of the code: python, javascript or bash.",
    )
    timeout: Optional[float] = Field(
        default=None,
        description="Seconds the program may run; at most the profile's limit.",
    )


_STRING_INTRODUCERS = "]PX^_"
_C1_STRINGS = "\x90\x98\x9d\x9e\x9f"


def _in(text: str, i: int, lo: int, hi: int) -> bool:
    return i < len(text) and lo <= ord(text[i]) <= hi


def _skip_csi(text: str, i: int) -> int:
    while _in(text, i, 0x20, 0x3F):
        i += 1
    if _in(text, i, 0x40, 0x7E):
        i += 1
    return i


def _skip_string(text: str, i: int) -> int:
    while i < len(text):
        c = text[i]
        if c == "\n":
            return i
        if c in "\x07\x9c":
            return i + 1
        if c == "\x1b":
            if i + 1 < len(text) and text[i + 1] == "\\":
                return i + 2
            return _skip_escape(text, i + 1)
        i += 1
    return i


def _skip_escape(text: str, i: int) -> int:
    if i >= len(text):
        return i
    c = text[i]
    if c == "[":
        return _skip_csi(text, i + 1)
    if c in _STRING_INTRODUCERS:
        return _skip_string(text, i + 1)
    if _in(text, i, 0x20, 0x2F):
        while _in(text, i, 0x20, 0x2F):
            i += 1
        if _in(text, i, 0x30, 0x7E):
            i += 1
        return i
    if _in(text, i, 0x30, 0x7E):
        return i + 1
    return i  # a lone ESC: dropped, what follows is text


def sanitize(text: Union[str, bytes]) -> str:
    """``text`` as a model should read it, as the daemon's ``warden_types::llm::sanitize``
    makes it: escape sequences removed whole (CSI ``ESC [`` ... a final byte; OSC, DCS, SOS, PM
    and APC strings up to BEL, ``ESC \\`` or a newline, which is kept; other ``ESC`` sequences;
    their 8-bit forms; a lone ``ESC``), control characters (U+0000-U+001F, U+007F-U+009F)
    dropped except newlines and tabs, ``\\r\\n`` read as a newline, and a line with other
    carriage returns reduced to what follows the last one that has text after it
    (``10%\\r100%`` reads ``100%``). Bytes that are not UTF-8, and lone surrogates, become
    U+FFFD, visibly."""
    if isinstance(text, (bytes, bytearray)):
        text = bytes(text).decode("utf-8", errors="replace")
    out: List[str] = []
    i = 0
    n = len(text)
    while i < n:
        c = text[i]
        i += 1
        o = ord(c)
        if c == "\x1b":
            i = _skip_escape(text, i)
        elif c == "\x9b":
            i = _skip_csi(text, i)
        elif c in _C1_STRINGS:
            i = _skip_string(text, i)
        elif c in "\n\t\r":
            out.append(c)
        elif o < 0x20 or 0x7F <= o <= 0x9F:
            pass
        elif 0xD800 <= o <= 0xDFFF:
            out.append("\ufffd")
        else:
            out.append(c)
    clean = "".join(out)
    if "\r" not in clean:
        return clean
    lines = []
    for line in clean.split("\n"):
        if line.endswith("\r"):
            line = line[:-1]
        lines.append(next((part for part in reversed(line.split("\r")) if part), ""))
    return "\n".join(lines)


def truncate(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, keeping its beginning and end around a marker
    that says how much was left out."""
    if limit <= 0 or len(text) <= limit:
        return text
    head = limit // 2
    tail = limit - head
    omitted = len(text) - head - tail
    return f"{text[:head]}\n[... {omitted} characters truncated ...]\n{text[len(text) - tail:]}"


def _why_not_success(result: SandboxResult) -> Optional[str]:
    if result.is_success:
        return None
    if result.reason == Reason.TIMEOUT:
        return "the time limit ended the run (timeout); every process was killed"
    if result.reason == Reason.MEMORY:
        return "the memory limit was hit (memory); the program was killed"
    if result.reason == Reason.PIDS:
        return "the process limit was hit (pids): too many processes or threads"
    if result.reason == Reason.OUTPUT:
        return "the output passed its size limit (output); the run was stopped"
    if result.reason == Reason.SIGNAL:
        return f"the program was killed by signal {result.signal}"
    return f"the program exited with code {result.exit_code}"


def format_result(result: SandboxResult, max_output_length: int = DEFAULT_MAX_OUTPUT_LENGTH) -> str:
    """The LLM-facing report of one execution (see the module's documentation)."""
    sections: List[str] = []
    stdout = sanitize(result.stdout).rstrip()
    if stdout:
        body = truncate(stdout, max_output_length)
        if result.stdout_truncated:
            body += "\n[... the sandbox stopped keeping stdout here: output limit ...]"
        sections.append(f"STDOUT:\n{body}")
    stderr = sanitize(result.stderr).rstrip()
    if stderr:
        body = truncate(stderr, max_output_length)
        if result.stderr_truncated:
            body += "\n[... the sandbox stopped keeping stderr here: output limit ...]"
        sections.append(f"STDERR:\n{body}")
    why = _why_not_success(result)
    if why is not None:
        sections.append(f"ERROR:\n{why}")
    egress = [f"- {d.host}:{d.port} refused: {d.why}" for d in result.egress_denied]
    if egress:
        sections.append("EGRESS:\n" + truncate(sanitize("\n".join(egress)), max_output_length))
    files = [f"- {a.file_name} ({a.mime_type}, {a.size} bytes)" for a in result.artifacts]
    files += [f"- {s.name}: not returned ({s.why})" for s in result.skipped_artifacts]
    if files:
        sections.append("FILES:\n" + sanitize("\n".join(files)))
    return "\n\n".join(sections) if sections else "(no output)"


def format_error(error: Exception, max_output_length: int = DEFAULT_MAX_OUTPUT_LENGTH) -> str:
    """The report for a request the sandbox refused, so the LLM can correct its call."""
    if isinstance(error, SecurityViolationError):
        # A refusal by the import guard stopped the run at the refused import.
        if "refused at run time" in error.message:
            text = f"the run was stopped: {error.message}"
        else:
            text = f"the code did not run: {error.message}"
    elif isinstance(error, SandboxConfigurationError):
        text = f"the sandbox cannot run this request: {error.message}"
    elif isinstance(error, InvalidRequestError):
        text = f"invalid request: {error.message}"
    elif isinstance(error, ValidationError):
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'arguments'}: {e['msg']}" for e in error.errors()
        )
        text = f"invalid arguments: {problems}"
    else:
        text = str(error)
    return f"ERROR:\n{truncate(sanitize(text).rstrip(), max_output_length)}"


class CodeInterpreterTool:
    """Exposes the sandbox as a tool: an LLM's ``{"code", "language", "timeout"}`` in, a text
    report out.

    Refusals the LLM can fix (a forbidden import, an unknown language, a too-long timeout,
    malformed arguments) come back as an ``ERROR:`` report; failures it cannot (the daemon
    unreachable) are raised.

    :param sandbox_service: the connected :class:`AISandboxService`.
    :param profile: the profile to run under (default: the service's).
    :param max_output_length: characters per section of the report.
    :param languages: the languages offered to the LLM in the tool's schema.
    """

    name: str = TOOL_NAME
    description: str = TOOL_DESCRIPTION
    args_schema = CodeInterpreterSchema

    def __init__(
        self,
        sandbox_service: AISandboxService,
        *,
        profile: Optional[str] = None,
        max_output_length: int = DEFAULT_MAX_OUTPUT_LENGTH,
        languages: Sequence[str] = DEFAULT_LANGUAGES,
        name: Optional[str] = None,
        description: Optional[str] = None,
    ) -> None:
        self.sandbox_service = sandbox_service
        self.profile = profile
        self.max_output_length = max_output_length
        self.languages = list(languages)
        if name is not None:
            self.name = name
        if description is not None:
            self.description = description

    def _request(self, kwargs: Dict[str, Any]) -> SandboxRequest:
        args = CodeInterpreterSchema.model_validate(kwargs)
        return SandboxRequest(
            code=args.code, language=args.language, profile=self.profile, timeout_seconds=args.timeout
        )

    async def execute(self, **kwargs: Any) -> str:
        """Runs the LLM's ``code`` (in ``language``, default python; within ``timeout``
        seconds if given) and returns the formatted report."""
        try:
            request = self._request(kwargs)
            result = await self.sandbox_service.execute(request)
        except (SecurityViolationError, SandboxConfigurationError, InvalidRequestError, ValidationError) as e:
            return format_error(e, self.max_output_length)
        return format_result(result, self.max_output_length)

    def execute_sync(self, **kwargs: Any) -> str:
        """:meth:`execute` for callers without an event loop, over the service's sync client."""
        try:
            request = self._request(kwargs)
            profile = request.profile if request.profile is not None else self.sandbox_service.default_profile
            result = self.sandbox_service.sync_client.execute(
                request.code,
                language=request.language_name,
                profile=profile,
                timeout_seconds=request.timeout_seconds,
            )
        except (SecurityViolationError, SandboxConfigurationError, InvalidRequestError, ValidationError) as e:
            return format_error(e, self.max_output_length)
        return format_result(result, self.max_output_length)

    def parameters_schema(self) -> Dict[str, Any]:
        """The arguments as JSON Schema, as function-calling APIs take it."""
        return {
            "type": "object",
            "properties": {
                "code": {"type": "string", "description": "The complete program to run."},
                "language": {
                    "type": "string",
                    "enum": list(self.languages),
                    "description": "The language of the code.",
                },
                "timeout": {
                    "type": "number",
                    "description": "Seconds the program may run; at most the profile's limit.",
                },
            },
            "required": ["code"],
            "additionalProperties": False,
        }

    def to_openai_tool(self) -> Dict[str, Any]:
        """The tool for OpenAI's Chat Completions ``tools`` list
        (see :mod:`warden_sandbox.openai_tools`)."""
        from .openai_tools import openai_tool

        return openai_tool(self)

    def as_langchain_tool(self) -> Any:
        """The tool as a LangChain ``BaseTool`` (needs ``langchain-core``)."""
        from .langchain import WardenCodeInterpreterTool

        return WardenCodeInterpreterTool.from_interpreter(self)
