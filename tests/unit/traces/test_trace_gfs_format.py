"""The GFS-format loader: the 20-row fixture, round trips, and clear errors on bad input."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gfs.services.simulator.traces.gfs_format import (
    JOB_COLUMNS,
    NODE_COLUMNS,
    OrphanPolicy,
    TraceFormatError,
    format_number,
    load_gfs_trace,
    load_gfs_trace_with_report,
    write_gfs_trace,
)
from gfs.services.simulator.traces.records import Trace, TraceJob, TraceNode

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "gfs_trace_20"

NODES_CSV = "gpu_model,gpu_capacity_num,cpu_num,node_name\nA10,1,128,0\nH800,8,192,1\n"
GOOD_JOB = "j1,13,A10,8,1,1,0,60,HP"


def write_dir(tmp_path: Path, jobs_body: str, *, header: str = ",".join(JOB_COLUMNS),
              nodes: str = NODES_CSV) -> Path:  # fmt: skip
    (tmp_path / "node_info_df.csv").write_text(nodes)
    (tmp_path / "job_info_df.csv").write_text(header + "\n" + jobs_body + "\n")
    return tmp_path


def test_fixture_loads_with_expected_content() -> None:
    trace = load_gfs_trace(FIXTURE)
    assert len(trace.jobs) == 20
    assert [n.gpus for n in trace.nodes] == [1, 1, 8, 8, 8]
    assert sum(j.job_class == "SPOT" for j in trace.jobs) == 7
    assert sum(j.submit_s == 0 for j in trace.jobs) == 4
    job = {j.name: j for j in trace.jobs}["1016"]
    assert (job.job_class, job.gpus_per_worker, job.workers, job.total_gpus) == ("SPOT", 0.5, 2, 1.0)
    assert job.guarantee_hours == 1
    # sorted by (submit_s, name); horizon = latest submit + duration (job 1001: 0 + 36,000 s)
    keys = [(j.submit_s, j.name) for j in trace.jobs]
    assert keys == sorted(keys)
    assert trace.horizon_s == 36000.0


def test_round_trip_of_fixture(tmp_path: Path) -> None:
    trace = load_gfs_trace(FIXTURE)
    write_gfs_trace(trace, tmp_path)
    again = load_gfs_trace(tmp_path)
    assert again.nodes == trace.nodes
    assert again.jobs == trace.jobs
    assert again.horizon_s == trace.horizon_s


def test_extra_columns_are_ignored_and_case_of_job_type_is_normalised(tmp_path: Path) -> None:
    header = ",".join((*JOB_COLUMNS, "extra"))
    write_dir(tmp_path, "j1,13,A10,8,1,1,0,60,spot,x\nj2,13,A10,8,1,1,5,60,hp,y", header=header)
    trace = load_gfs_trace(tmp_path)
    assert [j.job_class for j in trace.jobs] == ["SPOT", "HP"]


@pytest.mark.parametrize(
    ("body", "header", "message"),
    [
        pytest.param(GOOD_JOB, ",".join(c for c in JOB_COLUMNS if c != "duration"),
                     "missing column(s) duration", id="missing-column"),
        pytest.param("j1,13,A10,8,1,1,0,60,Preemptible", None, "unknown value 'Preemptible'", id="job-type"),
        pytest.param("j1,13,A10,8,1,1,0,-5,HP", None, "column duration", id="negative-duration"),
        pytest.param("j1,13,A10,8,0,1,0,60,HP", None, "column gpu_request", id="zero-gpu"),
        pytest.param("j1,13,A10,8,1,0,0,60,HP", None, "column worker_num", id="zero-workers"),
        pytest.param("j1,13,A10,8,1,1.5,0,60,HP", None, "column worker_num", id="fractional-workers"),
        pytest.param("j1,13,A10,8,1,1,-1,60,HP", None, "column submit_time", id="negative-submit"),
        pytest.param("j1,13,A10,8,one,1,0,60,HP", None, "not a number: 'one'", id="not-a-number"),
        pytest.param("j1,13,A10,8,1,1,0,nan,HP", None, "not finite", id="nan"),
        pytest.param(f"{GOOD_JOB}\n{GOOD_JOB}", None, "duplicate job_name", id="duplicate-name"),
        pytest.param("j1,13,A10", None, "fields, expected", id="short-row"),
    ],
)  # fmt: skip
def test_bad_job_files_are_rejected_with_a_clear_message(
    tmp_path: Path, body: str, header: str | None, message: str
) -> None:
    write_dir(tmp_path, body, header=header or ",".join(JOB_COLUMNS))
    with pytest.raises(TraceFormatError) as err:
        load_gfs_trace(tmp_path)
    assert message in str(err.value)


def test_error_names_the_row(tmp_path: Path) -> None:
    write_dir(tmp_path, f"{GOOD_JOB}\nj2,13,A10,8,1,1,0,-1,HP")
    with pytest.raises(TraceFormatError, match=r"job_info_df.csv:3: column duration"):
        load_gfs_trace(tmp_path)


def test_missing_node_column_is_named(tmp_path: Path) -> None:
    write_dir(tmp_path, GOOD_JOB, nodes="gpu_model,cpu_num,node_name\nA10,128,0\n")
    with pytest.raises(TraceFormatError, match=r"missing column.*gpu_capacity_num"):
        load_gfs_trace(tmp_path)


def test_missing_file_is_reported(tmp_path: Path) -> None:
    with pytest.raises(TraceFormatError, match="file not found"):
        load_gfs_trace(tmp_path)


ORPHANS = f"{GOOD_JOB}\nj2,13,V100,8,1,1,0,60,HP\nj3,13,V100,8,1,1,0,60,Spot"


def test_jobs_on_models_without_nodes_are_an_error_by_default(tmp_path: Path) -> None:
    write_dir(tmp_path, ORPHANS)
    with pytest.raises(TraceFormatError, match=r"2 job\(s\).*V100: 2"):
        load_gfs_trace(tmp_path)


@pytest.mark.parametrize(
    ("policy", "kept"), [(OrphanPolicy.DROP, 1), (OrphanPolicy.KEEP, 3)], ids=["drop", "keep"]
)
def test_orphan_policy_drop_or_keep_reports_counts(tmp_path: Path, policy: OrphanPolicy, kept: int) -> None:
    write_dir(tmp_path, ORPHANS)
    trace, report = load_gfs_trace_with_report(tmp_path, orphans=policy)
    assert len(trace.jobs) == kept
    assert report.orphan_jobs_by_model == (("V100", 2),)
    assert report.orphans_dropped == 3 - kept


def test_node_columns_constant_matches_release_order() -> None:
    assert NODE_COLUMNS == ("gpu_model", "gpu_capacity_num", "cpu_num", "node_name")


@given(st.floats(min_value=0, max_value=1e9, allow_nan=False, allow_infinity=False))
def test_format_number_round_trips(value: float) -> None:
    assert float(format_number(value)) == value


job_strategy = st.builds(
    TraceJob,
    name=st.integers(0, 10**6).map(str),
    organization=st.sampled_from(["0", "13", "57"]),
    gpu_model=st.sampled_from(["A10", "H800"]),
    cpu_request=st.floats(0, 256, allow_nan=False),
    gpus_per_worker=st.sampled_from([0.1, 0.5, 1.0, 8.0]),
    workers=st.integers(1, 64),
    submit_s=st.floats(0, 1.6e7, allow_nan=False),
    duration_s=st.floats(0, 1.6e7, allow_nan=False),
    job_class=st.sampled_from(["HP", "SPOT"]),
)


@given(st.lists(job_strategy, max_size=15, unique_by=lambda j: j.name))
def test_write_then_load_is_identity(jobs: list[TraceJob]) -> None:
    import tempfile

    nodes = (TraceNode("n0", "A10", 1, 128), TraceNode("n1", "H800", 8, 192))
    ordered = tuple(sorted(jobs, key=lambda j: (j.submit_s, j.name)))
    trace = Trace(nodes=nodes, jobs=ordered, horizon_s=0.0)
    with tempfile.TemporaryDirectory() as tmp:
        write_gfs_trace(trace, Path(tmp))
        again = load_gfs_trace(Path(tmp))
    assert again.jobs == ordered
    assert again.nodes == nodes


# ----- the optional columns: checkpoint_interval, guarantee_hours, cancel_time ----------------------
OPTIONAL_HEADER = ",".join((*JOB_COLUMNS, "checkpoint_interval", "guarantee_hours", "cancel_time"))


def test_optional_columns_are_read_and_empty_cells_take_the_defaults(tmp_path: Path) -> None:
    write_dir(
        tmp_path,
        "a,13,A10,8,1,1,0,60,Spot,600,4,40\nb,13,A10,8,1,1,20,60,HP,,,\nc,13,A10,8,0.5,1,20,60,Spot,1200.5,2,20",
        header=OPTIONAL_HEADER,
    )
    got = {
        j.name: (j.checkpoint_interval_s, j.guarantee_hours, j.cancel_s)
        for j in load_gfs_trace(tmp_path).jobs
    }
    # c: a cancel at the submit instant is allowed
    assert got == {"a": (600.0, 4, 40.0), "b": (3600.0, 1, None), "c": (1200.5, 2, 20.0)}


def test_any_subset_of_the_optional_columns_in_any_position(tmp_path: Path) -> None:
    header = ",".join(("cancel_time", *JOB_COLUMNS))
    write_dir(tmp_path, "100,a,13,A10,8,1,1,0,60,HP", header=header)
    (job,) = load_gfs_trace(tmp_path).jobs
    assert (job.cancel_s, job.checkpoint_interval_s, job.guarantee_hours) == (100.0, 3600.0, 1)


def test_traces_without_the_optional_columns_read_the_defaults() -> None:
    for job in load_gfs_trace(FIXTURE).jobs:
        assert (job.checkpoint_interval_s, job.guarantee_hours, job.cancel_s) == (3600.0, 1, None)


BAD_OPTIONAL = "j1,13,A10,8,1,1,{submit},60,Spot,{ckpt},{hours},{cancel}"


@pytest.mark.parametrize(
    ("cells", "message"),
    [
        pytest.param({"ckpt": "0"}, "column checkpoint_interval: must be > 0 seconds, got '0'", id="zero"),
        pytest.param({"ckpt": "-60"}, "column checkpoint_interval: must be > 0", id="negative-ckpt"),
        pytest.param({"ckpt": "often"}, "column checkpoint_interval: not a number: 'often'", id="text-ckpt"),
        pytest.param({"hours": "3"}, "column guarantee_hours: must be 1, 2 or 4, got '3'", id="three-hours"),
        pytest.param({"hours": "1.5"}, "column guarantee_hours: must be 1, 2 or 4, got '1.5'", id="fraction"),
        pytest.param({"submit": "100", "cancel": "99"},
                     "column cancel_time: '99' is before the job's submit_time 100 (a job cannot be "
                     "cancelled before it is submitted)", id="cancel-before-submit"),
        pytest.param({"cancel": "inf"}, "column cancel_time: not finite", id="inf-cancel"),
    ],
)  # fmt: skip
def test_bad_optional_values_are_rejected_with_a_clear_message(
    tmp_path: Path, cells: dict[str, str], message: str
) -> None:
    row = BAD_OPTIONAL.format(**{"submit": "0", "ckpt": "", "hours": "", "cancel": "", **cells})
    write_dir(tmp_path, f"j0,13,A10,8,1,1,0,60,HP,,,\n{row}", header=OPTIONAL_HEADER)
    with pytest.raises(TraceFormatError) as err:
        load_gfs_trace(tmp_path)
    assert "job_info_df.csv:3: " + message in str(err.value)  # the bad row is the file's third line


def test_a_row_short_of_an_optional_column_is_rejected(tmp_path: Path) -> None:
    write_dir(tmp_path, "j1,13,A10,8,1,1,0,60,Spot,,1", header=OPTIONAL_HEADER)
    with pytest.raises(TraceFormatError, match="row has 11 fields, expected 12"):
        load_gfs_trace(tmp_path)


def test_writer_adds_only_the_optional_columns_that_differ_from_the_defaults(tmp_path: Path) -> None:
    nodes = (TraceNode("n0", "A10", 1, 128),)
    plain = TraceJob("a", "13", "A10", 8.0, 1.0, 1, 0.0, 60.0, "SPOT")
    options = TraceJob("a", "13", "A10", 8.0, 1.0, 1, 0.0, 60.0, "SPOT", 2, 600.0)
    cancelled = TraceJob("b", "13", "A10", 8.0, 1.0, 1, 20.0, 60.0, "HP", cancel_s=40.0)
    write_gfs_trace(Trace(nodes=nodes, jobs=(plain,), horizon_s=60.0), tmp_path / "plain")
    assert (tmp_path / "plain" / "job_info_df.csv").read_text().splitlines()[0] == ",".join(JOB_COLUMNS)
    write_gfs_trace(Trace(nodes=nodes, jobs=(plain, cancelled), horizon_s=80.0), tmp_path / "cancel")
    lines = (tmp_path / "cancel" / "job_info_df.csv").read_text().splitlines()
    assert lines == [
        ",".join((*JOB_COLUMNS, "cancel_time")),
        "a,13,A10,8,1,1,0,60,Spot,",
        "b,13,A10,8,1,1,20,60,HP,40",
    ]
    both = (options, cancelled)
    write_gfs_trace(Trace(nodes=nodes, jobs=both, horizon_s=80.0), tmp_path / "all")
    lines = (tmp_path / "all" / "job_info_df.csv").read_text().splitlines()
    assert lines == [
        ",".join((*JOB_COLUMNS, "checkpoint_interval", "guarantee_hours", "cancel_time")),
        "a,13,A10,8,1,1,0,60,Spot,600,2,",
        "b,13,A10,8,1,1,20,60,HP,,,40",
    ]
    assert load_gfs_trace(tmp_path / "all").jobs == both


@st.composite
def job_with_options(draw: st.DrawFn) -> TraceJob:
    job = draw(job_strategy)
    cancel = draw(st.none() | st.floats(0, 1e6, allow_nan=False).map(lambda d: job.submit_s + d))
    return TraceJob(
        *(job.name, job.organization, job.gpu_model, job.cpu_request, job.gpus_per_worker, job.workers),
        *(job.submit_s, job.duration_s, job.job_class),
        guarantee_hours=draw(st.sampled_from([1, 2, 4])),
        checkpoint_interval_s=draw(st.sampled_from([3600.0, 20.0, 0.5]) | st.floats(1e-3, 1e5)),
        cancel_s=cancel,
    )


@given(st.lists(job_with_options(), max_size=15, unique_by=lambda j: j.name))
def test_write_then_load_is_identity_with_the_optional_columns(jobs: list[TraceJob]) -> None:
    import tempfile

    nodes = (TraceNode("n0", "A10", 1, 128), TraceNode("n1", "H800", 8, 192))
    ordered = tuple(sorted(jobs, key=lambda j: (j.submit_s, j.name)))
    trace = Trace(nodes=nodes, jobs=ordered, horizon_s=0.0)
    with tempfile.TemporaryDirectory() as tmp:
        write_gfs_trace(trace, Path(tmp))
        again = load_gfs_trace(Path(tmp))
    assert again.jobs == ordered
