"""The decode table of `gfs.services.platform.kafka.codec_bench` with the decider's handoff added
(issue 23, item 2): `python -m gfs.services.preemption.router.handoff_bench [--seconds-per-case 0.5]`.

`handoff` is what the decider pays for a record its own router validated: the router's put at the
broker's ack and the decider's take at the read (handoff.py), instead of a decode of the bytes."""

from __future__ import annotations

from collections.abc import Callable

from gfs.schemas.topics import decode, topic_for_event_type
from gfs.services.platform.kafka.codec_bench import golden_bytes, main
from gfs.services.preemption.router.handoff import Handoff


def handoff_case(event_type: str) -> dict[str, Callable[[], object]]:
    envelope = decode(topic_for_event_type(event_type).name, golden_bytes(event_type))
    handoff = Handoff(owned=lambda _: True)

    def hand_over() -> object:
        handoff.put(0, 1, envelope)
        return handoff.take(0, 1)

    return {"handoff": hand_over}


if __name__ == "__main__":
    main(extra=handoff_case)
