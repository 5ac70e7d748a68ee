"""The SDK's models against the daemon's ``/openapi.json``, so the two cannot drift apart.

For each operation the SDK uses, the request model's fields must be exactly the request body's
properties, and the response model's fields exactly the response's properties, recursively
(artifacts, limits, …); a field the model requires must be required by the schema (the daemon
always sends it); an enum's values must be the schema's.
"""

from __future__ import annotations

import enum
import re
import typing
from typing import Any, Dict, Optional, Set, Tuple, Type

import pytest
from pydantic import BaseModel

from warden_sandbox import AsyncWardenClient
from warden_sandbox.models import (
    _EVENT_TYPES,
    ApiErrorDetail,
    CreateSandboxRequest,
    Destroyed,
    ExecResult,
    ExecuteRequest,
    FileList,
    ForkRequest,
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

# Fields the daemon's schema leaves open (an object of any shape): the SDK's model of them
# (Violation: policy, kind, message, line, column, and the kind's fields) is not compared.
FREE_FORM = {"violation"}

# (method, path, request model or None, status, response model)
OPERATIONS = [
    ("post", "/v1/execute", ExecuteRequest, "200", ExecResult),
    ("post", "/v1/sandboxes", CreateSandboxRequest, "201", SandboxInfo),
    ("get", "/v1/sandboxes", None, "200", SandboxList),
    ("get", "/v1/sandboxes/{}", None, "200", SandboxInfo),
    ("delete", "/v1/sandboxes/{}", None, "200", Destroyed),
    ("post", "/v1/sandboxes/{}/exec", SandboxExecRequest, "200", ExecResult),
    ("put", "/v1/sandboxes/{}/files/{}", None, "201", WrittenFile),
    ("get", "/v1/sandboxes/{}/files", None, "200", FileList),
    ("post", "/v1/sandboxes/{}/snapshot", SnapshotRequest, "201", SnapshotInfo),
    ("post", "/v1/sandboxes/{}/fork", ForkRequest, "201", Forked),
    ("get", "/v1/snapshots", None, "200", SnapshotList),
    ("delete", "/v1/snapshots/{}", None, "200", SnapshotDeleted),
]


@pytest.fixture(scope="module")
def spec(base_url: str) -> Dict[str, Any]:
    import httpx

    response = httpx.get(f"{base_url}/openapi.json", timeout=10)
    assert response.status_code == 200, "the daemon has no /openapi.json"
    return response.json()


def resolve(spec: Dict[str, Any], schema: Dict[str, Any]) -> Dict[str, Any]:
    """Follows $ref, and unwraps single-schema allOf and nullable oneOf/anyOf."""
    for _ in range(20):
        if "$ref" in schema:
            ref = schema["$ref"]
            assert ref.startswith("#/components/schemas/"), ref
            schema = spec["components"]["schemas"][ref.rsplit("/", 1)[1]]
            continue
        for key in ("allOf", "oneOf", "anyOf"):
            options = [s for s in schema.get(key, []) if s.get("type") != "null"]
            if key in schema and len(options) == 1:
                schema = {**{k: v for k, v in schema.items() if k != key}, **options[0]}
                break
        else:
            return schema
    raise AssertionError("unresolvable schema")


def find_path(spec: Dict[str, Any], pattern: str) -> Dict[str, Any]:
    for path, item in spec["paths"].items():
        if re.sub(r"\{[^}]*\}", "{}", path) == pattern:
            return item
    raise AssertionError(f"{pattern} is not in /openapi.json")


def json_schema_of(spec: Dict[str, Any], holder: Dict[str, Any]) -> Dict[str, Any]:
    content = holder.get("content", {})
    assert "application/json" in content, f"no JSON body in {holder}"
    return resolve(spec, content["application/json"]["schema"])


def inner_type(annotation: Any) -> Tuple[Optional[type], bool]:
    """The model or enum inside an annotation (Optional/List/Dict), and whether it is a list."""
    origin = typing.get_origin(annotation)
    if origin is None:
        return (annotation if isinstance(annotation, type) else None), False
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if origin in (list, typing.List):
        inner, _ = inner_type(args[0])
        return inner, True
    if len(args) == 1:
        return inner_type(args[0])
    return None, False


def field_names(model: Type[BaseModel]) -> Set[str]:
    return {f.alias or name for name, f in model.model_fields.items()}


def compare(spec: Dict[str, Any], model: Type[BaseModel], schema: Dict[str, Any], where: str) -> None:
    schema = resolve(spec, schema)
    props = schema.get("properties", {})
    assert field_names(model) == set(props), (
        f"{where}: the SDK's {model.__name__} has {sorted(field_names(model))}, "
        f"the daemon's schema has {sorted(props)}"
    )
    required = set(schema.get("required", []))
    for name, f in model.model_fields.items():
        key = f.alias or name
        if f.is_required():
            assert key in required, f"{where}.{key}: required by the SDK, optional in the daemon's schema"
        inner, is_list = inner_type(f.annotation)
        prop = resolve(spec, props[key])
        if is_list:
            prop = resolve(spec, prop.get("items", {}))
        if isinstance(inner, type) and issubclass(inner, BaseModel):
            if key in FREE_FORM:
                assert prop.get("additionalProperties", True) is not False, f"{where}.{key}: no longer free-form"
                continue
            compare(spec, inner, prop, f"{where}.{key}")
        elif isinstance(inner, type) and issubclass(inner, enum.Enum):
            assert enum_values(prop) == {m.value for m in inner}, f"{where}.{key}: enum values differ"


def enum_values(schema: Dict[str, Any]) -> Set[Any]:
    """An enum's values, spelled as ``enum`` or as a ``oneOf`` of ``const`` (schemars writes
    the latter when the variants have doc comments)."""
    values = set(schema.get("enum", []))
    for option in schema.get("oneOf", []):
        if "const" in option:
            values.add(option["const"])
        values.update(option.get("enum", []))
    return values


@pytest.mark.parametrize("method,path,request_model,status,response_model", OPERATIONS,
                         ids=[f"{m.upper()} {p}" for m, p, *_ in OPERATIONS])
def test_models_match_the_daemons_schema(
    spec: Dict[str, Any], method: str, path: str, request_model: Any, status: str, response_model: Any
) -> None:
    operation = find_path(spec, path).get(method)
    assert operation is not None, f"{method.upper()} {path} is not in /openapi.json"
    if request_model is not None:
        compare(spec, request_model, json_schema_of(spec, operation["requestBody"]), f"{method.upper()} {path} request")
    responses = operation["responses"]
    assert status in responses, f"{method.upper()} {path}: no {status} response in the schema"
    compare(spec, response_model, json_schema_of(spec, responses[status]), f"{method.upper()} {path} {status}")


def test_stream_events_match_the_daemons_schema(spec: Dict[str, Any]) -> None:
    operation = find_path(spec, "/v1/execute")["post"]
    events = resolve(spec, operation["responses"]["200"]["content"]["application/x-ndjson"]["schema"])
    kinds = set()
    for variant in events["oneOf"]:
        kind = variant["properties"]["type"]["const"]
        kinds.add(kind)
        assert kind in _EVENT_TYPES, f"the daemon streams {kind!r} events, which the SDK does not model"
        model = _EVENT_TYPES[kind]
        # The end event is the whole ExecResult beside its type.
        body = variant
        if "$ref" in variant:
            base = resolve(spec, {"$ref": variant["$ref"]})
            body = {
                "properties": {**base.get("properties", {}), **variant.get("properties", {})},
                "required": base.get("required", []) + variant.get("required", []),
            }
        compare(spec, model, body, f"event {kind}")
    assert {"stdout", "stderr", "end"} <= kinds


def test_error_bodies_match_the_daemons_schema(spec: Dict[str, Any]) -> None:
    for path, method in [("/v1/execute", "post"), ("/v1/sandboxes", "post"), ("/v1/sandboxes/{}/exec", "post")]:
        operation = find_path(spec, path)[method]
        body = json_schema_of(spec, operation["responses"]["default"])
        assert set(body["properties"]) == {"error"} and body["required"] == ["error"]
        compare(spec, ApiErrorDetail, body["properties"]["error"], f"{method.upper()} {path} error")


async def test_the_client_reads_the_spec(client: AsyncWardenClient) -> None:
    spec = await client.openapi()
    assert spec["openapi"].startswith("3.")
    assert "/v1/execute" in spec["paths"]
