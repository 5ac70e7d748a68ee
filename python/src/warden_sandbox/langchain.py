"""The code interpreter as a LangChain tool (``langchain-core``'s ``BaseTool``).

>>> lc_tool = CodeInterpreterTool(sandbox_service=service).as_langchain_tool()  # doctest: +SKIP
>>> await lc_tool.ainvoke({"code": "print(6 * 7)"})                            # doctest: +SKIP
'STDOUT:\\n42'

``ainvoke`` runs on the service's async client; ``invoke`` (sync agents) on its sync client.
"""

from __future__ import annotations

from typing import Optional, Type

try:
    from langchain_core.callbacks import AsyncCallbackManagerForToolRun, CallbackManagerForToolRun
    from langchain_core.tools import BaseTool
except ImportError as e:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "warden_sandbox.langchain needs langchain-core: pip install 'warden-sandbox[langchain]'"
    ) from e

from pydantic import BaseModel, ConfigDict

from .tool import CodeInterpreterSchema, CodeInterpreterTool

__all__ = ["WardenCodeInterpreterTool"]


class WardenCodeInterpreterTool(BaseTool):
    """Runs code in a Warden sandbox; returns the :class:`CodeInterpreterTool` report."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    name: str = "code_interpreter"
    description: str = CodeInterpreterTool.description
    args_schema: Type[BaseModel] = CodeInterpreterSchema
    interpreter: CodeInterpreterTool

    @classmethod
    def from_interpreter(cls, interpreter: CodeInterpreterTool) -> "WardenCodeInterpreterTool":
        return cls(interpreter=interpreter, name=interpreter.name, description=interpreter.description)

    def _run(
        self,
        code: str,
        language: str = "python",
        timeout: Optional[float] = None,
        run_manager: Optional[CallbackManagerForToolRun] = None,
    ) -> str:
        return self.interpreter.execute_sync(code=code, language=language, timeout=timeout)

    async def _arun(
        self,
        code: str,
        language: str = "python",
        timeout: Optional[float] = None,
        run_manager: Optional[AsyncCallbackManagerForToolRun] = None,
    ) -> str:
        return await self.interpreter.execute(code=code, language=language, timeout=timeout)
