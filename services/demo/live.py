"""`gfs demo live`: the whole system on this machine, watched in the terminal.

Starts (on the stack `make up` started: Kafka, Postgres, Jaeger, Prometheus) the forecast, quota
and preemption services, 8 node agents with fake GPUs and one process hosting 100 virtual nodes,
then replays the bundled synthetic sample (`demo/sample`, made by `gfs trace synth` over
`demo/cluster.csv`; its settings in demo/sample/README.md) through Kafka in compressed time.

Time (`clock`):
- "accelerated" (the default, `make demo`): every process runs on the controllable clock
  (schemas/clock.py), which the demo drives free-running (services/demo/clock.py,
  services/demo/accelerated.py): `speed` sample seconds per wall second, a tick every 0.5 s, the
  sample's submissions stamped on the same clock. Sample hours close every few wall seconds, so the
  forecast stream publishes the shipped LSTM's forecasts (services/forecast/model/lstm-observed;
  the version names it) and the quota follows them. The model needs a week of history plus a day
  to calibrate on (`ml/calibrated.py`): the stream's history starts 9 days before the sample
  (`FORECAST_HISTORY_ORIGIN`), hours in which the demo's fresh cluster ran nothing, so they are
  zeros, and the LSTM forecasts from those and the hours the sample has played so far.
- "wall": the services on the wall clock, as in production, the sample replayed by `gfs replay`
  at `speed`x. No forecast hour closes in a few minutes, so the demo publishes a flat bootstrap
  forecast, flagged `(fallback)` (`_bootstrap_forecasts`); only this mode does.

A rich view shows, per pool, running and queued tasks per class, evictions, the quota and what it
was computed from against the forecast, and the guarantee periods that failed against the target
eviction rate; a final report follows, with the quotas computed from the LSTM. Ctrl-C (or the
end of the replay) stops every process the demo started, the agents' workers included; the
stack stays up until `make down`.

Before the view starts the demo prints one line with its run id, the preemption service's SRE
dashboard (`/dashboard`) and its work folder (`<state>/runs/demo-live-<run>/`, <state> being
$GFS_STATE_DIR, else $XDG_STATE_HOME/gfs, else ~/.local/state/gfs: logs, `pids.json` with every
process it started, `report.json`). Every process it starts, and the agents' workers, carry
`GFS_DEMO_RUN=<run>` in their environment. The ports (`--preemption-port` etc.) and the trace
(`--sample`) can be changed, so a test can run it beside other services.

Each run has its own id: consumer groups, inbox, node and task names and a Postgres schema, so
runs never see each other's state. The router of a new run starts at the topics' end
(`PREEMPTION_ROUTER_OFFSET_RESET=latest`), so older runs' submissions are not replayed into it; the
quota service's group starts there too (the demo commits the topics' end offsets for it first), so
it quotes from the first seconds even on a stack whose topics hold a long history.

Parts: this module runs the demo (`run_demo`); processes.py kills what is left of the run's
workers, topics.py publishes the bootstrap forecasts, view.py draws the terminal view,
final_report.py the report at the end. Starting and stopping the processes, and the run's Kafka
groups at the topics' end, are the tools' shared `gfs.services.toolkit`.
"""

from __future__ import annotations

import asyncio
import contextlib
import csv
import json
import os
import signal
import sys
import time
import uuid
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path

import aiohttp
import asyncpg
from rich.console import Console
from rich.live import Live

from gfs.schemas.topics import CLOCK_TOPIC, POOL_DEMAND_TOPIC, TASK_LIFECYCLE_TOPIC, TASK_SUBMIT_TOPIC
from gfs.services.demo.accelerated import BASE_S, clock_env, drive_clock
from gfs.services.demo.clock import ClockState
from gfs.services.demo.final_report import (
    _lstm_line,
    _lstm_quotas,
    _periods,
    _rates,
    _report,
    _side_by_side,
    _side_by_side_table,
)
from gfs.services.demo.processes import _kill_workers
from gfs.services.demo.report_page import write_page
from gfs.services.demo.topics import _bootstrap_forecasts
from gfs.services.demo.view import View, _json, _render
from gfs.services.node_agent.worker_env import DEFAULT_ALLOW
from gfs.services.platform.migrations import migrated_schema
from gfs.services.platform.paths import state_dir
from gfs.services.platform.settings import REPO_ROOT, PlatformSettings
from gfs.services.toolkit.consumer_groups import start_group_at_end
from gfs.services.toolkit.processes import ServiceProcess, stop_all

DEMO_DIR = REPO_ROOT / "demo"
SAMPLE = DEMO_DIR / "sample"
PORTS = {"quota": 8081, "preemption": 8082, "forecast": 6066}
AGENT_METRICS = 9101  # Prometheus scrapes agents on 9101-9110
FORECAST_SOURCES = (
    TASK_SUBMIT_TOPIC,
    TASK_LIFECYCLE_TOPIC,
    POOL_DEMAND_TOPIC,
)  # the forecast stream's inputs


async def run_demo(
    *,
    speed: float,
    settle_s: float,
    max_s: float,
    console: Console,
    sample: Path = SAMPLE,
    ports: dict[str, int] | None = None,
    agent_metrics_port: int = AGENT_METRICS,
    clock: str = "accelerated",
) -> int:
    ports = PORTS | (ports or {})
    if clock not in ("accelerated", "wall"):
        console.print(f"[red]--clock must be accelerated or wall, not {clock!r}")
        return 2
    accelerated = clock == "accelerated"
    settings = PlatformSettings()
    secret = os.environ.get("GFS_COMMAND_SECRET")
    if not secret:
        console.print(
            "[red]GFS_COMMAND_SECRET is not set: run through `make demo` (it exports the stack's env)"
        )
        return 2
    run = uuid.uuid4().hex[:6]
    workdir = state_dir("runs", f"demo-live-{run}")  # services/platform/paths.py: not the checkout
    workdir.mkdir(parents=True, exist_ok=True)
    schema = f"demo_{run}"
    dsn = await migrated_schema(settings.database_url, schema)
    # The agents' workers keep the run's marker (their environment is an allowlist otherwise), so
    # the demo finds and stops every process it started, workers included, when it ends.
    worker_env_allow = ",".join((*DEFAULT_ALLOW, "GFS_DEMO_RUN"))
    base = os.environ | {
        "DATABASE_URL": dsn,
        "PYTHONUNBUFFERED": "1",
        "GFS_DEMO_RUN": run,
        "AGENT_WORKER_ENV_ALLOW": worker_env_allow,
    }
    clock_name = f"demo-{run}"  # the run's own clock: another run's ticks never move its services
    timed = clock_env(clock_name) if accelerated else {k: {} for k in ("forecast", "quota", "pre", "agent")}
    rows = list(csv.DictReader((DEMO_DIR / "cluster.csv").open()))
    agents = [r for r in rows if r["node_name"].startswith("agent-")]
    virtual = workdir / "virtual.csv"
    with virtual.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(r for r in rows if not r["node_name"].startswith("agent-"))
    procs = [
        ServiceProcess(
            "forecast",
            ["serve", "forecast"],
            base
            | {
                "OTEL_SERVICE_NAME": "gfs-forecast",
                "FORECAST_APP_ID": f"demo-forecast-{run}",
                "FORECAST_STORE": "memory://",
                "FORECAST_TICK_S": "20",
                "FORECAST_DATADIR": str(workdir / "faust"),
                "FORECAST_WEB_PORT": str(ports["forecast"]),
            }
            | timed["forecast"],
            workdir / "forecast.log",
        ),
        ServiceProcess(
            "quota",
            ["serve", "quota"],
            base
            | {
                "OTEL_SERVICE_NAME": "gfs-quota",
                "QUOTA_GROUP": f"demo-quota-{run}",
                "QUOTA_POOLS": ",".join(sorted({r["gpu_model"] for r in rows})),
                "QUOTA_REFRESH_S": "10",
                "QUOTA_API_PORT": str(ports["quota"]),
                # The fence is an advisory lock per database, not per schema: with the default key
                # another quota service on the stack's Postgres (a test's) would hold this one back.
                "QUOTA_FENCE_KEY": str(uuid.uuid4().int % 2**48),
            }
            | timed["quota"],
            workdir / "quota.log",
        ),
        ServiceProcess(
            "preemption",
            ["serve", "preemption"],
            base
            | {
                "OTEL_SERVICE_NAME": "gfs-preemption",
                "PREEMPTION_GROUP": f"demo-pre-{run}",
                "PREEMPTION_ROUTER_GROUP": f"demo-router-{run}",
                "PREEMPTION_INBOX_TOPIC": f"demo-inbox-{run}",
                "PREEMPTION_ROUTER_OFFSET_RESET": "latest",
                "PREEMPTION_API_PORT": str(ports["preemption"]),
                "PREEMPTION_STATUS_S": "10",
                "PREEMPTION_GRACE_S": "5",
                "PREEMPTION_INSTANCE": f"demo-{run}",
                "PREEMPTION_POOLS": ",".join(sorted({r["gpu_model"] for r in rows})),
            }
            | timed["pre"],
            workdir / "preemption.log",
        ),
    ]
    for i, row in enumerate(agents):
        node = f"{run}-{row['node_name']}"
        args = ["serve", "node-agent", "--node", node, "--gpu-model", row["gpu_model"], "--fake-gpus"]
        args += ["--gpus", row["gpu_capacity_num"], "--telemetry-s", "2", "--state-dir", str(workdir / node)]
        args += ["--metrics-port", str(agent_metrics_port + i)]
        env = base | {"OTEL_SERVICE_NAME": "gfs-node-agent"} | timed["agent"]
        procs.append(ServiceProcess(node, args, env, workdir / f"{node}.log"))
    virtual_args = ["serve", "virtual-nodes", "--nodes", str(virtual), "--prefix", f"{run}-"]
    virtual_args += ["--telemetry-s", "5"]
    if accelerated:
        virtual_args += ["--clock-name", clock_name]
    procs.append(
        ServiceProcess(
            "virtual-nodes",
            virtual_args,
            base | {"OTEL_SERVICE_NAME": "gfs-virtual-nodes"},
            workdir / "virtual-nodes.log",
        )
    )
    gfs = str(Path(sys.executable).with_name("gfs"))
    args = ["replay", "--trace", str(sample), "--speed", str(speed), "--task-prefix", f"{run}-"]
    replay = ServiceProcess(
        "replay",
        [*args, "--gfs-program", gfs],
        base | {"OTEL_SERVICE_NAME": "gfs-replay"},
        workdir / "replay.log",
    )
    view = View()
    api = f"http://127.0.0.1:{ports['preemption']}"
    console.print(
        f"GFS live demo {run}: dashboard {api}/dashboard  logs, pids and report: {workdir}", soft_wrap=True
    )
    # Traces are on when the environment names an OTLP endpoint (`make demo` does: the stack's
    # Jaeger); say which, so a viewer who finds no trace knows why.
    if settings.otel_exporter_otlp_endpoint:
        console.print(
            f"traces: every process exports spans to {settings.otel_exporter_otlp_endpoint}", soft_wrap=True
        )
    else:
        console.print(
            "traces: off (OTEL_EXPORTER_OTLP_ENDPOINT is not set; `make demo` sets it)", soft_wrap=True
        )
    pids = workdir / "pids.json"

    def started(p: ServiceProcess) -> None:
        p.start()
        known = json.loads(pids.read_text()) if pids.exists() else {}
        known[p.name] = p.proc.pid if p.proc is not None else None
        pids.write_text(json.dumps(known, indent=1))

    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stopping.set)
    try:
        # The quota service's new group would read its topics from their start: on a stack that has
        # run a while, minutes of other runs' records. Like the router, it starts at their end.
        from gfs.services.quota.service import TOPICS as QUOTA_TOPICS

        await start_group_at_end(settings.bootstrap_servers, f"demo-quota-{run}", QUOTA_TOPICS)
        if accelerated:
            # On the run's clock the stream must see only the run's task events (older runs' are
            # stamped at other times), and none of the clock topic's history.
            await start_group_at_end(
                settings.bootstrap_servers, f"demo-forecast-{run}", (*FORECAST_SOURCES, CLOCK_TOPIC)
            )
        for p in procs[:3]:
            started(p)
        async with aiohttp.ClientSession() as http:
            while not stopping.is_set() and await _json(http, f"{api}/readyz") is None:
                dead = [p for p in procs[:3] if p.proc is not None and p.proc.poll() is not None]
                if dead:
                    console.print(f"[red]{dead[0].name} exited at start: see {dead[0].log}", soft_wrap=True)
                    return 1
                await asyncio.sleep(0.5)
            await asyncio.sleep(2.0)  # the router's group settles (it starts at the topics' end)
            for p in procs[3:]:
                started(p)
            expected = len(rows)
            deadline = time.monotonic() + 120
            while not stopping.is_set() and time.monotonic() < deadline:
                body = await _json(http, f"{api}/pools")
                if body and sum(p["nodes"] for p in body["pools"].values()) >= expected:
                    break
                await asyncio.sleep(0.5)
            ticking = asyncio.Event()  # set to stop the clock (the replay's end on the wall clock)
            if accelerated:
                view.clock, view.speed = ClockState(), speed
                driver = asyncio.create_task(
                    drive_clock(settings, clock_name, sample, run, gfs, speed, view.clock, ticking, dsn)
                )
            else:
                if not stopping.is_set():
                    started(replay)
                driver = asyncio.create_task(_bootstrap_forecasts(settings, rows, ticking))
            ended_at: float | None = None
            db = await asyncpg.connect(dsn)
            try:
                with Live(_render(view, run, ports), console=console, refresh_per_second=2) as live:
                    while not stopping.is_set():
                        body = await _json(http, f"{api}/pools")
                        view.pools = (body or {}).get("pools", view.pools)
                        view.quotas = (
                            await _json(http, f"http://127.0.0.1:{ports['quota']}/quotas") or view.quotas
                        )
                        counts = await db.fetch(
                            "SELECT pool, kind, count(*) AS n FROM preemption_decision GROUP BY pool, kind"
                        )
                        view.counts = {(r["pool"], r["kind"]): int(r["n"]) for r in counts}
                        view.periods = await _periods(db, run)
                        if view.first_decision_s is None and any(k == "started" for _, k in view.counts):
                            view.first_decision_s = time.monotonic() - view.started
                        if view.clock is not None and view.clock.done and not view.replay_done:
                            view.replay_done, ended_at = True, time.monotonic()
                        if (
                            replay.proc is not None
                            and replay.proc.poll() is not None
                            and not view.replay_done
                        ):
                            view.replay_done, ended_at = True, time.monotonic()
                        if driver.done() and not driver.cancelled() and driver.exception() is not None:
                            raise RuntimeError("the demo's clock failed") from driver.exception()
                        live.update(_render(view, run, ports))
                        if ended_at is not None and time.monotonic() - ended_at > settle_s:
                            break
                        if time.monotonic() - view.started > max_s:
                            break
                        with contextlib.suppress(TimeoutError):
                            await asyncio.wait_for(stopping.wait(), timeout=1.0)
                report = await _report(db, view, run)
                stopped_at = (
                    datetime.fromtimestamp(BASE_S + view.clock.at_s, UTC) if view.clock is not None else None
                )
                side_rows = await _side_by_side(db, sample, run, speed, stopped_at)
                lstm = await _lstm_quotas(db)
            finally:
                ticking.set()
                driver.cancel()
                await db.close()
        console.print(report)
        console.print(_side_by_side_table(side_rows, speed, accelerated=accelerated))
        console.print(_lstm_line(lstm, accelerated), soft_wrap=True)
        (workdir / "report.json").write_text(
            json.dumps(
                {
                    "run": run,
                    "counts": {f"{p}/{k}": n for (p, k), n in view.counts.items()},
                    "first_decision_s": view.first_decision_s,
                    "clock": clock,
                    "clock_held_s": view.clock.held_s if view.clock is not None else 0.0,
                    "wall_s": time.monotonic() - view.started,
                    "lstm_quotas": lstm,
                    "eviction_rates": _rates(view),
                    "side_by_side": [asdict(r) for r in side_rows],
                },
                indent=2,
            )
        )
        page = write_page(workdir, json.loads((workdir / "report.json").read_text()), speed, accelerated)
        console.print(f"logs and the report: {workdir} (as a page: {page.as_uri()})", soft_wrap=True)
        return 0
    finally:
        stop_all([replay])
        stop_all(procs)
        _kill_workers(workdir, run)
