"""docker-compose.yml, infra/kafka/topics.yaml and the Dockerfiles agree with the code.

Docker cannot run in CI here, so these static checks are what keeps the compose stack from
drifting: topics and partitions against `gfs.schemas.topics.TOPICS`, env var names against the
platform settings, and the images against the project layout.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from gfs.schemas.topics import TOPICS, TopicSpec
from gfs.services.platform.schema_cli import render_topics_yaml

REPO = Path(__file__).resolve().parents[2]
COMPOSE_PATH = REPO / "docker-compose.yml"
TOPICS_YAML_PATH = REPO / "infra" / "kafka" / "topics.yaml"
DOCKER_DIR = REPO / "infra" / "docker"
SETTINGS_PATH = REPO / "services" / "platform" / "settings.py"

GFS_SERVICES = ("forecast", "quota", "preemption", "node-agent")
# The env names the platform settings read (brief); checked against the settings module below.
SETTINGS_ENV_NAMES = frozenset(
    {
        "KAFKA_BOOTSTRAP_SERVERS",
        "DATABASE_URL",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_SERVICE_NAME",
        "GFS_SHARED_DIR",
        "GFS_HTTP_HOST",
    }
)


def _load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data: dict[str, Any] = _load_yaml(COMPOSE_PATH)
    return data


def _settings_env_names() -> frozenset[str]:
    """Env names read by services/platform/settings.py: prefix + field name (or alias), upper-cased."""
    from pydantic import AliasChoices
    from pydantic_settings import BaseSettings

    from gfs.services.platform import settings as module

    names: set[str] = set()
    for value in vars(module).values():
        if isinstance(value, type) and issubclass(value, BaseSettings) and value is not BaseSettings:
            prefix = str(value.model_config.get("env_prefix", ""))
            for name, field in value.model_fields.items():
                alias = field.validation_alias if isinstance(field.validation_alias, str) else field.alias
                if isinstance(field.validation_alias, AliasChoices):
                    alias = str(field.validation_alias.choices[0])
                names.add((alias or prefix + name).upper())
    return frozenset(names)


def _topic_init_lines(compose: dict[str, Any]) -> list[list[str]]:
    script = compose["services"]["topic-init"]["command"][0]
    return [shlex.split(line) for line in script.splitlines() if re.match(r"\s*create --topic", line)]


def _flag_values(argv: list[str], flag: str) -> list[str]:
    return [argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg == flag]


# --- topics.yaml -----------------------------------------------------------------------------


def test_topics_yaml_is_the_generated_file() -> None:
    assert TOPICS_YAML_PATH.read_text() == render_topics_yaml(), "run `gfs schemas topics-yaml`"


@pytest.mark.parametrize("spec", TOPICS, ids=lambda spec: spec.name)
def test_topics_yaml_entry_matches_the_registry(spec: TopicSpec) -> None:
    entries = {entry["name"]: entry for entry in _load_yaml(TOPICS_YAML_PATH)["topics"]}
    entry = entries[spec.name]
    assert (entry["partitions"], entry["retention_ms"], entry["compacted"], entry["key"]) == (
        spec.partitions,
        spec.retention_ms,
        spec.compacted,
        spec.key_field,
    )
    assert entry["payloads"] == list(spec.event_types())


def test_topics_yaml_lists_no_other_topics() -> None:
    names = [entry["name"] for entry in _load_yaml(TOPICS_YAML_PATH)["topics"]]
    assert names == [spec.name for spec in TOPICS]


# --- docker-compose.yml: topics ----------------------------------------------------------------


def test_compose_creates_exactly_the_registry_topics(compose: dict[str, Any]) -> None:
    created = [_flag_values(argv, "--topic")[0] for argv in _topic_init_lines(compose)]
    assert created == [spec.name for spec in TOPICS]


@pytest.mark.parametrize("spec", TOPICS, ids=lambda spec: spec.name)
def test_compose_topic_partitions_and_configs(compose: dict[str, Any], spec: TopicSpec) -> None:
    lines = {_flag_values(argv, "--topic")[0]: argv for argv in _topic_init_lines(compose)}
    argv = lines[spec.name]
    assert _flag_values(argv, "--partitions") == [str(spec.partitions)]
    configs = dict(item.split("=", 1) for item in _flag_values(argv, "--config"))
    assert configs == spec.kafka_config()


def test_compose_disables_topic_auto_creation(compose: dict[str, Any]) -> None:
    assert compose["services"]["kafka"]["environment"]["KAFKA_AUTO_CREATE_TOPICS_ENABLE"] == "false"
    assert compose["services"]["kafka"]["image"].startswith("apache/kafka:3.9")


# --- docker-compose.yml: services and env --------------------------------------------------------


def test_settings_still_read_the_documented_env_names() -> None:
    # The settings module is owned by the platform area; if it stops reading one of these names,
    # the compose env (and infra/stack.sh) would silently configure nothing.
    assert SETTINGS_PATH.exists()
    assert _settings_env_names() >= SETTINGS_ENV_NAMES


# Each service's Postgres URL: its own login role (issue 25), none for those that use no database.
SERVICE_DB_ENV = {
    "quota": {"QUOTA_DATABASE_URL": "gfs_quota", "password": "GFS_POSTGRES_QUOTA_PASSWORD"},
    "preemption": {
        "PREEMPTION_DATABASE_URL": "gfs_preemption",
        "password": "GFS_POSTGRES_PREEMPTION_PASSWORD",
    },
}


@pytest.mark.parametrize("service", GFS_SERVICES)
def test_service_env_uses_exactly_the_settings_names(compose: dict[str, Any], service: str) -> None:
    env = compose["services"][service]["environment"]
    # The services that sign or verify node commands also take the master secret.
    signing = {"GFS_COMMAND_SECRET"} if service in ("preemption", "node-agent") else set()
    own = SERVICE_DB_ENV.get(service, {})
    database = {name for name in own if name != "password"}
    assert set(env) == (SETTINGS_ENV_NAMES - {"DATABASE_URL"}) | signing | database
    assert env["OTEL_SERVICE_NAME"] == f"gfs-{service}"
    assert env["KAFKA_BOOTSTRAP_SERVERS"] == "kafka:9092"
    for name in database:
        # The role's password is interpolated from the environment / .env, never written here.
        role, password = own[name], own["password"]
        assert env[name].startswith(f"postgresql://{role}:${{{password}:?"), env[name]
        assert env[name].endswith("}@postgres:5432/gfs")
    # Loopback (the default) inside a container is unreachable from the others and from its ports.
    assert env["GFS_HTTP_HOST"] == "0.0.0.0"


@pytest.mark.parametrize("service", GFS_SERVICES)
def test_service_waits_for_topics_and_migrations(compose: dict[str, Any], service: str) -> None:
    depends = compose["services"][service]["depends_on"]
    assert depends["topic-init"]["condition"] == "service_completed_successfully"
    assert depends["migrate"]["condition"] == "service_completed_successfully"


@pytest.mark.parametrize("service", GFS_SERVICES)
def test_service_builds_its_own_dockerfile(compose: dict[str, Any], service: str) -> None:
    build = compose["services"][service]["build"]
    assert (build["context"], build["dockerfile"]) == (".", f"infra/docker/{service}.Dockerfile")
    assert compose["services"][service]["command"][:2] == ["serve", service]


def test_otel_endpoint_points_at_the_collector_grpc_receiver(compose: dict[str, Any]) -> None:
    collector = _load_yaml(REPO / "infra" / "otel" / "collector.yaml")
    grpc = collector["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"]
    port = grpc.rsplit(":", 1)[1]
    for service in GFS_SERVICES:
        assert compose["services"][service]["environment"]["OTEL_EXPORTER_OTLP_ENDPOINT"] == (
            f"http://otel-collector:{port}"
        )
    assert "otlp/jaeger" in collector["service"]["pipelines"]["traces"]["exporters"]
    assert collector["exporters"]["otlp/jaeger"]["endpoint"].startswith("jaeger:")


def test_bind_mounted_repo_files_exist(compose: dict[str, Any]) -> None:
    for name, service in compose["services"].items():
        for volume in service.get("volumes", []):
            source = volume.split(":", 1)[0]
            if source.startswith("./") and not source.startswith("./ml/artifacts"):
                assert (REPO / source).exists(), f"{name} mounts missing {source}"


# --- Dockerfiles ------------------------------------------------------------------------------


def test_one_dockerfile_per_service() -> None:
    assert sorted(p.name for p in DOCKER_DIR.glob("*.Dockerfile")) == sorted(
        f"{service}.Dockerfile" for service in GFS_SERVICES
    )


@pytest.mark.parametrize("service", GFS_SERVICES)
def test_dockerfile_runs_gfs_and_copies_existing_paths(service: str) -> None:
    text = (DOCKER_DIR / f"{service}.Dockerfile").read_text()
    assert 'ENTRYPOINT ["gfs"]' in text
    assert f'CMD ["serve", "{service}"]' in text
    for match in re.finditer(r"^COPY (\S+) (?:\S+ )*\S+$", text, flags=re.MULTILINE):
        for source in match.group(0).split()[1:-1]:
            assert (REPO / source).exists(), f"{service}.Dockerfile copies missing {source}"


@pytest.mark.parametrize("service", GFS_SERVICES)
def test_only_the_forecast_image_installs_torch(service: str) -> None:
    text = (DOCKER_DIR / f"{service}.Dockerfile").read_text()
    installs_ml = re.search(r"pip install[^\n]*\.\[ml\]", text) is not None
    assert installs_ml == (service == "forecast")


def _gfs_commands(compose: dict[str, Any]) -> list[tuple[str, list[str]]]:
    """(compose service, the `gfs` arguments its container runs) for every service built from a
    GFS image: its `command`, else its Dockerfile's CMD."""
    found = []
    for name, service in compose["services"].items():
        image = str(service.get("image", ""))
        if not image.startswith("gfs-"):
            continue
        command = service.get("command")
        if command is None:
            cmd = re.search(r"^CMD (\[.*\])$", (DOCKER_DIR / f"{image[4:]}.Dockerfile").read_text(), re.M)
            assert cmd is not None, name
            command = yaml.safe_load(cmd.group(1))
        found.append((name, [str(a) for a in command]))
    return found


def test_every_container_command_is_one_the_gfs_cli_accepts(compose: dict[str, Any]) -> None:
    """Docker cannot run here (issue 38 item 7): the nearest check of an image's entry point is the
    real `gfs` command line parsing each container's arguments, options included (`--help` stops
    it before it runs; an unknown command or option fails the parse first)."""
    from typer.testing import CliRunner

    from gfs.services.cli import build_app

    app = build_app()
    commands = _gfs_commands(compose)
    assert {name for name, _ in commands} >= {"preemption", "quota", "forecast", "node-agent"}
    runner = CliRunner()
    for name, args in commands:
        result = runner.invoke(app, [*args, "--help"])
        assert result.exit_code == 0, (name, args, result.output[-800:])
        assert "Usage:" in result.output, (name, args)
    wrong = runner.invoke(app, ["serve", "preemption", "--no-such-option", "--help"])
    assert wrong.exit_code != 0  # the check can fail: an option the CLI lacks is refused
