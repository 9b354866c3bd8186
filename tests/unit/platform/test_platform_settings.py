"""PlatformSettings: env names, defaults, path resolution."""

from __future__ import annotations

from pathlib import Path

import pytest

from gfs.services.platform.settings import REPO_ROOT, DatabaseUrlMissingError, PlatformSettings

_ENV_NAMES = (
    "KAFKA_BOOTSTRAP_SERVERS",
    "DATABASE_URL",
    "QUOTA_DATABASE_URL",
    "PREEMPTION_DATABASE_URL",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_SERVICE_NAME",
    "GFS_SHARED_DIR",
)


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in _ENV_NAMES:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_defaults_match_the_dev_stack(clean_env: pytest.MonkeyPatch) -> None:
    settings = PlatformSettings()
    assert settings.kafka_bootstrap_servers == "127.0.0.1:9092"
    assert settings.otel_exporter_otlp_endpoint is None
    assert settings.otel_service_name == "gfs"
    # ../shared is the checkout's sibling, whatever the cwd.
    assert settings.gfs_shared_dir == (REPO_ROOT.parent / "shared").resolve()


def test_no_default_database_url_and_the_error_says_how_to_set_one(clean_env: pytest.MonkeyPatch) -> None:
    # A default URL would carry a password (issue 25); the services that use no database still start.
    from gfs.services.preemption.service import PreemptionSettings
    from gfs.services.quota.service import QuotaServiceSettings

    for cls in (PlatformSettings, QuotaServiceSettings, PreemptionSettings):
        settings = cls()
        with pytest.raises(
            DatabaseUrlMissingError, match=r"DATABASE_URL is not set: run `eval .*infra/stack.sh env"
        ):
            _ = settings.database_url
    clean_env.setenv("DATABASE_URL", "  ")  # blank is unset
    with pytest.raises(DatabaseUrlMissingError):
        _ = PlatformSettings().database_url


def test_each_service_reads_its_own_database_url_then_database_url(clean_env: pytest.MonkeyPatch) -> None:
    from gfs.services.preemption.service import PreemptionSettings
    from gfs.services.quota.service import QuotaServiceSettings

    clean_env.setenv("QUOTA_DATABASE_URL", "postgresql://gfs_quota:q@db/gfs")
    clean_env.setenv("PREEMPTION_DATABASE_URL", "postgresql://gfs_preemption:p@db/gfs")
    assert QuotaServiceSettings().database_url == "postgresql://gfs_quota:q@db/gfs"
    assert PreemptionSettings().database_url == "postgresql://gfs_preemption:p@db/gfs"
    clean_env.setenv("DATABASE_URL", "postgresql://gfs:o@db/gfs")
    assert PlatformSettings().database_url == "postgresql://gfs:o@db/gfs"  # the owner role's
    assert QuotaServiceSettings().database_url == "postgresql://gfs_quota:q@db/gfs"  # its own wins
    clean_env.delenv("QUOTA_DATABASE_URL")
    clean_env.delenv("PREEMPTION_DATABASE_URL")
    # Unset: DATABASE_URL, so one URL (the tests', a single-role deployment's) still serves both.
    assert QuotaServiceSettings().database_url == "postgresql://gfs:o@db/gfs"
    assert PreemptionSettings().database_url == "postgresql://gfs:o@db/gfs"
    # A URL given to the constructor (tools and tests build settings so) is DATABASE_URL's.
    assert PreemptionSettings(database_url="postgresql://x@y/z").database_url == "postgresql://x@y/z"


def test_env_names_override_every_field(clean_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    clean_env.setenv("KAFKA_BOOTSTRAP_SERVERS", "k1:9092, k2:9093,")
    clean_env.setenv("DATABASE_URL", "postgresql://u:p@db:5432/x")
    clean_env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4317")
    clean_env.setenv("OTEL_SERVICE_NAME", "gfs-quota")
    clean_env.setenv("GFS_SHARED_DIR", str(tmp_path))
    settings = PlatformSettings()
    assert settings.bootstrap_servers == ["k1:9092", "k2:9093"]
    assert settings.database_url == "postgresql://u:p@db:5432/x"
    assert settings.otel_exporter_otlp_endpoint == "http://collector:4317"
    assert settings.otel_service_name == "gfs-quota"
    assert settings.gfs_shared_dir == tmp_path.resolve()


@pytest.mark.parametrize("blank", ["", "   "], ids=["empty", "spaces"])
def test_blank_otlp_endpoint_means_no_exporter(clean_env: pytest.MonkeyPatch, blank: str) -> None:
    clean_env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", blank)
    assert PlatformSettings().otel_exporter_otlp_endpoint is None


def test_relative_shared_dir_resolves_against_repo_root_not_cwd(
    clean_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    clean_env.chdir(tmp_path)
    clean_env.setenv("GFS_SHARED_DIR", "data/here")
    assert PlatformSettings().gfs_shared_dir == (REPO_ROOT / "data" / "here").resolve()


def test_a_service_subclass_adds_fields_and_keeps_the_base_ones(clean_env: pytest.MonkeyPatch) -> None:
    class QuotaSettings(PlatformSettings):
        quota_interval_s: float = 300.0

    clean_env.setenv("QUOTA_INTERVAL_S", "60")
    clean_env.setenv("OTEL_SERVICE_NAME", "gfs-quota")
    settings = QuotaSettings()
    assert (settings.quota_interval_s, settings.otel_service_name) == (60.0, "gfs-quota")


def test_http_apis_bind_loopback_unless_gfs_http_host_or_their_own_setting_says(
    clean_env: pytest.MonkeyPatch,
) -> None:
    from gfs.services.forecast.app import ForecastServiceSettings
    from gfs.services.node_agent.settings import NodeAgentSettings
    from gfs.services.preemption.service import PreemptionSettings
    from gfs.services.quota.service import QuotaServiceSettings

    for name in (
        "GFS_HTTP_HOST",
        "PREEMPTION_API_HOST",
        "QUOTA_API_HOST",
        "FORECAST_WEB_HOST",
        "AGENT_METRICS_HOST",
    ):
        clean_env.delenv(name, raising=False)
    own = {
        PreemptionSettings: ("PREEMPTION_API_HOST", "preemption_api_host"),
        QuotaServiceSettings: ("QUOTA_API_HOST", "quota_api_host"),
        ForecastServiceSettings: ("FORECAST_WEB_HOST", "forecast_web_host"),
        NodeAgentSettings: ("AGENT_METRICS_HOST", "agent_metrics_host"),
    }
    for cls, (env, field) in own.items():
        assert cls().bind_host(getattr(cls(), field)) == "127.0.0.1", cls  # safe by default
        clean_env.setenv("GFS_HTTP_HOST", "0.0.0.0")
        assert cls().bind_host(getattr(cls(), field)) == "0.0.0.0", cls  # one setting for all
        clean_env.setenv(env, "10.1.2.3")
        assert cls().bind_host(getattr(cls(), field)) == "10.1.2.3", cls  # the service's own wins
        clean_env.setenv(env, " ")
        assert cls().bind_host(getattr(cls(), field)) == "0.0.0.0", cls  # blank: unset
        clean_env.delenv(env)
        clean_env.delenv("GFS_HTTP_HOST")
