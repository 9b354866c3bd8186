"""Every query of the Grafana dashboard (infra/grafana/gfs-dashboard.json) runs on the stack's real
Prometheus (`/api/v1/query`, PROMETHEUS_URL) with status "success": Grafana's variables replaced as
Grafana would (`$pool` by the All value `.*`, `$__rate_interval` by 1m). No Grafana server is
needed. That the queries also return series from a live run is test_metrics_in_prometheus.py's.
Fails (not skips) with instructions when Prometheus does not answer.
"""

from __future__ import annotations

import aiohttp
import pytest
from grafana_queries import queries
from test_observability_stack import PROMETHEUS_URL, TIMEOUT, _require

pytestmark = pytest.mark.integration


@pytest.mark.asyncio(loop_scope="session")
async def test_every_dashboard_query_runs_on_the_stack_prometheus() -> None:
    await _require("Prometheus", PROMETHEUS_URL, "/-/ready", "prometheus")
    found = queries()
    assert len(found) >= 20, len(found)
    failed = []
    url = f"{PROMETHEUS_URL}/api/v1/query"
    async with aiohttp.ClientSession(timeout=TIMEOUT) as http:
        for query in found:
            async with http.get(url, params={"query": query.promql()}) as response:
                body = await response.json()
            if body.get("status") != "success":
                failed.append(f"{query.panel} [{query.ref_id}] {query.promql()}: {body}")
    assert not failed, "\n".join(failed)
