"""Identifier types: same shape, different meaning, so mypy keeps them apart."""

from __future__ import annotations

from typing import NewType

TaskId = NewType("TaskId", str)
PoolId = NewType("PoolId", str)
TenantId = NewType("TenantId", str)
