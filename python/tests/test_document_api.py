"""The source document's "Usage Example" and "Direct Service Usage", against a real daemon."""

from __future__ import annotations

import hashlib

import pytest

from warden_sandbox import (
    AISandboxService,
    CodeInterpreterTool,
    PlatformLanguage,
    SandboxConfigurationError,
    SandboxRequest,
    SandboxResult,
    SecurityViolationError,
)


async def test_usage_example_formats_stdout_exactly(service: AISandboxService) -> None:
    code_tool = CodeInterpreterTool(sandbox_service=service)
    result = await code_tool.execute(code="import math; print(math.sqrt(144))", language="python")
    assert result == "STDOUT:\n12.0"


async def test_direct_service_usage_with_the_data_science_profile(service: AISandboxService) -> None:
    request = SandboxRequest(
        code="print('Hello from Secure Container')",
        language=PlatformLanguage.PYTHON,
        profile="data_science",
    )
    result = await service.execute(request)
    assert isinstance(result, SandboxResult)
    assert result.is_success
    assert result.stdout == "Hello from Secure Container\n"
    assert result.stderr == ""
    assert result.exit_code == 0
    assert result.artifacts == []


async def test_artifacts_carry_file_name_mime_type_size_and_bytes(service: AISandboxService) -> None:
    code = (
        "import os\n"
        "os.makedirs('output', exist_ok=True)\n"
        "open('output/table.csv', 'w').write('a,b\\n1,2\\n')\n"
        "open('output/blob.bin', 'wb').write(bytes(range(256)))\n"
    )
    result = await service.execute(SandboxRequest(code=code, profile="data_science"))
    assert result.is_success, result
    by_name = {a.file_name: a for a in result.artifacts}
    assert set(by_name) == {"table.csv", "blob.bin"}
    csv = by_name["table.csv"]
    assert csv.content == b"a,b\n1,2\n"
    assert csv.size == 8
    assert csv.mime_type.startswith("text/csv")
    blob = by_name["blob.bin"]
    assert blob.content == bytes(range(256))
    assert blob.sha256 == hashlib.sha256(bytes(range(256))).hexdigest()


async def test_a_failing_program_is_not_a_success(service: AISandboxService) -> None:
    result = await service.execute(SandboxRequest(code="import sys; print('bye', file=sys.stderr); sys.exit(3)", profile="data_science"))
    assert not result.is_success
    assert result.exit_code == 3
    assert result.stderr == "bye\n"


async def test_forbidden_import_raises_security_violation_error(service: AISandboxService) -> None:
    with pytest.raises(SecurityViolationError) as info:
        await service.execute(SandboxRequest(code="import subprocess\nprint(1)"))
    err = info.value
    assert err.status == 422
    assert err.code == "policy_violation"
    assert err.violation is not None
    assert err.violation.policy == "forbidden_imports"
    assert err.violation.kind == "forbidden_import"
    assert err.violation.module == "subprocess"
    assert err.violation.line == 1
    assert "subprocess" in err.message


async def test_a_timeout_above_the_quota_is_a_security_violation(service: AISandboxService) -> None:
    with pytest.raises(SecurityViolationError) as info:
        await service.execute(SandboxRequest(code="print(1)", timeout=3600))
    assert info.value.violation is not None
    assert info.value.violation.kind == "quota_exceeded"


async def test_unknown_profile_raises_sandbox_configuration_error(service: AISandboxService) -> None:
    with pytest.raises(SandboxConfigurationError) as info:
        await service.execute(SandboxRequest(code="print(1)", profile="no_such_profile"))
    assert info.value.code == "unknown_profile"
    assert info.value.status == 400
    assert "no_such_profile" in info.value.message


async def test_unknown_language_raises_sandbox_configuration_error(service: AISandboxService) -> None:
    with pytest.raises(SandboxConfigurationError) as info:
        await service.execute(SandboxRequest(code="puts 1", language="cobol"))
    assert info.value.code == "unknown_language"


async def test_other_languages_run(service: AISandboxService) -> None:
    result = await service.execute(SandboxRequest(code="echo $((6 * 7))", language=PlatformLanguage.BASH))
    assert result.stdout == "42\n"
    result = await service.execute(SandboxRequest(code="console.log(6 * 7)", language="JavaScript"))
    assert result.stdout == "42\n"


async def test_the_tool_reports_refusals_as_text_the_llm_can_act_on(service: AISandboxService) -> None:
    tool = CodeInterpreterTool(sandbox_service=service)
    text = await tool.execute(code="import os\nprint(os.getcwd())", language="python")
    assert text.startswith("ERROR:\nthe code did not run: policy forbidden_imports refused")
    assert '"os"' in text
    # A name built at run time passes the check before the run; the interpreter refuses it.
    code = "print(1)\nimp = getattr(__builtins__, '__imp' + 'ort__')\nimp('o' + 's')"
    text = await tool.execute(code=code, language="python")
    assert text.startswith("ERROR:\nthe run was stopped: policy forbidden_imports refused"), text
    assert "refused at run time" in text and "(line 3)" in text, text
    text = await tool.execute(code="1", language="cobol")
    assert text.startswith("ERROR:\n") and "cobol" in text
    text = await tool.execute(language="python")
    assert text == "ERROR:\ninvalid arguments: code: Field required"


async def test_the_tool_reports_a_timeout(service: AISandboxService) -> None:
    tool = CodeInterpreterTool(sandbox_service=service)
    text = await tool.execute(code="print('start', flush=True)\nwhile True:\n    pass", timeout=0.5)
    assert text == "STDOUT:\nstart\n\nERROR:\nthe time limit ended the run (timeout); every process was killed"


async def test_the_tool_lists_files(service: AISandboxService) -> None:
    tool = CodeInterpreterTool(sandbox_service=service, profile="data_science")
    text = await tool.execute(code="open('output/r.txt', 'w').write('hi')")
    assert text == "FILES:\n- r.txt (text/plain, 2 bytes)"


async def test_health_extra_reports_the_daemon(service: AISandboxService) -> None:
    details = service.health_extra()
    assert details["status"] == "ok"
    assert details["healthz"] == {"status": "ok"}
    assert details["readyz"]["status"] == "ready"
    assert details["url"] == service.base_url
    assert details["embedded"] is False
