"""Settings shared by every GFS service, read from the environment.

Each service subclasses `PlatformSettings` and adds its own fields; the composition root
(`main.py`) builds one instance and passes it down, so nothing below the root reads the
environment. Constructing the object is the only moment env is read (no module-level instance).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import AliasChoices, Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from gfs.services.platform import deployment as deployment_ids
from gfs.services.platform.kafka_security import KafkaSecurity

# The repository root: services/platform/settings.py -> parents[2]. Used to resolve relative
# paths the same way whatever the current working directory is.
REPO_ROOT = Path(__file__).resolve().parents[2]

DEFAULT_BOOTSTRAP_SERVERS = "127.0.0.1:9092"
# No default database URL: a default would have to carry a password (issue 25). The dev stack
# generates its passwords once per checkout and `infra/stack.sh env` exports DATABASE_URL.
DATABASE_URL_HOWTO = (
    'DATABASE_URL is not set: run `eval "$(infra/stack.sh env)"` for the local stack (`make up`), '
    'or set DATABASE_URL=postgresql://ROLE:PASSWORD@HOST:PORT/DB (docs/operations.md, "Postgres roles")'
)


class DatabaseUrlMissingError(ValueError):
    """No DATABASE_URL (nor the service's own *_DATABASE_URL) is set; the message says how to set it."""


class PlatformSettings(BaseSettings):
    """Connection and observability settings every service needs.

    Env names are the field names upper-cased (KAFKA_BOOTSTRAP_SERVERS, DATABASE_URL,
    OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_SERVICE_NAME, GFS_SHARED_DIR); they are the standard
    names the OpenTelemetry SDK and the stack scripts (`infra/stack.sh env`) use too.
    """

    model_config = SettingsConfigDict(env_prefix="", case_sensitive=False, extra="ignore", frozen=True)

    kafka_bootstrap_servers: str = DEFAULT_BOOTSTRAP_SERVERS
    # How clients authenticate (services/platform/kafka/security.py): PLAINTEXT for the dev stack;
    # SASL_SSL with a SCRAM user per service in a cluster (`infra/stack.sh secure env USER` prints
    # them for the secured test broker). Env KAFKA_SECURITY_PROTOCOL, KAFKA_SASL_MECHANISM,
    # KAFKA_SASL_USERNAME, KAFKA_SASL_PASSWORD, KAFKA_SSL_CAFILE.
    kafka_security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    kafka_sasl_mechanism: Literal["SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"] = "SCRAM-SHA-512"
    kafka_sasl_username: str | None = None
    kafka_sasl_password: SecretStr | None = None
    kafka_ssl_cafile: str | None = None
    # Env DATABASE_URL; read through `database_url` (below), which fails clearly when unset, so the
    # services that use no database (forecast, node agent) start without one.
    database_url_setting: str | None = Field(default=None, validation_alias=AliasChoices("database_url"))
    # None means "no exporter": spans are created but not shipped anywhere (no console spam).
    otel_exporter_otlp_endpoint: str | None = None
    otel_service_name: str = "gfs"
    # This deployment's id on the broker (services/platform/deployment.py): stamped on what it
    # publishes, and what other deployments published is ignored. "" (default): no id, as before.
    # Env GFS_DEPLOYMENT.
    gfs_deployment: str = ""
    # Read-only reference data (spec, traces). Relative values resolve against the repo root,
    # not the cwd, so `../shared` means the sibling of the checkout wherever a command runs.
    gfs_shared_dir: Path = Field(default=Path("../shared"))
    # Service logs: "text" (one readable line per event) or "json" (one JSON object per line with
    # trace_id/span_id, service and pool; services/platform/logs.py). Env GFS_LOG_FORMAT, GFS_LOG_LEVEL.
    gfs_log_format: Literal["text", "json"] = "text"
    gfs_log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    # Where every HTTP API listens (SRE API, probes, /metrics) unless the service's own setting
    # says otherwise (PREEMPTION_API_HOST, QUOTA_API_HOST, FORECAST_WEB_HOST, AGENT_METRICS_HOST).
    # Loopback by default, so nothing is exposed by accident (the control writes change what a
    # cluster evicts); 0.0.0.0 in a container or pod reached from outside (docker-compose.yml,
    # infra/k8s). Env GFS_HTTP_HOST.
    gfs_http_host: str = Field(default="127.0.0.1", min_length=1)
    # The live services' event loop and garbage collector (services/platform/event_loop.py):
    # GFS_EVENT_LOOP, GFS_GC_FREEZE, GFS_GC_THRESHOLD (0: CPython's), GFS_GC_FULL_EVERY_S (full
    # collections on a timer; 0: when CPython's rule calls for one).
    gfs_event_loop: Literal["uvloop", "asyncio"] = "asyncio"
    gfs_gc_freeze: bool = False
    gfs_gc_threshold: int = Field(default=0, ge=0)
    gfs_gc_full_every_s: float = Field(default=300.0, ge=0)
    # History the services delete (services/platform/retention.py; docs/operations.md, "Retention"):
    # decisions, quota versions, eta history and guarantee outcomes older than GFS_HISTORY_KEEP_S
    # (30 d), published outbox rows older than GFS_OUTBOX_KEEP_S (1 d), checked every
    # GFS_RETENTION_EVERY_S (10 min; 0 keeps everything).
    gfs_history_keep_s: float = Field(default=30 * 86_400.0, gt=0)
    gfs_outbox_keep_s: float = Field(default=86_400.0, gt=0)
    gfs_retention_every_s: float = Field(default=600.0, ge=0)

    @field_validator("gfs_log_level", "kafka_security_protocol", "kafka_sasl_mechanism", mode="before")
    @classmethod
    def _level_any_case(cls, value: object) -> object:
        return value.upper() if isinstance(value, str) else value

    @field_validator("gfs_deployment", mode="after")
    @classmethod
    def _deployment_id(cls, value: str) -> str:
        return deployment_ids.check(value.strip())

    @field_validator("otel_exporter_otlp_endpoint", mode="before")
    @classmethod
    def _blank_endpoint_is_none(cls, value: object) -> object:
        # `OTEL_EXPORTER_OTLP_ENDPOINT=` (set but empty) is a common way to switch export off.
        if isinstance(value, str) and not value.strip():
            return None
        return value

    @field_validator("gfs_shared_dir", mode="after")
    @classmethod
    def _resolve_shared_dir(cls, value: Path) -> Path:
        path = value.expanduser()
        if not path.is_absolute():
            path = REPO_ROOT / path
        return path.resolve()

    def bind_host(self, specific: str | None) -> str:
        """The address an HTTP API binds: the service's own setting when set, else GFS_HTTP_HOST."""
        return specific.strip() if specific and specific.strip() else self.gfs_http_host

    @property
    def database_url(self) -> str:
        """DATABASE_URL; raises DatabaseUrlMissingError (a ValueError) saying how to set it."""
        return self.database_url_for(None)

    def database_url_for(self, own: str | None) -> str:
        """A service's own URL (QUOTA_DATABASE_URL, PREEMPTION_DATABASE_URL: its login role) when
        set, else DATABASE_URL; raises DatabaseUrlMissingError when neither is."""
        for url in (own, self.database_url_setting):
            if url and url.strip():
                return url.strip()
        raise DatabaseUrlMissingError(DATABASE_URL_HOWTO)

    @property
    def kafka_security(self) -> KafkaSecurity:
        """The Kafka client security these settings describe; raises KafkaSecurityError (a
        ValueError) when SASL is asked for without a username and password."""
        return KafkaSecurity(
            protocol=self.kafka_security_protocol,
            sasl_mechanism=self.kafka_sasl_mechanism,
            username=self.kafka_sasl_username or None,
            password=self.kafka_sasl_password,
            cafile=self.kafka_ssl_cafile or None,
        )

    @property
    def bootstrap_servers(self) -> list[str]:
        """KAFKA_BOOTSTRAP_SERVERS split on commas, blanks dropped (aiokafka takes a list)."""
        return [part.strip() for part in self.kafka_bootstrap_servers.split(",") if part.strip()]
