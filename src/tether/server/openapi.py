"""The OpenAPI 3.1 document, generated from the route table and its pydantic models (never written by hand)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel
from pydantic.json_schema import JsonSchemaMode, models_json_schema

from tether.contracts.events import EVENT_TYPES
from tether.server.models import ErrorResponse, StreamEnd
from tether.server.routing import Operation

REF = "#/components/schemas/{model}"
_REASONS = {200: "OK", 201: "Created", 202: "Accepted", 400: "Bad request", 401: "Missing or wrong token",
            403: "Refused: a cross-origin request, or the X-Tether-Request header is missing", 404: "Not found",
            409: "Conflict", 413: "Request body over the server's limit", 415: "Body is not application/json",
            422: "Invalid request", 500: "Server error", 503: "Every event-stream slot is taken; retry later"}
WRITES = ("State-changing: send `Content-Type: application/json` and `X-Tether-Request: 1` (or `Authorization`); "
          "a request a page on another origin sent is refused (403).")


def document(
    operations: Sequence[Operation], *, version: str, token: bool, workflows: Sequence[str] = ()
) -> dict[str, Any]:
    """The whole document; `token` adds the bearer scheme and 401 answers to every gated route.

    `workflows` (the app engine's registered names) become the enum of `StartRequest.workflow`.
    """
    wanted: list[tuple[type[Any], JsonSchemaMode]] = [  # models and the events' pydantic dataclasses
        (ErrorResponse, "serialization"), *((cls, "serialization") for cls in EVENT_TYPES.values()),
        (StreamEnd, "serialization"),
    ]
    for op in operations:
        if op.response is not None:
            wanted.append((op.response, "serialization"))
        if op.body is not None:
            wanted.append((op.body, "validation"))
        if op.query is not None:
            wanted.append((op.query, "validation"))
    refs, schemas = models_json_schema(list(dict.fromkeys(wanted)), ref_template=REF)
    components: dict[str, Any] = {"schemas": schemas.get("$defs", {})}
    start = components["schemas"].get("StartRequest", {}).get("properties", {}).get("workflow")
    if start is not None and workflows:
        start["enum"] = sorted(workflows)
    if token:
        components["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
    paths: dict[str, dict[str, Any]] = {}
    for op in operations:
        paths.setdefault(op.path, {})[op.method.lower()] = _operation(op, refs, components, token)
    doc: dict[str, Any] = {
        "openapi": "3.1.0",
        "info": {
            "title": "tether serve",
            "version": version,
            "description": "Runs, journals, agent trees, costs, effect ledgers and live events of tether runs; "
                           "resolve suspensions, cancel and start runs. Requests under a Host name the server "
                           "was not started with are refused (403 host-not-allowed).",
        },
        "paths": paths,
        "components": components,
    }
    if token:
        doc["security"] = [{"bearer": []}]
    return doc


def _operation(op: Operation, refs: dict[Any, Any], components: dict[str, Any], token: bool) -> dict[str, Any]:
    out: dict[str, Any] = {"operationId": op.name, "summary": op.summary}
    writes = op.method != "GET"
    description = " ".join(d for d in (op.description, WRITES if writes else "") if d)
    if description:
        out["description"] = description
    params = [_path_param(name, name in op.int_params) for name in re.findall(r"{(\w+)}", op.path)]
    if op.query is not None:
        params.extend(_query_params(op.query, components))
    if params:
        out["parameters"] = params
    if op.body is not None:
        body = refs[(op.body, "validation")]
        out["requestBody"] = {"required": True, "content": {"application/json": {"schema": body}}}
    responses: dict[str, Any] = {}
    if op.stream is not None:
        responses[str(op.status)] = {
            "description": "Server-Sent Events: `event:` is the event type and `data:` an Event as JSON; the last "
                           "frame is `event: end` with a StreamEnd.",
            "content": {op.stream: {"schema": _sse_item(refs)}},
        }
    elif op.response is not None:
        responses[str(op.status)] = {"description": _REASONS.get(op.status, "OK"),
                                     "content": {"application/json": {"schema": refs[(op.response, "serialization")]}}}
    else:
        responses[str(op.status)] = {"description": "OK",
                                     "content": {"application/json": {"schema": {"type": "object"}}}}
    errors = set(op.errors)
    if op.query is not None or op.body is not None or op.int_params:
        errors.add(422)
    if op.body is not None:
        errors.add(400)
    if writes:
        errors.update((403, 413, 415))
    if op.stream is not None:
        errors.add(503)
    gated = token and not _exempt(op)
    if gated:
        errors.add(401)
    for status in sorted(errors):
        responses[str(status)] = {"description": _REASONS.get(status, "Error"),
                                  "content": {"application/json": {"schema": refs[(ErrorResponse, "serialization")]}}}
    out["responses"] = responses
    if token and not gated:
        out["security"] = []
    return out


def _sse_item(refs: dict[Any, Any]) -> dict[str, Any]:
    """One SSE frame (OpenAPI 3.1: the media type's schema describes each event)."""
    return {
        "type": "object",
        "required": ["data"],
        "properties": {
            "event": {"type": "string"},
            "id": {"type": "string"},
            "retry": {"type": "integer"},
            "data": {
                "type": "string",
                "contentMediaType": "application/json",
                "contentSchema": {"anyOf": [*(refs[(cls, "serialization")] for cls in EVENT_TYPES.values()),
                                            refs[(StreamEnd, "serialization")]]},
            },
        },
    }


def _exempt(op: Operation) -> bool:
    return op.path == "/healthz"


def _path_param(name: str, integer: bool) -> dict[str, Any]:
    kind: Literal["integer", "string"] = "integer" if integer else "string"
    schema: dict[str, Any] = {"type": kind}
    if kind == "string":
        schema["minLength"] = 1
    return {"name": name, "in": "path", "required": True, "schema": schema}


def _query_params(model: type[BaseModel], components: dict[str, Any]) -> list[dict[str, Any]]:
    schema = model.model_json_schema(ref_template=REF, mode="validation")
    components["schemas"].update(schema.pop("$defs", {}))
    required = set(schema.get("required", ()))
    params = []
    for name, prop in schema.get("properties", {}).items():
        param: dict[str, Any] = {"name": name, "in": "query", "required": name in required,
                                 "schema": prop if name in required else _absent_not_null(prop)}
        description = model.model_fields[name].description
        if description:
            param["description"] = description
        params.append(param)
    return params


def _absent_not_null(prop: dict[str, Any]) -> dict[str, Any]:
    """An optional query parameter is left out, never sent as null: drop the null branch of `X | None`."""
    branches = [b for b in prop.get("anyOf", ()) if b != {"type": "null"}]
    if "anyOf" not in prop or len(branches) != 1:
        return prop
    out = {k: v for k, v in prop.items() if k not in ("anyOf", "default")}
    out.update(branches[0])
    if prop.get("default") is not None:
        out["default"] = prop["default"]
    return out
