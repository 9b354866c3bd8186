"""Trace ids of tasks' submissions, for links from decisions to Jaeger."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from opentelemetry import context as otel_context
from opentelemetry import trace

from gfs.services.preemption.controller.types import Decision


def trace_id_of(contexts: Mapping[str, otel_context.Context], task_id: str) -> str | None:
    """The 32-hex trace id of `task_id`'s submission, if this instance saw it."""
    ctx = contexts.get(task_id) if task_id else None
    if ctx is None:
        return None
    span = trace.get_current_span(ctx).get_span_context()
    return format(span.trace_id, "032x") if span.is_valid else None


def with_trace_id(decision: Decision, contexts: Mapping[str, otel_context.Context]) -> Decision:
    """`decision` with its task's trace id in the detail (`trace_id`), for links to Jaeger."""
    found = trace_id_of(contexts, decision.task_id)
    if found is None or "trace_id" in decision.detail:
        return decision
    return replace(decision, detail={**decision.detail, "trace_id": found})
