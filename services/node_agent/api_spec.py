"""The node agent's HTTP contract (`--metrics-port`): /metrics and /healthz for Prometheus and the
kubelet, described as OpenAPI 3.1 at /openapi.json (copy: docs/api/node-agent.openapi.json)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from gfs.services.platform.openapi import Api, Operation, metrics_operation, openapi_operation


class Health(BaseModel):
    model_config = ConfigDict(extra="forbid")

    status: Literal["alive"]


API = Api(
    "GFS node agent HTTP API",
    "Served on --metrics-port only (no API without it): metrics and the liveness probe.",
    [
        Operation("GET", "/healthz", "Liveness", Health, tag="probes"),
        metrics_operation(),
        openapi_operation(),
    ],
)
