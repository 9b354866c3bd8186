"""Side-by-side decode timings of the hot scheduler inputs (issue 23, item 2), printed as a table.

`python -m services.platform.kafka.codec_bench [--seconds-per-case 0.5]`. Per message type (the
contract's golden examples), each way to turn a record value into a validated payload:

- `decode`: today's `schemas.topics.decode` (stdlib json.loads, then pydantic's model_validate);
- `validate_json`: pydantic's `model_validate_json` on the bytes (parsing in pydantic-core);
- `orjson`: orjson.loads, then model_validate (only when orjson is importable);
- `msgspec`: msgspec.json.decode to Python objects, then model_validate (when importable; a typed
  msgspec Struct would be faster still, but would be a second copy of the wire contracts, which
  stay in `schemas/` alone);
- `encode`: the router's re-encode (`model_dump_json`), the step one decode per record removes.

Measured in one process, one case after another, so the numbers compare with each other (the
machine is shared: absolute values are noisy, ratios much less so).
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from schemas.envelope import envelope_type
from schemas.topics import decode, encode, topic_for_event_type

GOLDEN = Path(__file__).resolve().parents[3] / "tests" / "contract" / "golden" / "v1"
HOT = ("TaskSubmitted", "NodeTelemetry", "EvictAck", "WorkerStarted", "WorkerExited")


def _per_call_us(action: Callable[[], object], seconds: float) -> float:
    """Microseconds per call: calls in batches until `seconds` passed (after a warm-up)."""
    for _ in range(200):
        action()
    calls, start = 0, time.perf_counter()
    while True:
        for _ in range(200):
            action()
        calls += 200
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return elapsed / calls * 1e6


def cases(event_type: str) -> dict[str, Callable[[], object]]:
    raw = json.dumps(json.loads((GOLDEN / f"{event_type}.json").read_text()), separators=(",", ":")).encode()
    topic = topic_for_event_type(event_type).name
    model = envelope_type(topic_for_event_type(event_type).payload_type(event_type))
    envelope = decode(topic, raw)
    found: dict[str, Callable[[], object]] = {
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
    return found


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--seconds-per-case", type=float, default=0.5)
    args = parser.parse_args(argv)
    columns = ("decode", "validate_json", "orjson", "msgspec", "encode")
    print(f"{'us per record':<16}" + "".join(f"{c:>15}" for c in columns))
    for event_type in HOT:
        timings = {
            name: _per_call_us(action, args.seconds_per_case) for name, action in cases(event_type).items()
        }
        cells = "".join(f"{timings[c]:>15.1f}" if c in timings else f"{'n/a':>15}" for c in columns)
        print(f"{event_type:<16}{cells}")


if __name__ == "__main__":
    main()
