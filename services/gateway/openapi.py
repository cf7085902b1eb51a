"""The OpenAPI 3.1 document of the JSON API, made from the route table and the pydantic models."""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from .api import API_ROUTES

__all__ = ["openapi_document"]

_PARAM = re.compile(r"\{(\w+)\}")
_REF = "#/components/schemas/{model}"

_ERROR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["type", "message"],
            "properties": {
                "type": {"type": "string"},
                "message": {"type": "string"},
                "details": {"type": "object"},
            },
        }
    },
}

_SSE: dict[str, dict[str, Any]] = {
    "/api/projects/{pid}/conversations/{cid}/events": {
        "summary": "The conversation's events: stored ones from the start (or after Last-Event-ID / "
        "?after=), then live ones (text/event-stream; id = event id, event = type, data = CloudEvent)",
        "query": ("after",),
        "headers": ("Last-Event-ID",),
    },
    "/api/events": {
        "summary": "Every bus event, live, filtered (type: exact or a prefix ending in '*'); "
        "a viewer too far behind gets a final 'error' event",
        "query": ("project", "conversation", "type"),
        "headers": (),
    },
    "/api/projects/{pid}/prds/{name}/events": {
        "summary": "The PRD loop's events: stored ones from the start (or after Last-Event-ID / ?after=, "
        "a PRD event seq), then live ones (text/event-stream; id = the event's seq, event = type, "
        "data = CloudEvent); 404 for an unknown PRD",
        "query": ("after",),
        "headers": ("Last-Event-ID",),
        "operation": "prd_events",
    },
}


def _parameters(path: str, query: tuple[str, ...], headers: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    params = [
        {"name": n, "in": "path", "required": True, "schema": {"type": "string"}}
        for n in _PARAM.findall(path)
    ]
    params += [{"name": n, "in": "query", "required": False, "schema": {"type": "string"}} for n in query]
    params += [{"name": n, "in": "header", "required": False, "schema": {"type": "string"}} for n in headers]
    return params


#: What only a state change (a POST) can be refused with: the same-origin rule (decision 0305).
_STATE_CHANGE_ERRORS: tuple[tuple[int, str], ...] = (
    (403, "cookie without the bearer header, from another origin (or none named)"),
    (415, "cookie without the bearer header, and a body that is not application/json"),
)


def _errors(method: str = "GET") -> dict[str, Any]:
    body = {"application/json": {"schema": {"$ref": _REF.format(model="Error")}}}
    codes = [
        (400, "bad input"),
        (401, "no valid token"),
        (404, "unknown project, conversation or event"),
        (409, "conflicts with the current state"),
        (413, "request body too large"),
        (422, "body does not fit its schema"),
        (503, "the service did not answer"),
    ]
    if method != "GET":
        codes.extend(_STATE_CHANGE_ERRORS)
    return {str(code): {"description": text, "content": body} for code, text in sorted(codes)}


def openapi_document(title: str = "JidoCode gateway", version: str = "1") -> dict[str, Any]:
    models: set[type[BaseModel]] = set()
    for spec in API_ROUTES:
        models.update(m for m in (spec.body, spec.response) if m is not None)
    ordered = sorted(models, key=lambda m: m.__name__)
    refs, schemas = models_json_schema([(m, "validation") for m in ordered], ref_template=_REF)
    components: dict[str, Any] = dict(schemas.get("$defs", {}))
    components["Error"] = _ERROR_SCHEMA
    paths: dict[str, dict[str, Any]] = {}
    for spec in API_ROUTES:
        op: dict[str, Any] = {
            "summary": spec.summary,
            "operationId": spec.handler.__name__,
            "parameters": _parameters(spec.path, spec.query),
            "responses": {
                str(spec.status): {
                    "description": spec.summary,
                    "content": {"application/json": {"schema": refs[(spec.response, "validation")]}}
                    if spec.response
                    else {},
                },
                **_errors(spec.method),
            },
        }
        if spec.body is not None:
            op["requestBody"] = {
                "required": spec.body.model_json_schema().get("required") is not None,
                "content": {"application/json": {"schema": refs[(spec.body, "validation")]}},
            }
        paths.setdefault(spec.path, {})[spec.method.lower()] = op
    for path, sse in _SSE.items():
        paths[path] = {
            "get": {
                "summary": sse["summary"],
                "operationId": sse.get("operation")
                or ("conversation_events" if "{cid}" in path else "bus_events"),
                "parameters": _parameters(path, sse["query"], sse["headers"]),
                "responses": {
                    "200": {
                        "description": "an SSE stream",
                        "content": {"text/event-stream": {"schema": {"type": "string"}}},
                    },
                    **_errors(),
                },
            }
        }
    return {
        "openapi": "3.1.0",
        "info": {"title": title, "version": version},
        "components": {
            "schemas": components,
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer"},
                "cookie": {"type": "apiKey", "in": "cookie", "name": "jidocode_token"},
            },
        },
        "security": [{"bearer": []}, {"cookie": []}],
        "paths": paths,
    }
