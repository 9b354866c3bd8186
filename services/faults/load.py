"""The steady load of a fault run (services/faults/harness.py): a forecast per pool so the quota
admits spot tasks, and submissions through `GfsClient` at the plan's rate, counting the ones that
failed (a broker outage makes `submit` raise `KafkaUnavailableError`) rather than assuming them
accepted."""

from __future__ import annotations

import asyncio
import random
import sys
import time
from datetime import UTC, datetime

from gfs.schemas.envelope import wrap
from gfs.schemas.tasks import TaskClass, TaskSubmitted
from gfs.schemas.topics import FORECASTS_TOPIC
from gfs.services.faults.plan import FaultPlan, Report
from gfs.services.platform.kafka.producer import EnvelopeProducer
from gfs.services.platform.settings import PlatformSettings
from gfs.services.toolkit.forecasts import flat_forecast


async def _forecast(producer: EnvelopeProducer, pool: str, plan: FaultPlan) -> None:
    """A pool forecast (as the forecast stream would publish hourly): a modest HP demand, so the
    quota admits spot tasks and HP tasks preempt some."""
    hp = plan.agents * plan.gpus_per_agent * 0.4
    forecast = flat_forecast(pool, hp, std=1.0, p90=hp + 1.3, model_name="faults", now=datetime.now(UTC))
    await producer.send(FORECASTS_TOPIC, wrap(forecast, producer="faults"))


async def _load(
    settings: PlatformSettings, pool: str, run: str, plan: FaultPlan, rng: random.Random, report: Report,
    stop: asyncio.Event,
) -> None:  # fmt: skip
    from gfs.services.producers.client import GfsClient
    from gfs.services.producers.errors import KafkaUnavailableError

    fake = (sys.executable, "-m", "gfs.services.node_agent.fake_task")
    async with GfsClient(bootstrap_servers=settings.bootstrap_servers, producer_name="faults-load",
                         send_timeout_s=15.0) as client:  # fmt: skip
        k = 0
        t0 = time.monotonic()
        while not stop.is_set():
            await asyncio.sleep(max(0.0, t0 + k / plan.rate - time.monotonic()))
            k += 1
            cls = TaskClass.HP if rng.random() < 0.4 else TaskClass.SPOT
            task = TaskSubmitted(
                task_id=f"flt-{run}-{k}", tenant=f"org-{rng.randrange(3)}", gpu_model=pool,
                gpus_per_worker=rng.choice((1, 1, 2)), workers=1, task_class=cls,
                command=(*fake, "--duration", f"{rng.uniform(5, 25):.1f}", "--checkpoint-s", "5"),
                checkpoint_interval_s=5.0,
            )  # fmt: skip
            report.submitted += 1
            try:
                await client.submit(task)
            except KafkaUnavailableError:
                report.submit_failures["KafkaUnavailableError"] += 1
            except Exception as exc:  # anything else is a finding: reported by type
                report.submit_failures[type(exc).__name__] += 1
