"""The SRE APIs' OpenAPI contracts (issue 26, item 3): the document a declaration gives, the query
validation that shares it (400 with a reason, never 500), and that every route each service's
app serves is in its document and the reverse. The live answers are validated against the
documents in tests/integration/test_openapi_contract.py."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from jsonschema import Draft202012Validator
from pydantic import BaseModel, ConfigDict
from typer.testing import CliRunner

from gfs.services.api_docs import CONTRACTS, contract
from gfs.services.cli import build_app
from gfs.services.platform.metrics import configure_metrics
from gfs.services.platform.openapi import Api, IntParam, Operation, StrParam, app_routes, documented_routes


class Hits(BaseModel):
    model_config = ConfigDict(extra="forbid")
    hits: list[int]


TOY = Api(
    "toy",
    "a toy API",
    [
        Operation("GET", "/hits", "hits", Hits, query=(IntParam("limit", 2, 1, 5), StrParam("pool"))),
        Operation("GET", "/things/{thing}", "one thing", Hits),
    ],
)


def _toy_app() -> web.Application:
    async def hits(request: web.Request) -> web.Response:
        q = TOY.query(request)
        return web.json_response({"hits": list(range(q["limit"])), "pool": q["pool"]})

    async def thing(request: web.Request) -> web.Response:
        TOY.query(request)
        return web.json_response({"hits": []})

    app = web.Application()
    app.router.add_get("/hits", hits)
    app.router.add_get("/things/{thing}", thing)
    return app


def test_the_document_carries_the_declared_parameters_models_and_errors() -> None:
    doc = TOY.document()
    assert doc["openapi"] == "3.1.0"
    get = doc["paths"]["/hits"]["get"]
    assert get["parameters"] == [
        {"name": "limit", "in": "query", "required": False,
         "schema": {"type": "integer", "minimum": 1, "maximum": 5, "default": 2}},
        {"name": "pool", "in": "query", "required": False,
         "schema": {"type": "string", "minLength": 1, "maxLength": 256}},
    ]  # fmt: skip
    answers = get["responses"]
    assert answers["200"]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/Hits"}
    assert answers["400"]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/Error"}
    hits = doc["components"]["schemas"]["Hits"]
    assert hits["additionalProperties"] is False  # an undeclared key fails validation
    assert hits["required"] == ["hits"]
    thing = doc["paths"]["/things/{thing}"]["get"]
    assert thing["parameters"] == [{"name": "thing", "in": "path", "required": True,
                                    "schema": {"type": "string", "minLength": 1}}]  # fmt: skip


@pytest.mark.asyncio
async def test_bad_and_unknown_query_parameters_are_400_with_the_reason() -> None:
    async with TestClient(TestServer(_toy_app())) as client:
        ok = await client.get("/hits?limit=3&pool=a")
        assert ok.status == 200
        assert await ok.json() == {"hits": [0, 1, 2], "pool": "a"}
        assert (await (await client.get("/hits")).json())["hits"] == [0, 1]  # the default, 2
        for query, parameter, expected in (
            ("limit=abc", "limit", "an integer from 1 to 5"),
            ("limit=-1", "limit", "an integer from 1 to 5"),
            ("limit=6", "limit", "an integer from 1 to 5"),
            ("limit=2.5", "limit", "an integer from 1 to 5"),
            ("pool=a%00b", "pool", "1 to 256 characters without control characters"),
            ("limt=3", "limt", "no such parameter (accepted: limit, pool)"),
        ):
            response = await client.get(f"/hits?{query}")
            assert response.status == 400, (query, response.status)
            assert response.content_type == "application/json"
            body = await response.json()
            assert body["parameter"] == parameter
            assert body["error"].startswith(f"invalid query parameter {parameter!r}")
            assert body["error"].endswith(f"expected {expected}")
        response = await client.get("/things/x?any=1")
        assert response.status == 400
        assert (await response.json())["error"].endswith("no such parameter (accepted: none)")
        assert (await client.head("/hits?limit=1")).status == 200  # aiohttp's HEAD of a GET


class _Anything:
    """Stands in for the decider or the quota service: building an app reads none of its state."""


def _apps() -> dict[str, Callable[[], web.Application]]:
    from gfs.services.node_agent.service import build_metrics_app
    from gfs.services.preemption.sre.api import build_api as preemption_api
    from gfs.services.quota.service import build_api as quota_api

    def metrics(name: str) -> Any:
        return configure_metrics(name)

    return {
        "preemption": lambda: preemption_api(_Anything(), metrics("t"), asyncio.Event()),  # type: ignore[arg-type]
        "quota": lambda: quota_api(_Anything(), metrics("t"), asyncio.Event()),  # type: ignore[arg-type]
        "node-agent": lambda: build_metrics_app(metrics("t")),
    }


@pytest.mark.parametrize("service", ["preemption", "quota", "node-agent"])
def test_every_route_the_app_serves_is_in_its_document_and_back(service: str) -> None:
    app = _apps()[service]()
    documented = documented_routes(contract(service).document())
    served = app_routes(app)
    assert served == documented, {"undocumented": served - documented, "not served": documented - served}
    assert ("GET", "/openapi.json") in served


def test_the_forecast_workers_pages_are_its_document() -> None:
    import gfs.services.forecast.app as forecast_app

    source = Path(forecast_app.__file__).read_text()
    pages = {line.split('"')[1] for line in source.splitlines() if line.strip().startswith("@app.page(")}
    assert {("GET", p) for p in pages} == documented_routes(contract("forecast").document())


@pytest.mark.parametrize("service", sorted(CONTRACTS))
def test_every_schema_of_the_documents_is_valid_json_schema(service: str) -> None:
    doc = contract(service).document()
    for schema in doc["components"]["schemas"].values():
        Draft202012Validator.check_schema(schema)  # raises SchemaError naming the fault
    for item in doc["paths"].values():
        for op in item.values():
            for response in op["responses"].values():
                for media in response["content"].values():
                    Draft202012Validator.check_schema(media["schema"])


def test_the_checked_in_documents_match_and_check_catches_a_stale_one(tmp_path: Path) -> None:
    runner, gfs = CliRunner(), build_app()
    result = runner.invoke(gfs, ["schemas", "openapi", "--check"])
    assert result.exit_code == 0, result.output
    assert runner.invoke(gfs, ["schemas", "openapi", "--check", "--directory", str(tmp_path)]).exit_code == 1
    assert runner.invoke(gfs, ["schemas", "openapi", "--directory", str(tmp_path)]).exit_code == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "forecast.openapi.json", "node-agent.openapi.json", "preemption.openapi.json", "quota.openapi.json",
    ]  # fmt: skip
    stale = tmp_path / "quota.openapi.json"
    stale.write_text(stale.read_text().replace('"/quotas"', '"/quota"'))
    result = runner.invoke(gfs, ["schemas", "openapi", "--check", "--directory", str(tmp_path)])
    assert result.exit_code == 1
    assert "quota.openapi.json is out of date" in result.output
