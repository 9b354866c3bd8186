"""The environment a worker starts with: an allowlist of the agent's variables, never a secret.

Workers used to inherit the agent's whole environment, and with it the node key or the master
command secret and `DATABASE_URL` where the demo, compose and the fault harness set them: any task
could sign commands or write control rows (issue 22). A worker now gets only the variables whose
names match the allowlist (`AGENT_WORKER_ENV_ALLOW`, shell-style patterns), then what the agent
sets for it (CUDA_VISIBLE_DEVICES, GFS_TASK_ID, GFS_CHECKPOINT_DIR...). The names in `NEVER_PASSED`
are removed even when a pattern (say `*`) matches them.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping

DEFAULT_ALLOW: tuple[str, ...] = (
    # What a process expects of a login environment.
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "TERM", "TZ", "TMPDIR", "LANG", "LANGUAGE", "LC_*",
    # The runtime a task may be written in (the fake task is Python).
    "PYTHONPATH", "PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE", "VIRTUAL_ENV", "LD_LIBRARY_PATH",
    # GPU runtimes (the agent sets CUDA_VISIBLE_DEVICES itself, per worker).
    "CUDA_*", "NVIDIA_*", "NCCL_*",
)  # fmt: skip
"""The default `AGENT_WORKER_ENV_ALLOW`. Nothing of the agent's own configuration (Kafka, Postgres,
OpenTelemetry exporters and their headers, keys) is on it; a deployment adds what its tasks need."""

NEVER_PASSED: frozenset[str] = frozenset(
    {
        "GFS_NODE_KEY",
        "GFS_COMMAND_SECRET",
        # The key being rotated is as much a key as the current one (key_rotation.py).
        "GFS_NODE_KEY_PREVIOUS",
        "GFS_COMMAND_SECRET_PREVIOUS",
        "DATABASE_URL",
        "PREEMPTION_ADMIN_TOKEN",
        "PGPASSWORD",
        "KAFKA_SASL_PASSWORD",
    }
)
"""Secrets no worker ever sees, whatever the allowlist says."""


def parse_allow(value: str) -> tuple[str, ...]:
    """`AGENT_WORKER_ENV_ALLOW` (comma-separated patterns; blanks ignored) as a tuple."""
    return tuple(part.strip() for part in value.split(",") if part.strip())


def worker_environment(environ: Mapping[str, str], allow: Iterable[str] = DEFAULT_ALLOW) -> dict[str, str]:
    """The variables of `environ` a worker may inherit: allowed by a pattern, not a secret."""
    patterns = tuple(allow)
    return {
        name: value
        for name, value in environ.items()
        if name not in NEVER_PASSED and any(fnmatch.fnmatchcase(name, p) for p in patterns)
    }


def strip_secrets(env: dict[str, str]) -> dict[str, str]:
    """`env` without the `NEVER_PASSED` names (the last check before a worker starts)."""
    for name in NEVER_PASSED:
        env.pop(name, None)
    return env
