"""The OpenAI and LangChain adapters, driven by the real packages the way they call tools.

OpenAI: the real ``openai`` client talks to a mock of the API (no network), which checks the
tool schema it is sent and answers with a tool call; the SDK runs the call against the real
daemon and the mock checks the tool message that comes back. LangChain: the tool is invoked
with a ``ToolCall`` as LangChain's agents do (``ToolNode``/``AgentExecutor``), sync and async.
"""

from __future__ import annotations

import json
from typing import Any, Dict, List

import pytest
from pydantic import ValidationError

from warden_sandbox import AISandboxService, CodeInterpreterTool
from warden_sandbox.openai_tools import openai_responses_tool, openai_tool, run_tool_call


def _completion(message: Dict[str, Any], finish: str) -> Dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1700000000,
        "model": "gpt-test",
        "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
    }


async def test_openai_function_calling_round_trip(service: AISandboxService) -> None:
    import openai

    try:
        import httpx2 as ohttpx  # the HTTP library of openai >= 3
    except ImportError:
        import httpx as ohttpx  # type: ignore[no-redef]

    tool = CodeInterpreterTool(sandbox_service=service)
    requests: List[Dict[str, Any]] = []

    def handler(request: Any) -> Any:
        body = json.loads(request.content)
        requests.append(body)
        if len(requests) == 1:
            assert body["tools"] == [openai_tool(tool)]
            call = {
                "id": "call_abc",
                "type": "function",
                "function": {
                    "name": "code_interpreter",
                    "arguments": json.dumps({"code": "import math; print(math.sqrt(144))", "language": "python"}),
                },
            }
            return ohttpx.Response(200, json=_completion({"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls"))
        return ohttpx.Response(200, json=_completion({"role": "assistant", "content": "It is 12."}, "stop"))

    llm = openai.AsyncOpenAI(
        api_key="test", base_url="http://openai.test/v1",
        http_client=ohttpx.AsyncClient(transport=ohttpx.MockTransport(handler)),
    )
    messages: List[Any] = [{"role": "user", "content": "What is the square root of 144?"}]
    response = await llm.chat.completions.create(model="gpt-test", messages=messages, tools=[openai_tool(tool)])
    message = response.choices[0].message
    assert message.tool_calls
    messages.append(message.model_dump(exclude_none=True))
    for call in message.tool_calls:
        messages.append(await run_tool_call(tool, call))
    final = await llm.chat.completions.create(model="gpt-test", messages=messages, tools=[openai_tool(tool)])
    assert final.choices[0].message.content == "It is 12."
    sent_back = requests[1]["messages"][-1]
    assert sent_back == {"role": "tool", "tool_call_id": "call_abc", "content": "STDOUT:\n12.0"}
    await llm.close()


async def test_openai_tool_calls_with_bad_arguments_are_reported(service: AISandboxService) -> None:
    tool = CodeInterpreterTool(sandbox_service=service)
    bad_json = {"id": "c1", "type": "function", "function": {"name": "code_interpreter", "arguments": "{not json"}}
    reply = await run_tool_call(tool, bad_json)
    assert reply["tool_call_id"] == "c1" and reply["content"].startswith("ERROR:\ninvalid arguments: not JSON")
    other = {"id": "c2", "function": {"name": "web_search", "arguments": "{}"}}
    assert "unknown tool 'web_search'" in (await run_tool_call(tool, other))["content"]
    extra = {"id": "c3", "function": {"name": "code_interpreter", "arguments": json.dumps({"code": "1", "rm": True})}}
    assert "rm: Extra inputs are not permitted" in (await run_tool_call(tool, extra))["content"]


def test_openai_schemas_are_consistent(service: AISandboxService) -> None:
    tool = CodeInterpreterTool(sandbox_service=service, languages=["python"])
    chat = openai_tool(tool)
    responses = openai_responses_tool(tool)
    assert chat["function"]["parameters"] == responses["parameters"]
    params = chat["function"]["parameters"]
    assert set(params["properties"]) == set(tool.args_schema.model_fields)
    assert params["required"] == ["code"]
    assert params["properties"]["language"]["enum"] == ["python"]


@pytest.fixture
def lc_tool(service: AISandboxService) -> Any:
    return CodeInterpreterTool(sandbox_service=service).as_langchain_tool()


async def test_langchain_tool_call_async(lc_tool: Any) -> None:
    from langchain_core.messages import ToolMessage
    from langchain_core.tools import BaseTool

    assert isinstance(lc_tool, BaseTool)
    call = {"name": "code_interpreter", "args": {"code": "import math; print(math.sqrt(144))"}, "id": "call_1", "type": "tool_call"}
    message = await lc_tool.ainvoke(call)
    assert isinstance(message, ToolMessage)
    assert message.content == "STDOUT:\n12.0"
    assert message.tool_call_id == "call_1"


async def test_langchain_invoke_sync_uses_the_sync_client(lc_tool: Any) -> None:
    import asyncio

    # invoke() is what a sync agent calls; run it off the event loop as such an agent would be.
    text = await asyncio.to_thread(lc_tool.invoke, {"code": "print(6 * 7)", "language": "python"})
    assert text == "STDOUT:\n42"
    refused = await asyncio.to_thread(lc_tool.invoke, {"code": "import os"})
    assert refused.startswith("ERROR:\nthe code did not run")


async def test_langchain_sees_the_schema(lc_tool: Any) -> None:
    from langchain_core.utils.function_calling import convert_to_openai_tool

    converted = convert_to_openai_tool(lc_tool)
    assert converted["function"]["name"] == "code_interpreter"
    props = converted["function"]["parameters"]["properties"]
    assert set(props) == {"code", "language", "timeout"}
    assert converted["function"]["parameters"]["required"] == ["code"]
    # Invalid arguments are refused by LangChain's own validation against args_schema.
    with pytest.raises(ValidationError):
        await lc_tool.ainvoke({"language": "python"})
