"""The quota service's settings (env, like every service's: services/platform/settings.py)."""

from __future__ import annotations

from typing import Literal

from pydantic import AliasChoices, Field

from gfs.services.platform.settings import PlatformSettings

FENCE_KEY = 0x6766_735F_7175_6F74  # "gfs_quot": one active quota instance per database


class QuotaServiceSettings(PlatformSettings):
    quota_refresh_s: float = 300.0
    quota_group: str = "gfs-quota"
    quota_api_host: str | None = None  # None: GFS_HTTP_HOST (loopback by default)
    quota_api_port: int = 8081  # 0: no API
    quota_fence_poll_s: float = 1.0
    # The fence is a lease (services/platform/fence.py): a dead or hung holder loses it within
    # about this long (TCP keepalives and idle_session_timeout on its session), not ~2 h.
    quota_fence_lease_s: float = 30.0
    quota_fence_key: int = FENCE_KEY  # instances sharing a key (and a database) fence each other
    # "wall": refresh every quota_refresh_s on the host's clock. "topic": each PoolStatus is its
    # pool's refresh, at its observed_at (module doc). Env GFS_QUOTA_CLOCK.
    quota_clock: Literal["wall", "topic"] = Field(
        default="wall", validation_alias=AliasChoices("quota_clock", "gfs_quota_clock")
    )

    # Comma-separated pools this deployment quotes ("" = every pool it reads; env QUOTA_POOLS).
    # The input topics are shared: without it a private deployment (a test run, `gfs parity`)
    # quotes every other run's pools too and publishes those quotes on the shared gfs.quotas,
    # where the other runs' schedulers and tests read them as their own (docs/protocol.md, 8).
    quota_pools: str = ""

    # The quota service's own login role (docs/operations.md, "Postgres roles"); DATABASE_URL
    # when unset. Env QUOTA_DATABASE_URL.
    quota_database_url: str | None = None

    @property
    def database_url(self) -> str:
        return self.database_url_for(self.quota_database_url)

    @property
    def topic_clock(self) -> bool:
        return self.quota_clock == "topic"

    def pool_allowlist(self) -> frozenset[str] | None:
        """The pools `quota_pools` names; None: every pool."""
        names = frozenset(p.strip() for p in self.quota_pools.split(",") if p.strip())
        return names or None

    def owns(self, pool: str) -> bool:
        """Whether this deployment quotes `pool` (`quota_pools` names it, or names none)."""
        allowed = self.pool_allowlist()
        return allowed is None or pool in allowed

    def check_history_window(self, feedback_window_s: float) -> None:
        """The feedback reads its window's outcomes at start: history must outlive it (retention)."""
        if self.gfs_history_keep_s < feedback_window_s:
            raise ValueError(
                f"GFS_HISTORY_KEEP_S={self.gfs_history_keep_s:g} is shorter than the quota's "
                f"feedback window ({feedback_window_s:g} s)"
            )
