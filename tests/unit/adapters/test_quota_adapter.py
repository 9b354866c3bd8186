"""The quota adapter's pure mapping: hand-worked tables, and validation against the vendored CRDs."""

from __future__ import annotations

import asyncio
import copy
import io
import json
import logging
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gfs.schemas.quota import GuaranteeQuota, SpotQuota
from gfs.services.adapters.adapter import QuotaAdapter
from gfs.services.adapters.crd_schema import ManifestInvalidError, crd_for
from gfs.services.adapters.mapping import AdapterConfig, ConfigError, load_config, spot_gpus
from gfs.services.adapters.service import KubectlMissingError, flush, kubectl_sink, print_sink

REPO = Path(__file__).resolve().parents[3]
T0 = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)


def a_quota(
    pool: str = "A100", *, h1: float = 12.7, h2: float = 8.2, valid_for: timedelta = timedelta(minutes=10)
) -> SpotQuota:
    return SpotQuota(
        pool=pool,
        quotas=(
            GuaranteeQuota(guarantee_hours=1, quota_gpus=h1),
            GuaranteeQuota(guarantee_hours=2, quota_gpus=h2),
        ),
        eta=0.9,
        capacity_gpus=64,
        valid_from=T0,
        valid_until=T0 + valid_for,
        forecast_version="m1@origin",
    )


KUEUE = AdapterConfig.model_validate(
    {
        "kueue": {
            "cluster_queues": [
                {
                    "name": "spot",
                    "flavors": [{"flavor": "a100", "pool": "A100"}, {"flavor": "h100", "pool": "H100"}],
                }
            ]
        }
    }
)
KAI = AdapterConfig.model_validate(
    {"kai": {"queues": [{"name": "spot-a100", "pool": "A100", "over_quota_weight": 2}]}}
)


# quota_gpus for the configured duration -> whole GPUs spot may borrow (floor, never round)
@pytest.mark.parametrize(("h1", "expected"), [(12.7, 12), (12.0, 12), (0.99, 0), (0.0, 0), (3.5, 3)])
def test_quota_is_floored_to_whole_gpus(h1: float, expected: int) -> None:
    assert spot_gpus(a_quota(h1=h1), 1, T0 + timedelta(minutes=1)).gpus == expected


def test_the_configured_duration_is_the_one_used() -> None:
    assert spot_gpus(a_quota(h1=12.7, h2=8.2), 2, T0).gpus == 8


def test_expired_missing_or_unoffered_quota_is_zero() -> None:
    q = a_quota(valid_for=timedelta(minutes=10))
    assert spot_gpus(q, 1, T0 + timedelta(minutes=9, seconds=59)).gpus == 12
    assert spot_gpus(q, 1, T0 + timedelta(minutes=10)).gpus == 0  # valid_until passed: safe side
    assert spot_gpus(None, 1, T0).gpus == 0  # nothing received yet
    assert spot_gpus(q, 4, T0).gpus == 0  # this quota offers no 4 h duration


def test_kueue_manifest_sets_nominal_zero_and_borrowing_limit_per_flavor() -> None:
    adapter = QuotaAdapter(KUEUE, "kueue")
    adapter.observe(a_quota("A100", h1=12.7))
    adapter.observe(a_quota("H100", h1=3.2))
    [manifest] = adapter.manifests(T0 + timedelta(minutes=1))
    assert manifest == {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "ClusterQueue",
        "metadata": {"name": "spot"},
        "spec": {
            "resourceGroups": [
                {
                    "coveredResources": ["nvidia.com/gpu"],
                    "flavors": [
                        {
                            "name": "a100",
                            "resources": [
                                {"name": "nvidia.com/gpu", "nominalQuota": 0, "borrowingLimit": 12}
                            ],
                        },
                        {
                            "name": "h100",
                            "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 0, "borrowingLimit": 3}],
                        },
                    ],
                }
            ]
        },
    }
    # 11 minutes in, both quotas have expired: no spot borrowing at all.
    [expired] = adapter.manifests(T0 + timedelta(minutes=11))
    limits = [f["resources"][0]["borrowingLimit"] for f in expired["spec"]["resourceGroups"][0]["flavors"]]
    assert limits == [0, 0]


def test_kai_manifest_bounds_the_gpu_limit_with_zero_quota() -> None:
    adapter = QuotaAdapter(KAI, "kai")
    adapter.observe(a_quota("A100", h1=12.7))
    assert adapter.manifests(T0) == [
        {
            "apiVersion": "scheduling.run.ai/v2",
            "kind": "Queue",
            "metadata": {"name": "spot-a100"},
            "spec": {"resources": {"gpu": {"quota": 0, "overQuotaWeight": 2.0, "limit": 12}}},
        }
    ]


def test_unknown_pool_is_ignored_with_one_warning(caplog: pytest.LogCaptureFixture) -> None:
    adapter = QuotaAdapter(KAI, "kai")
    with caplog.at_level(logging.WARNING):
        assert adapter.observe(a_quota("V100")) is False
        assert adapter.observe(a_quota("V100")) is False
    assert [r.getMessage() for r in caplog.records] == [
        "quota for pool V100 ignored: no kai mapping names it"
    ]
    assert adapter.manifests(T0)[0]["spec"]["resources"]["gpu"]["limit"] == 0


def test_an_older_quota_does_not_replace_a_newer_one() -> None:
    adapter = QuotaAdapter(KAI, "kai")
    adapter.observe(a_quota("A100", h1=12.7))
    older = a_quota("A100", h1=30.0).model_copy(update={"valid_from": T0 - timedelta(minutes=5)})
    assert adapter.observe(older) is False
    assert adapter.manifests(T0)[0]["spec"]["resources"]["gpu"]["limit"] == 12


def test_only_changed_manifests_are_emitted_and_a_failed_apply_is_retried() -> None:
    adapter = QuotaAdapter(KAI, "kai")
    out = io.StringIO()
    assert asyncio.run(flush(adapter, print_sink("json", out), T0)) == 1  # first: limit 0
    assert asyncio.run(flush(adapter, print_sink("json", out), T0)) == 0  # unchanged: nothing
    adapter.observe(a_quota("A100", h1=5.5))
    assert asyncio.run(flush(adapter, print_sink("json", out), T0)) == 1
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [m["spec"]["resources"]["gpu"]["limit"] for m in lines] == [0, 5]

    from gfs.services.adapters.service import ApplyFailedError

    async def failing(manifest: dict[str, object]) -> None:
        raise ApplyFailedError("boom")

    adapter.observe(a_quota("A100", h1=7.0).model_copy(update={"valid_from": T0 + timedelta(seconds=1)}))
    assert asyncio.run(flush(adapter, failing, T0 + timedelta(seconds=2))) == 0
    assert len(adapter.changed(T0 + timedelta(seconds=2))) == 1  # still pending: retried later


def test_apply_mode_without_kubectl_names_kubectl(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(KubectlMissingError, match=r"kubectl was not found on PATH.*--dry-run"):
        kubectl_sink()


# --- validation against the vendored CRD schemas ---------------------------------------------


@pytest.mark.parametrize(
    "config_file", ["configs/quota-adapter-kueue.yaml", "configs/quota-adapter-kai.yaml"]
)
def test_committed_example_configs_produce_valid_manifests(config_file: str) -> None:
    config = load_config(REPO / config_file)
    target = "kueue" if config.kueue is not None else "kai"
    adapter = QuotaAdapter(config, target)
    adapter.observe(a_quota("A100"))
    manifests = adapter.manifests(T0)  # validates each one; raises if the CRD rejects it
    assert manifests and all(m["metadata"]["name"] for m in manifests)


def test_both_served_kueue_versions_accept_the_manifest() -> None:
    assert KUEUE.kueue is not None
    v2 = KUEUE.model_copy(
        update={"kueue": KUEUE.kueue.model_copy(update={"api_version": "kueue.x-k8s.io/v1beta2"})}
    )
    [manifest] = QuotaAdapter(v2, "kueue").manifests(T0)
    assert manifest["apiVersion"] == "kueue.x-k8s.io/v1beta2"
    assert crd_for("kueue", "kueue.x-k8s.io/v1beta2").errors(manifest) == []


def _valid_cluster_queue() -> dict[str, object]:
    adapter = QuotaAdapter(KUEUE, "kueue")
    adapter.observe(a_quota("A100"))
    return adapter.manifests(T0)[0]


def _gpu_entry(m: dict) -> dict:
    return m["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda m: _gpu_entry(m).update(borrowingLimit="12 GPUs"), "does not match"),
        (lambda m: _gpu_entry(m).update(borrowingLimit=1.5), "is not valid under any of the given schemas"),
        (lambda m: _gpu_entry(m).pop("nominalQuota"), "'nominalQuota' is a required property"),
        (lambda m: _gpu_entry(m).update(borowingLimit=3), "'borowingLimit' was unexpected"),
        (lambda m: m["spec"]["resourceGroups"][0]["flavors"][0].update(name="A100_SXM"), "does not match"),
        (
            lambda m: m["spec"]["resourceGroups"][0].update(coveredResources=["nvidia.com/gpu", "cpu"]),
            "same number of resources",
        ),
        (
            lambda m: m.update(apiVersion="kueue.x-k8s.io/v1alpha1"),
            "is not kueue.x-k8s.io/v1beta1/ClusterQueue",
        ),
    ],
)
def test_invalid_cluster_queue_manifests_are_rejected(mutate: object, message: str) -> None:
    schema = crd_for("kueue", "kueue.x-k8s.io/v1beta1")
    manifest = copy.deepcopy(_valid_cluster_queue())
    assert schema.errors(manifest) == []
    mutate(manifest)  # type: ignore[operator]
    with pytest.raises(ManifestInvalidError, match=message):
        schema.validate(manifest)


def test_invalid_kai_queue_manifest_is_rejected() -> None:
    schema = crd_for("kai", "scheduling.run.ai/v2")
    manifest = QuotaAdapter(KAI, "kai").manifests(T0)[0]
    manifest["spec"]["resources"]["gpu"]["limit"] = "12"  # the Queue CRD wants a number here
    with pytest.raises(ManifestInvalidError, match="'12' is not of type 'number'"):
        schema.validate(manifest)
    manifest["spec"]["resources"]["gpu"] = {"limit": 12, "max": 3}
    with pytest.raises(ManifestInvalidError, match="'max' was unexpected"):
        schema.validate(manifest)


def test_an_invalid_extra_group_fails_before_anything_is_emitted() -> None:
    bad = {
        "kueue": {
            "cluster_queues": [
                {
                    "name": "spot",
                    "flavors": [{"flavor": "a100", "pool": "A100"}],
                    "extra_resource_groups": [
                        {
                            "coveredResources": ["cpu"],
                            "flavors": [{"name": "x", "resources": [{"name": "cpu"}]}],
                        }
                    ],
                }
            ]
        }
    }
    with pytest.raises(ManifestInvalidError, match="'nominalQuota' is a required property"):
        QuotaAdapter(AdapterConfig.model_validate(bad), "kueue").manifests(T0)


def test_unserved_version_and_bad_configs_are_refused(tmp_path: Path) -> None:
    from gfs.services.adapters.crd_schema import CRD_FILES, load_crd

    with pytest.raises(ValueError, match="does not serve v1alpha1"):
        load_crd(CRD_FILES["kueue"], "v1alpha1")
    with pytest.raises(ValueError, match="names no target"):
        AdapterConfig.model_validate({})
    with pytest.raises(ValueError, match="guarantee_hours must be one GFS offers"):
        AdapterConfig.model_validate({"guarantee_hours": 3, "kai": {"queues": [{"name": "q", "pool": "P"}]}})
    with pytest.raises(ValueError, match="no `kueue:` section"):
        QuotaAdapter(KAI, "kueue")
    path = tmp_path / "c.yaml"
    path.write_text("kai: {queues: [{name: Spot_Queue, pool: P}]}\n")
    with pytest.raises(ConfigError, match="invalid"):
        load_config(path)


def test_an_undecodable_record_is_logged_and_skipped(caplog: pytest.LogCaptureFixture) -> None:
    from types import SimpleNamespace

    from gfs.schemas.envelope import wrap
    from gfs.schemas.topics import encode
    from gfs.services.adapters.service import _observe

    adapter = QuotaAdapter(KAI, "kai")
    bad = SimpleNamespace(topic="gfs.quotas", partition=1, offset=41, value=b"{not json")
    good = SimpleNamespace(
        topic="gfs.quotas", partition=1, offset=42, value=encode(wrap(a_quota("A100", h1=4.4), producer="t"))
    )
    with caplog.at_level(logging.WARNING):
        _observe(adapter, bad)
        _observe(adapter, good)
    assert any("undecodable record on gfs.quotas[1]@41 skipped" in r.getMessage() for r in caplog.records)
    assert adapter.manifests(T0)[0]["spec"]["resources"]["gpu"]["limit"] == 4


def test_apply_mode_pipes_each_manifest_to_kubectl_server_side(tmp_path: Path) -> None:
    from gfs.services.adapters.service import ApplyFailedError

    # A stand-in kubectl that records its arguments and stdin (no cluster here).
    record = tmp_path / "calls.jsonl"
    fake = tmp_path / "kubectl"
    fake.write_text(
        "#!/usr/bin/env python3\nimport json, sys\n"
        f"open({str(record)!r}, 'a').write(json.dumps([sys.argv[1:], sys.stdin.read()]) + '\\n')\n"
        "sys.exit(1 if 'fail' in sys.argv[0] else 0)\n"
    )
    fake.chmod(0o755)
    adapter = QuotaAdapter(KAI, "kai")
    adapter.observe(a_quota("A100", h1=9.9))
    assert asyncio.run(flush(adapter, kubectl_sink(str(fake)), T0)) == 1
    [(args, stdin)] = [json.loads(line) for line in record.read_text().splitlines()]
    assert args == [
        "apply",
        "--server-side",
        "--field-manager=gfs-quota-adapter",
        "--force-conflicts",
        "-f",
        "-",
    ]
    assert json.loads(stdin)["spec"]["resources"]["gpu"] == {"quota": 0, "overQuotaWeight": 2.0, "limit": 9}

    failing = tmp_path / "kubectl-fail"
    failing.write_text(fake.read_text())
    failing.chmod(0o755)
    with pytest.raises(ApplyFailedError, match="kubectl apply exited 1"):
        asyncio.run(kubectl_sink(str(failing))(adapter.manifests(T0)[0]))


def test_yaml_output_is_one_document_per_manifest() -> None:
    import yaml

    adapter = QuotaAdapter(KUEUE, "kueue")
    adapter.observe(a_quota("H100", h1=2.0))
    out = io.StringIO()
    asyncio.run(flush(adapter, print_sink("yaml", out), T0))
    [doc] = list(yaml.safe_load_all(out.getvalue()))
    flavors = doc["spec"]["resourceGroups"][0]["flavors"]
    assert [f["resources"][0]["borrowingLimit"] for f in flavors] == [0, 2]


def test_the_command_refuses_a_mapping_the_crd_rejects_before_reading_kafka(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from gfs.services.serve_cli import app

    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "kueue:\n  cluster_queues:\n  - name: spot\n    flavors: [{flavor: a100, pool: A100}]\n"
        "    extra_resource_groups:\n"
        "    - {coveredResources: [cpu], flavors: [{name: x, resources: [{name: cpu}]}]}\n"
    )
    result = CliRunner().invoke(
        app, ["quota-adapter", "--target", "kueue", "--config", str(bad), "--dry-run"]
    )
    assert result.exit_code == 2
    assert "'nominalQuota' is a required property" in result.output
    result = CliRunner().invoke(
        app, ["quota-adapter", "--target", "volcano", "--config", str(bad), "--dry-run"]
    )
    assert result.exit_code == 2 and "--target must be kueue or kai" in result.output
