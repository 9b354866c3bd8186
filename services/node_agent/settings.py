"""`NodeAgentSettings`: the agent's environment (key material, staleness window, state directory)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import AliasChoices, Field, SecretStr, field_validator, model_validator

from gfs.services.node_agent.paths import path_part
from gfs.services.node_agent.worker_env import DEFAULT_ALLOW
from gfs.services.platform.key_rotation import PreviousUntil
from gfs.services.platform.paths import state_dir
from gfs.services.platform.settings import REPO_ROOT, PlatformSettings
from gfs.services.platform.signing import MIN_KEY_BYTES, node_key


class MissingKeyError(RuntimeError):
    """Neither GFS_NODE_KEY nor GFS_COMMAND_SECRET is set (or the one set is unusable)."""


class NodeAgentSettings(PlatformSettings):
    """Env: GFS_NODE_KEY (hex of this node's own command key; preferred: the node never holds the
    master secret) or GFS_COMMAND_SECRET (the scheduler's master secret, UTF-8; the agent derives
    its key with `signing.node_key`, handy for one-machine stacks and tests, then keeps only that
    key: see `own_key_only`).

    Rotation (services/platform/key_rotation.py, docs/operations.md): GFS_NODE_KEY_PREVIOUS (hex)
    or GFS_COMMAND_SECRET_PREVIOUS (a master secret) is a second key the agent accepts commands
    under, until GFS_COMMAND_SECRET_PREVIOUS_UNTIL; the agent always signs with the current key.
    """

    gfs_command_secret: SecretStr | None = None
    gfs_node_key: SecretStr | None = None
    gfs_command_secret_previous: SecretStr | None = None
    gfs_node_key_previous: SecretStr | None = None
    gfs_command_secret_previous_until: PreviousUntil = None
    # Commands issued longer ago than this are stale (and their ids are forgotten after it).
    agent_command_max_age_s: float = Field(default=300.0, gt=0)
    # How far in the future a command's issued_at may be (the scheduler's clock runs ahead).
    agent_clock_skew_s: float = Field(default=30.0, ge=0)
    # Shell-style patterns of the agent's variables a worker inherits (comma-separated); the keys
    # and DATABASE_URL never pass (worker_env.py). Env AGENT_WORKER_ENV_ALLOW.
    agent_worker_env_allow: str = ",".join(DEFAULT_ALLOW)
    # Self-fencing (fence.py; docs/attempts.md, "No two runs at once"): with no heartbeat
    # acknowledged by the broker for this long every worker is frozen (SIGSTOP); 0: off. Contact
    # back within AGENT_FENCE_THAW_WITHIN_S of the last acknowledged heartbeat thaws them, later
    # kills them. Keep the thaw window at most PREEMPTION_NODE_TIMEOUT_S - PREEMPTION_MAX_CLOCK_SKEW_S
    # (the service's defaults: 30 - 10) and the delay below it.
    agent_fence_after_s: float = Field(default=15.0, ge=0)
    agent_fence_thaw_within_s: float = Field(default=20.0, gt=0)
    # Journals and worker logs: <agent_state_root>/<node>/ unless --state-dir says otherwise.
    # Default: <state>/agents, the per-user state folder (services/platform/paths.py), not the
    # checkout. An explicit relative path resolves against the repository root, as it did.
    agent_state_root: Path = Field(default_factory=lambda: state_dir("agents"))
    # How often the agent polls its workers for exit.
    agent_watch_s: float = Field(default=0.05, gt=0)
    # After SIGKILL, how long to wait for the process to go before the eviction is FAILED.
    agent_kill_wait_s: float = Field(default=10.0, gt=0)
    # Tests and benchmarks only (services/node_agent/ack_delay.py): each WorkerStarted, WorkerExited
    # and EvictAck waits a random time in [0, this] before it is published (per-topic order kept),
    # seeded with AGENT_ACK_DELAY_SEED and the node name. 0 (the default): published at once. An
    # ack still waiting when the agent dies is lost, so never set it in production.
    agent_ack_delay_max_s: float = Field(default=0.0, ge=0, le=60)
    agent_ack_delay_seed: int = 0
    # "wall": the agent's time is the wall clock. "topic": the latest ClockTick ADVANCE on
    # gfs.control.clock (sim/live parity; see `sim_clock` and docs/services.md). Env GFS_AGENT_CLOCK.
    agent_clock: Literal["wall", "topic"] = Field(
        default="wall", validation_alias=AliasChoices("agent_clock", "gfs_agent_clock")
    )
    # Topic mode: the clock followed (ClockTick.clock, the Kafka key); ticks of other clocks on the
    # topic are ignored, so a test's private clock never moves another run's agents.
    agent_clock_name: str = Field(
        default="clock",
        min_length=1,
        validation_alias=AliasChoices("agent_clock_name", "gfs_agent_clock_name"),
    )
    # Topic mode: how long (wall seconds) an ADVANCE waits for the workers to see the new time
    # before it is answered anyway (with an error logged).
    agent_clock_wait_s: float = Field(
        default=30.0, gt=0, validation_alias=AliasChoices("agent_clock_wait_s", "gfs_agent_clock_wait_s")
    )
    # Workers' GFS_CHECKPOINT_DIR is <root>/<task_id>/<worker_index>. Agents sharing one root (on
    # one machine) let a task evicted on one node resume its checkpoint on another. Unset:
    # <state dir>/checkpoints. Env GFS_AGENT_CHECKPOINT_ROOT; relative paths as agent_state_root.
    agent_checkpoint_root: Path | None = Field(
        default=None, validation_alias=AliasChoices("agent_checkpoint_root", "gfs_agent_checkpoint_root")
    )

    # Where --metrics-port listens (/metrics, /healthz): GFS_HTTP_HOST (loopback) unless set;
    # 0.0.0.0 in a pod, where the kubelet's probes and Prometheus come from outside (infra/k8s).
    # Env AGENT_METRICS_HOST.
    agent_metrics_host: str | None = None

    @field_validator("agent_state_root", mode="after")
    @classmethod
    def _resolve_root(cls, value: Path) -> Path:
        path = value.expanduser()
        return path if path.is_absolute() else REPO_ROOT / path

    @field_validator("agent_checkpoint_root", mode="before")
    @classmethod
    def _blank_checkpoint_root_is_none(cls, value: object) -> object:
        # GFS_AGENT_CHECKPOINT_ROOT= (set but empty) means "the default", not the current directory.
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("agent_checkpoint_root", mode="after")
    @classmethod
    def _resolve_checkpoint_root(cls, value: Path | None) -> Path | None:
        if value is None:
            return None
        path = value.expanduser()
        return path if path.is_absolute() else REPO_ROOT / path

    @model_validator(mode="after")
    def _fence_thaws_after_it_freezes(self) -> NodeAgentSettings:
        if self.agent_fence_after_s > 0 and self.agent_fence_thaw_within_s <= self.agent_fence_after_s:
            raise ValueError(
                f"AGENT_FENCE_THAW_WITHIN_S ({self.agent_fence_thaw_within_s:g}) must exceed "
                f"AGENT_FENCE_AFTER_S ({self.agent_fence_after_s:g})"
            )
        return self

    def state_dir(self, node: str) -> Path:
        return self.agent_state_root / path_part(node)  # a node name is one path component

    def checkpoint_root(self, state_dir: Path) -> Path:
        """Where the workers' checkpoint folders go (see `agent_checkpoint_root`)."""
        return self.agent_checkpoint_root or state_dir / "checkpoints"

    def own_key_only(self, node: str) -> NodeAgentSettings:
        """A copy that holds this node's key and not the master secret (issue 22: an agent given
        GFS_COMMAND_SECRET derives its key once and keeps only that)."""
        key = self.command_key(node)
        previous = self.previous_key(node)
        return self.model_copy(
            update={
                "gfs_node_key": SecretStr(key.hex()),
                "gfs_command_secret": None,
                "gfs_node_key_previous": None if previous is None else SecretStr(previous.hex()),
                "gfs_command_secret_previous": None,
            }
        )

    def command_key(self, node: str) -> bytes:
        """This node's HMAC key; `MissingKeyError` with what to set when there is none."""
        key = _node_key_of(self.gfs_node_key, self.gfs_command_secret, node, "")
        if key is not None:
            return key
        raise MissingKeyError(
            "the node agent needs a key to verify commands: set GFS_NODE_KEY (hex of this node's key, "
            "`gfs`'s signing.node_key(master, node)) or GFS_COMMAND_SECRET (the scheduler's master secret)"
        )

    def previous_key(self, node: str) -> bytes | None:
        """The key being rotated (accepted, never signed with); None when no rotation is under way."""
        return _node_key_of(self.gfs_node_key_previous, self.gfs_command_secret_previous, node, "_PREVIOUS")


def _node_key_of(hex_key: SecretStr | None, master: SecretStr | None, node: str, suffix: str) -> bytes | None:
    """GFS_NODE_KEY{suffix} (hex) if set, else the node key of GFS_COMMAND_SECRET{suffix}, else None."""
    if hex_key is not None and hex_key.get_secret_value().strip():
        try:
            key = bytes.fromhex(hex_key.get_secret_value().strip())
        except ValueError:
            raise MissingKeyError(f"GFS_NODE_KEY{suffix} must be the node key in hex") from None
        if len(key) < MIN_KEY_BYTES:
            raise MissingKeyError(f"GFS_NODE_KEY{suffix} must be at least {MIN_KEY_BYTES} bytes")
        return key
    if master is not None and master.get_secret_value():
        secret = master.get_secret_value().encode("utf-8")
        if len(secret) < MIN_KEY_BYTES:
            raise MissingKeyError(f"GFS_COMMAND_SECRET{suffix} must be at least {MIN_KEY_BYTES} bytes")
        return node_key(secret, node)
    return None
