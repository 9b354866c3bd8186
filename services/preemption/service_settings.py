"""The preemption service's settings (environment variables, `PREEMPTION_*` and the platform's), and
the controller settings, liveness rules and signing secrets derived from them.

Re-exported by service.py, where the CLI and the tests import it from.
"""

from __future__ import annotations

from pydantic import SecretStr

from gfs.schemas.clock import CLOCK_KEY
from gfs.services.platform.clock import check_clock_mode
from gfs.services.platform.key_rotation import PreviousUntil
from gfs.services.platform.settings import PlatformSettings
from gfs.services.preemption import liveness
from gfs.services.preemption.controller.settings import ControllerSettings
from gfs.services.preemption.router.routing import INBOX_TOPIC


class PreemptionSettings(PlatformSettings):
    preemption_policy: str = "gfs"
    preemption_t_win_s: float = 31 * 86400.0
    preemption_cost_weight: float = 5.0
    preemption_grace_s: float = 30.0
    preemption_ack_margin_s: float = 10.0
    preemption_tick_s: float = 1.0
    preemption_status_s: float = 300.0
    preemption_node_timeout_s: float = 30.0
    # Node liveness (liveness.py): how far a node's clock may trail the service's when its
    # `sampled_at` is read, and the share of a pool's live nodes silent together (at least two)
    # above which none of them is declared lost (a pipeline or network fault, not node deaths).
    preemption_max_clock_skew_s: float = 10.0
    preemption_mass_silence_share: float = 0.55
    # Reconciliation (reconcile.py; docs/operations.md): a bind none of whose workers started this
    # long after it was issued is issued again; an attempt a node runs that the service does not
    # hold there is stopped once reported this long; a node's unchanged report is journaled this often.
    preemption_bind_start_timeout_s: float = 120.0
    preemption_unknown_work_after_s: float = 60.0
    preemption_report_every_s: float = 60.0
    preemption_group: str = "gfs-preemption"
    preemption_router_group: str = "gfs-preemption-router"
    preemption_inbox_partitions: int = 6
    preemption_inbox_topic: str = INBOX_TOPIC
    # Where a NEW router group starts: "earliest" (production: no input is missed at the first
    # deploy) or "latest" (demos sharing a broker with older runs of the same pools).
    preemption_router_offset_reset: str = "earliest"
    preemption_pools: str = ""  # comma-separated pools this deployment schedules ("" = all)
    preemption_api_host: str | None = None  # None: GFS_HTTP_HOST (loopback by default)
    preemption_api_port: int = 8082  # 0: no API
    preemption_dry_run: bool = False
    preemption_instance: str = ""  # default: host-pid
    preemption_session_timeout_ms: int = 6000
    # "wall": the host's clock, timers every preemption_tick_s. "topic": the controllable clock
    # (schemas/clock.py): time is the last tick on gfs.control.clock, timers and passes run only on
    # ticks, node heartbeats never time out (a replay may run faster or slower than real time).
    preemption_clock: str = "wall"
    preemption_clock_name: str = CLOCK_KEY  # the clock followed on gfs.control.clock (others ignored)
    gfs_command_secret: SecretStr | None = None
    # Acks and telemetry must be signed with their node's key (report_auth.py). Off only while
    # agents are upgraded (docs/operations.md, "Signed acks"): unsigned ones are then accepted and
    # counted; a wrong signature is refused either way.
    preemption_require_signed_acks: bool = True
    # The master secret being rotated out: acks and telemetry signed with its node keys are still
    # accepted (agents are restarted with their new keys one by one). Unset once the rotation ends.
    gfs_command_secret_previous: SecretStr | None = None
    gfs_command_secret_previous_until: PreviousUntil = None  # then the previous keys are refused
    preemption_admin_token: SecretStr | None = None  # bearer token of SRE control writes (none: refused)
    # Snapshots of a partition's pools (snapshots.py): written every this many journal rows or
    # seconds (with a row since), so a claim replays at most one interval. 0 and 0: never.
    preemption_snapshot_rows: int = 1_000
    preemption_snapshot_s: float = 300.0
    # An ended task's id rejects a second submission for this long after its submission
    # (seen_tasks.py, the redelivery window of the pools' memory; docs/operations.md).
    preemption_seen_window_s: float = 3600.0
    # The router's route of a task is deleted this long after the task ended (router/expiry.py): a
    # cancel later than that is dead-lettered. Longer than the seen window, so a redelivered
    # submission meets one memory or the other (docs/operations.md).
    preemption_route_keep_s: float = 86_400.0
    # The preemption service's own login role (docs/operations.md, "Postgres roles"); DATABASE_URL
    # when unset. Env PREEMPTION_DATABASE_URL.
    preemption_database_url: str | None = None

    @property
    def database_url(self) -> str:
        return self.database_url_for(self.preemption_database_url)

    def liveness_rules(self) -> liveness.LivenessRules:
        return liveness.LivenessRules(
            timeout_s=self.preemption_node_timeout_s, max_skew_s=self.preemption_max_clock_skew_s,
            mass_share=self.preemption_mass_silence_share,
        )  # fmt: skip

    def controller_settings(self) -> ControllerSettings:
        return ControllerSettings(
            policy=self.preemption_policy, t_win_s=self.preemption_t_win_s,
            cost_weight=self.preemption_cost_weight, grace_s=self.preemption_grace_s,
            ack_margin_s=self.preemption_ack_margin_s,
            bind_start_timeout_s=self.preemption_bind_start_timeout_s,
            unknown_after_s=self.preemption_unknown_work_after_s,
            seen_window_s=self.preemption_seen_window_s,
        )  # fmt: skip

    @property
    def topic_clock(self) -> bool:
        return check_clock_mode(self.preemption_clock) == "topic"

    def pool_allowlist(self) -> frozenset[str] | None:
        names = frozenset(p.strip() for p in self.preemption_pools.split(",") if p.strip())
        return names or None

    def master_secret(self) -> bytes:
        if self.gfs_command_secret is None:
            raise ValueError(
                "GFS_COMMAND_SECRET is not set: the preemption service signs every node command with "
                "keys derived from it (`infra/stack.sh env` exports a development one)"
            )
        return self.gfs_command_secret.get_secret_value().encode("utf-8")

    def previous_secret(self) -> bytes | None:
        if (
            self.gfs_command_secret_previous is None
            or not self.gfs_command_secret_previous.get_secret_value()
        ):
            return None
        return self.gfs_command_secret_previous.get_secret_value().encode("utf-8")
