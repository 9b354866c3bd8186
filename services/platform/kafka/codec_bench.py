"""Side-by-side decode timings of the hot scheduler inputs (issue 23, item 2), printed as a table.

`python -m gfs.services.platform.kafka.codec_bench [--seconds-per-case 0.5]`. Per message type (the
contract's golden examples), each way to turn a record value into a validated payload:

- `reference`: the step-by-step decode used before issue 23 (stdlib json.loads, then pydantic's
  model_validate; now `gfs.schemas.decoding._decode_checked`, the path of refused records);
- `decode`: `gfs.schemas.topics.decode` as it is (the one-pass path for a well-formed record);
- `validate_json`: pydantic's `model_validate_json` on the bytes (parsing in pydantic-core);
- `orjson`: orjson.loads, then model_validate (only when orjson is importable);
- `msgspec`: msgspec.json.decode to Python objects, then model_validate (when importable; a typed
  msgspec Struct would be faster still, but would be a second copy of the wire contracts, which
  stay in `schemas/` alone);
- `encode`: the router's re-encode (`model_dump_json`), the step one decode per record removes;
- `pickle`: unpickling the payload, a way to rebuild the models without validating them (the
  floor of any rebuild from bytes: it is not faster than validating, so not rebuilding is the win);
- `handoff`: what the decider pays instead of a decode when its own router validated the record
  (services/preemption/router/handoff.py; measured by
  `python -m gfs.services.preemption.router.handoff_bench`, which adds it to these cases: the
  platform does not import the preemption service).

Measured in one process in CPU time, so the numbers compare with each other (the machine is
shared: wall-clock times would count other processes' turns); the cases alternate in rounds and
each cell is the median of its rounds, so a burst of load elsewhere does not favour one case.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import pickle
import statistics
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from gfs.schemas.decoding import _decode_checked
from gfs.schemas.envelope import envelope_type
from gfs.schemas.topics import TASK_SUBMIT_TOPIC, decode, encode, topic_for_event_type

GOLDEN = Path(__file__).resolve().parents[3] / "tests" / "contract" / "golden" / "v1"
HOT = ("TaskSubmitted", "NodeTelemetry", "EvictAck", "WorkerStarted", "WorkerExited")


def _per_call_us(action: Callable[[], object], seconds: float, warm: int = 200) -> float:
    """CPU microseconds per call (this process's CPU time, so other processes on a shared machine
    count for little): calls in rounds of `warm` until `seconds` of CPU passed, after a warm-up."""
    for _ in range(warm):
        action()
    calls, start = 0, time.process_time()
    while True:
        for _ in range(warm):
            action()
        calls += warm
        elapsed = time.process_time() - start
        if elapsed >= seconds:
            return elapsed / calls * 1e6


def golden_bytes(event_type: str) -> bytes:
    """The contract's golden message of `event_type`, as compact JSON (as producers write it)."""
    return json.dumps(json.loads((GOLDEN / f"{event_type}.json").read_text()), separators=(",", ":")).encode()


def cases(event_type: str) -> dict[str, Callable[[], object]]:
    raw = golden_bytes(event_type)
    spec = topic_for_event_type(event_type)
    topic = spec.name
    model = envelope_type(spec.payload_type(event_type))
    envelope = decode(topic, raw)
    found: dict[str, Callable[[], object]] = {
        "reference": lambda: _decode_checked(spec, raw),
        "decode": lambda: decode(topic, raw),
        "validate_json": lambda: model.model_validate_json(raw),
    }
    try:
        import orjson

        found["orjson"] = lambda: model.model_validate(orjson.loads(raw))
    except ImportError:
        pass
    try:
        import msgspec

        parse: Any = msgspec.json.Decoder()
        found["msgspec"] = lambda: model.model_validate(parse.decode(raw))
    except ImportError:
        pass
    found["encode"] = lambda: encode(envelope)
    pickled = pickle.dumps(envelope.payload)  # a generic Envelope[T] does not pickle; its payload does
    found["pickle"] = lambda: pickle.loads(pickled)
    return found


def alternated(actions: dict[str, Callable[[], object]], seconds: float, rounds: int = 7) -> dict[str, float]:
    """CPU µs per call of each action: the actions take turns, `rounds` times, each for
    `seconds / rounds` per turn; the median of its turns per action."""
    turns: dict[str, list[float]] = {name: [] for name in actions}
    for _ in range(rounds):
        for name, action in actions.items():
            turns[name].append(_per_call_us(action, seconds / rounds, warm=100))
    return {name: statistics.median(values) for name, values in turns.items()}


class _Dropped:
    """A span exporter that drops what it gets (the cost of recording and batching spans, without
    a collector's network time)."""

    def export(self, spans: object) -> Any:
        from opentelemetry.sdk.trace.export import SpanExportResult

        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 0) -> bool:
        return True


def _each_time(
    loop: asyncio.AbstractEventLoop, make: Callable[[], Coroutine[Any, Any, None]]
) -> Callable[[], object]:
    def run() -> object:
        return loop.run_until_complete(make())

    return run


def span_cases(batch: int = 500) -> dict[str, Callable[[], object]]:
    """Microseconds per record through `RecordProcessor` (decode, trace context, handler), a span
    per record against one span per batch with a link per record; tracing off (the services'
    default: an SDK provider with no exporter) and on (spans recorded and batched for export)."""
    from datetime import UTC, datetime

    from aiokafka.structs import ConsumerRecord
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from gfs.services.platform.kafka.processing import ConsumeStats, RecordProcessor, RetryPolicy

    raw = json.dumps(json.loads((GOLDEN / "TaskSubmitted.json").read_text())).encode()
    parent = b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    records = [
        ConsumerRecord(
            topic=TASK_SUBMIT_TOPIC,
            partition=0,
            offset=i,
            timestamp=0,
            timestamp_type=0,
            key=b"k",
            value=raw,
            checksum=None,
            serialized_key_size=1,
            serialized_value_size=len(raw),
            headers=(("traceparent", parent),),
        )
        for i in range(batch)
    ]

    async def nothing(*_: object) -> None:
        return None

    found: dict[str, Callable[[], object]] = {}
    loop = asyncio.new_event_loop()
    for tracing in ("off", "on"):
        provider = TracerProvider()
        if tracing == "on":
            provider.add_span_processor(BatchSpanProcessor(_Dropped()))  # type: ignore[arg-type]
        tracer = provider.get_tracer("bench")
        for per_record in (True, False):
            processor = RecordProcessor(
                sink=None,  # type: ignore[arg-type]  # no record is refused here
                group="g",
                handler=nothing,
                retry=RetryPolicy(attempts=1),
                producer_name="b",
                now=lambda: datetime.now(UTC),
                stats=ConsumeStats(),
                tracer=tracer,
                span_per_record=per_record,
            )

            async def one_batch(processor: RecordProcessor = processor, tracer: Any = tracer) -> None:
                with tracer.start_as_current_span("route batch"):
                    for record in records:
                        await processor.process(record)

            name = f"tracing {tracing}, {'a span per record' if per_record else 'a span per batch'}"
            found[name] = _each_time(loop, one_batch)
    return found


def main(
    argv: list[str] | None = None, extra: Callable[[str], dict[str, Callable[[], object]]] | None = None
) -> None:
    """Print the table (`extra`: more cases per event type, measured in the same alternation)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--seconds-per-case", type=float, default=0.5)
    args = parser.parse_args(argv)
    columns = ("reference", "decode", "validate_json", "orjson", "msgspec", "encode", "pickle", "handoff")
    print(f"{'us per record':<16}" + "".join(f"{c:>15}" for c in columns))
    for event_type in HOT:
        timings = alternated(cases(event_type) | (extra(event_type) if extra else {}), args.seconds_per_case)
        cells = "".join(f"{timings[c]:>15.1f}" if c in timings else f"{'n/a':>15}" for c in columns)
        print(f"{event_type:<16}{cells}")
    batch = 500
    print(f"\nus per TaskSubmitted record through RecordProcessor, batches of {batch}:")
    for name, action in span_cases(batch).items():
        print(f"  {name:<40}{_per_call_us(action, args.seconds_per_case * 4, warm=2) / batch:>10.1f}")


if __name__ == "__main__":
    main()
