"""OpenAPI 3.1 documents of the services' SRE HTTP APIs, built from pydantic models (issue 26).

Each service declares its routes once, as `Operation`s naming the pydantic model (or type) of the
JSON it answers, its query parameters and its request body; `document()` turns them into the
OpenAPI document (the models' JSON Schemas under components/schemas), `add_openapi()` serves it at
`/openapi.json`, and `checked_query()` validates a request's query string against the SAME
declaration, so what the document promises and what the handler accepts cannot drift apart.

Why not a library (aiohttp-pydantic, aiohttp-apispec): both want class-based views or decorators
on every handler and pin their own pydantic/marshmallow ranges; the handlers here are plain
functions whose responses are a few pydantic models, and OpenAPI 3.1's schema dialect is the JSON
Schema pydantic already emits, so the document is a page of code with no new dependency.

Bad input is a 400 with a JSON body `{"error": ..., "parameter": ...}` (never a 500): an integer
that is not one or lies outside its range, and a query parameter the operation does not declare
(a typo such as `?limt=5` would otherwise be silently ignored).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from pydantic import BaseModel, TypeAdapter

OPENAPI_VERSION = "3.1.0"
JSON = "application/json"
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_PATH_PARAM = re.compile(r"{([^}/:]+)(?::[^}]*)?}")


def bad_request(name: str, value: str, expected: str) -> web.HTTPBadRequest:
    """A 400 whose JSON body names the parameter, the value given and what is accepted."""
    body = {"error": f"invalid query parameter {name!r}: {value!r}; expected {expected}", "parameter": name}
    return web.HTTPBadRequest(text=json.dumps(body), content_type=JSON)


@dataclass(frozen=True, slots=True)
class IntParam:
    """An integer query parameter in [low, high] (`default` when absent)."""

    name: str
    default: int
    low: int
    high: int
    description: str = ""

    def schema(self) -> dict[str, Any]:
        return {"type": "integer", "minimum": self.low, "maximum": self.high, "default": self.default}

    def parse(self, raw: str) -> int:
        expected = f"an integer from {self.low} to {self.high}"
        try:
            value = int(raw)
        except ValueError:
            raise bad_request(self.name, raw, expected) from None
        if not self.low <= value <= self.high:
            raise bad_request(self.name, raw, expected)
        return value


@dataclass(frozen=True, slots=True)
class StrParam:
    """A free string query parameter: 1..256 characters, no control character."""

    name: str
    description: str = ""

    def schema(self) -> dict[str, Any]:
        return {"type": "string", "minLength": 1, "maxLength": 256}

    def parse(self, raw: str) -> str:
        return identifier(self.name, raw)


QueryParam = IntParam | StrParam


def identifier(name: str, value: str) -> str:
    """`value` as an identifier (a task id, a pool, a trace id): 1..256 characters, no control
    character (a NUL reached Postgres as a 500 before issue 22)."""
    if not 1 <= len(value) <= 256 or _CONTROL.search(value):
        raise bad_request(name, value, "1 to 256 characters without control characters")
    return value


@dataclass(frozen=True, slots=True)
class Operation:
    """One route of an SRE API as the document describes it.

    `response`: the pydantic model (or any type pydantic can describe) of a 200's JSON body; None
    with a non-JSON `media_type` (the metrics text, an HTML page, an SVG plot). `errors`: the other
    statuses it may answer, with why (400 is added when it takes a query parameter or a body)."""

    method: str
    path: str
    summary: str
    response: Any = None
    media_type: str = JSON
    query: tuple[QueryParam, ...] = ()
    body: Any = None
    # status -> why, or (why, the model of its body) when it is not the `Error` body
    errors: Mapping[int, str | tuple[str, Any]] = field(default_factory=dict)
    tag: str = ""
    # Its handler reads the query through `Api.query` (so an unknown parameter is a 400); off for
    # the pages other tools fetch as they like (/metrics, /openapi.json).
    strict_query: bool = True

    def path_params(self) -> list[str]:
        return _PATH_PARAM.findall(self.path)


class Api:
    """A service's operations, by (method, path); a handler asks it for its validated query."""

    def __init__(
        self, title: str, description: str, operations: Iterable[Operation], *, version: str = "1.0"
    ) -> None:
        self.title = title
        self.description = description
        self.version = version  # the API's, not the package's: the checked-in copy stays put
        self.operations = {(op.method.upper(), op.path): op for op in operations}

    def query(self, request: web.Request) -> dict[str, Any]:
        """The request's declared query parameters, parsed (defaults filled in); 400 for a bad
        value or for a parameter the operation does not declare."""
        route = request.match_info.route.resource
        path = route.canonical if route is not None else request.path
        method = "GET" if request.method.upper() == "HEAD" else request.method.upper()
        op = self.operations[(method, path)]
        declared = {p.name: p for p in op.query}
        for name in request.query:
            if name not in declared:
                accepted = ", ".join(sorted(declared)) or "none"
                raise bad_request(name, request.query[name], f"no such parameter (accepted: {accepted})")
        out: dict[str, Any] = {}
        for name, param in declared.items():
            raw = request.query.get(name)
            if raw is None:
                out[name] = getattr(param, "default", None)
            else:
                out[name] = param.parse(raw)
        return out

    def document(self) -> dict[str, Any]:
        return document(self.title, self.version, self.description, self.operations.values())


def _schema(kind: Any, components: dict[str, Any]) -> dict[str, Any]:
    """`kind`'s JSON Schema; every model it names (itself too) goes to components/schemas."""
    schema = TypeAdapter(kind).json_schema(ref_template="#/components/schemas/{model}", mode="serialization")
    definitions = schema.pop("$defs", {})
    if isinstance(kind, type) and issubclass(kind, BaseModel):
        definitions[kind.__name__] = schema
        schema = {"$ref": f"#/components/schemas/{kind.__name__}"}
    for name, definition in definitions.items():
        if components.setdefault(name, definition) != definition:
            raise ValueError(f"two different models are named {name!r} in one API document")
    return schema


_ERROR = {
    "type": "object",
    "properties": {"error": {"type": "string"}, "parameter": {"type": "string"}},
    "required": ["error"],
}


def document(title: str, version: str, description: str, operations: Iterable[Operation]) -> dict[str, Any]:
    """The OpenAPI 3.1 document of `operations` (deterministic: paths and schemas sorted)."""
    components: dict[str, Any] = {"Error": _ERROR}
    paths: dict[str, dict[str, Any]] = {}
    for op in sorted(operations, key=lambda o: (o.path, o.method)):
        parameters: list[dict[str, Any]] = [
            {"name": name, "in": "path", "required": True, "schema": {"type": "string", "minLength": 1}}
            for name in op.path_params()
        ]
        parameters += [
            {"name": p.name, "in": "query", "required": False, "schema": p.schema()}
            | ({"description": p.description} if p.description else {})
            for p in op.query
        ]
        if op.response is not None:
            content = {op.media_type: {"schema": _schema(op.response, components)}}
        else:
            content = {op.media_type: {"schema": {"type": "string"}}}
        responses: dict[str, Any] = {"200": {"description": "OK", "content": content}}
        errors: dict[int, str | tuple[str, Any]] = dict(op.errors)
        if op.strict_query or op.body is not None or op.path_params():
            errors.setdefault(400, "invalid parameter or body (the body says which and why)")
        for status, error in sorted(errors.items()):
            why, body = error if isinstance(error, tuple) else (error, None)
            schema = {"$ref": "#/components/schemas/Error"} if body is None else _schema(body, components)
            responses[str(status)] = {"description": why, "content": {JSON: {"schema": schema}}}
        entry: dict[str, Any] = {
            "summary": op.summary,
            "operationId": _operation_id(op),
            "responses": responses,
        }
        if op.tag:
            entry["tags"] = [op.tag]
        if parameters:
            entry["parameters"] = parameters
        if op.body is not None:
            entry["requestBody"] = {
                "required": True,
                "content": {JSON: {"schema": _schema(op.body, components)}},
            }
        paths.setdefault(op.path, {})[op.method.lower()] = entry
    return {
        "openapi": OPENAPI_VERSION,
        "info": {"title": title, "version": version, "description": description},
        "paths": paths,
        "components": {"schemas": dict(sorted(components.items()))},
    }


def _operation_id(op: Operation) -> str:
    words = re.sub(r"[^A-Za-z0-9]+", "_", op.path).strip("_") or "root"
    return f"{op.method.lower()}_{words}"


def documented_routes(doc: Mapping[str, Any]) -> set[tuple[str, str]]:
    return {(method.upper(), path) for path, item in doc["paths"].items() for method in item}


def app_routes(app: web.Application) -> set[tuple[str, str]]:
    """(method, path) of every route `app` serves (aiohttp's implicit HEAD of a GET left out)."""
    out = set()
    for route in app.router.routes():
        if route.method in ("HEAD", "*") or route.resource is None:
            continue
        out.add((route.method, route.resource.canonical))
    return out


def render(api: Api) -> str:
    """The document as the checked-in copies hold it (docs/api/*.openapi.json)."""
    return json.dumps(api.document(), indent=2) + "\n"


def add_openapi(app: web.Application, api: Api) -> None:
    """Serve `api`'s document at GET /openapi.json (built once, at registration)."""
    body = render(api)

    async def openapi(_: web.Request) -> web.Response:
        return web.Response(text=body, content_type=JSON)

    app.router.add_get("/openapi.json", openapi)


def openapi_operation(tag: str = "meta") -> Operation:
    return Operation(
        "GET", "/openapi.json", "This document (OpenAPI 3.1)", dict[str, Any], tag=tag, strict_query=False
    )


def metrics_operation(tag: str = "probes") -> Operation:
    return Operation(
        "GET",
        "/metrics",
        "Prometheus metrics (text format)",
        media_type="text/plain",
        tag=tag,
        strict_query=False,
    )
