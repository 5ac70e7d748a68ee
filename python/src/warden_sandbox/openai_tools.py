"""The code interpreter as an OpenAI function-calling tool.

Plain dicts in the shapes of OpenAI's API, so the ``openai`` package is not a dependency::

    tool = CodeInterpreterTool(sandbox_service=service)
    response = client.chat.completions.create(model=..., messages=messages,
                                              tools=[openai_tool(tool)])
    message = response.choices[0].message
    messages.append(message)
    for call in message.tool_calls or []:
        messages.append(await run_tool_call(tool, call))
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Dict, Mapping

if TYPE_CHECKING:
    from .tool import CodeInterpreterTool

__all__ = ["openai_tool", "openai_responses_tool", "run_tool_call", "tool_call_parts"]


def openai_tool(tool: "CodeInterpreterTool") -> Dict[str, Any]:
    """The entry of Chat Completions' ``tools``: ``{"type": "function", "function": {...}}``."""
    return {
        "type": "function",
        "function": {
            "name": tool.name,
            "description": tool.description,
            "parameters": tool.parameters_schema(),
        },
    }


def openai_responses_tool(tool: "CodeInterpreterTool") -> Dict[str, Any]:
    """The entry of the Responses API's ``tools`` (the flat form)."""
    return {
        "type": "function",
        "name": tool.name,
        "description": tool.description,
        "parameters": tool.parameters_schema(),
    }


def _get(obj: Any, key: str) -> Any:
    if isinstance(obj, Mapping):
        return obj.get(key)
    return getattr(obj, key, None)


def tool_call_parts(tool_call: Any) -> "tuple[str, str, str]":
    """``(id, function name, arguments JSON)`` of a tool call, given as the ``openai``
    package's object or as the API's JSON dict."""
    function = _get(tool_call, "function")
    return (
        str(_get(tool_call, "id") or ""),
        str(_get(function, "name") or ""),
        str(_get(function, "arguments") or ""),
    )


async def run_tool_call(tool: "CodeInterpreterTool", tool_call: Any) -> Dict[str, Any]:
    """Runs one of the model's tool calls and returns the ``{"role": "tool", …}`` message to
    send back. Arguments that are not a JSON object, or a call for another function, come back
    as an ``ERROR:`` report the model can act on."""
    call_id, name, arguments = tool_call_parts(tool_call)
    if name != tool.name:
        content = f"ERROR:\nunknown tool {name!r}; the available tool is {tool.name!r}"
    else:
        try:
            args = json.loads(arguments) if arguments.strip() else {}
        except ValueError as e:
            args = None
            content = f"ERROR:\ninvalid arguments: not JSON: {e}"
        if args is not None and not isinstance(args, dict):
            args = None
            content = "ERROR:\ninvalid arguments: expected a JSON object"
        if args is not None:
            content = await tool.execute(**args)
    return {"role": "tool", "tool_call_id": call_id, "content": content}
