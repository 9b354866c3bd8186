"""The forecast worker's HTTP contract (Faust's web server, FORECAST_WEB_PORT): the pages GFS adds,
described as OpenAPI 3.1 at /openapi.json (copy: docs/api/forecast.openapi.json). Faust's own
built-in pages (its router and table views) are Faust's and are not part of this contract. Faust
hands its pages its own request type, so these pages ignore query strings (strict_query off)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from gfs.services.platform.openapi import Api, Operation, metrics_operation, openapi_operation


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Health(_Strict):
    status: Literal["alive"]


class Ready(_Strict):
    ready: bool


API = Api(
    "GFS forecast worker HTTP API",
    "Probes and metrics of one `gfs serve forecast` worker.",
    [
        Operation(
            "GET",
            "/healthz",
            "Liveness: the worker's event loop answers",
            Health,
            tag="probes",
            strict_query=False,
        ),
        Operation(
            "GET",
            "/readyz",
            "Readiness: tables recovered, no rebalance in progress",
            Ready,
            errors={503: ("recovering or rebalancing (ready false)", Ready)},
            strict_query=False,
            tag="probes",
        ),
        metrics_operation(),
        openapi_operation(),
    ],
)
