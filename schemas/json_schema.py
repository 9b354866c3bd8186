"""JSON Schema of each topic's messages, for non-Python producers and consumers.

A topic's schema is the envelope whose payload is the union of the topic's payload types,
discriminated by `event_type` (a `oneOf` with a discriminator mapping).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, Field, TypeAdapter, create_model

from gfs.schemas.envelope import envelope_type
from gfs.schemas.topics import TopicSpec

JSON_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"


def _tagged_envelope(payload_type: type[BaseModel]) -> type[BaseModel]:
    # The runtime Envelope keeps event_type a plain str (checked against the payload by a
    # validator); for the schema each member pins it to a literal so the union has a tag.
    name = payload_type.__name__
    tag: Any = Literal[name]  # a Literal built from a run-time string
    model: type[BaseModel] = create_model(
        f"{name}Envelope",
        __base__=envelope_type(payload_type),
        event_type=(tag, Field(description="The payload's class name.")),
    )
    return model


def topic_json_schema(spec: TopicSpec) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) that every message on `spec` satisfies."""
    members = tuple(_tagged_envelope(payload_type) for payload_type in spec.payload_types)
    schema: dict[str, Any]
    if len(members) == 1:
        schema = TypeAdapter(members[0]).json_schema(mode="validation")
    else:
        union: Any = Annotated[Union[members], Field(discriminator="event_type")]  # noqa: UP007
        schema = TypeAdapter(union).json_schema(mode="validation")
    # The topic's own identity goes last so it replaces the title/description pydantic derived
    # from the (single) member model.
    return {
        "$schema": JSON_SCHEMA_DIALECT,
        **schema,
        "$id": f"{spec.name}.schema.json",
        "title": spec.name,
        "description": f"{spec.description} Kafka key: payload.{spec.key_field}.",
    }
