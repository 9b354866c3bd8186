"""The demo's report page: the side-by-side table, the eviction rates against their target and the
LSTM quotas, as a browser reads them (parsed back from the HTML, values hand-written here)."""

from __future__ import annotations

from html.parser import HTMLParser

from gfs.services.demo.report_page import render


class _Tables(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self._table: str | None = None
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "table":
            self._table = dict(attrs).get("id") or "?"
            self.tables[self._table] = []
        elif tag == "tr" and self._table is not None:
            self.tables[self._table].append([])
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None and self._table is not None:
            self.tables[self._table][-1].append("".join(self._cell))
            self._cell = None
        elif tag == "table":
            self._table = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


REPORT = {
    "run": "abc123",
    "side_by_side": [
        {"name": "live gfs <accelerated>", "spot_evictions": 4, "spot_queue_mean_s": 1800.0,
         "hp_queue_mean_s": 7200.0, "spot_gpu_hours_completed": 12.25, "finished": 400, "tasks": 464},
        {"name": "simulated fifo", "spot_evictions": 9, "spot_queue_mean_s": 60.0,
         "hp_queue_mean_s": 0.0, "spot_gpu_hours_completed": 30.0, "finished": 464, "tasks": 464},
    ],
    "eviction_rates": {
        "A100": {"failed": 4, "periods": 93, "rate": 4 / 93, "target": 0.1},
        "H800": {"failed": 0, "periods": 0, "rate": None, "target": 0.1},
    },
    "lstm_quotas": {"A100": {"quotas": 113, "latest_forecast": "lstm:lstm-observed@1@2"}},
}  # fmt: skip


def _parse(page: str) -> dict[str, list[list[str]]]:
    tables = _Tables()
    tables.feed(page)
    return tables.tables


def test_the_page_holds_the_side_by_side_rows_as_the_terminal_prints_them() -> None:
    side = _parse(render(REPORT, 480.0, True))["side-by-side"]
    assert side[0][0] == "run" and len(side) == 3
    # 1800 s = 30.0 min; 7200 s = 2.0 h (over 90 minutes, hours); 12.25 GPU-h to one decimal.
    assert side[1] == ["live gfs <accelerated>", "4", "30.0 min", "2.0 h", "12.2", "400 of 464"]
    assert side[2] == ["simulated fifo", "9", "1.0 min", "0.0 min", "30.0", "464 of 464"]


def test_the_page_says_the_verdict_of_the_simulated_rows_when_both_are_there() -> None:
    assert "id='verdict'" not in render(REPORT, 480.0, True)  # no simulated GFS row: no verdict
    gfs = {**REPORT["side_by_side"][1], "name": "simulated gfs", "spot_evictions": 1,
           "idle_while_fits": {"order": 0.5}}  # fmt: skip
    both = {**REPORT, "side_by_side": [*REPORT["side_by_side"], gfs]}
    page = render(both, 480.0, True)
    assert "<p id='verdict'>Verdict on this sample: simulated GFS keeps its promise" in page
    assert "1 spot evictions against 9" in page


def test_the_page_says_per_pool_whether_the_eviction_rate_kept_its_target() -> None:
    rates = _parse(render(REPORT, 480.0, True))["eviction-rates"]
    assert rates[1] == ["A100", "4", "93", "0.043", "0.100", "yes"]
    assert rates[2] == ["H800", "0", "0", "no period ended", "0.100", "no"]


def test_the_page_names_the_model_behind_the_quotas_and_escapes_what_it_prints() -> None:
    page = render(REPORT, 480.0, True)
    assert _parse(page)["lstm-quotas"][1] == ["A100", "113", "lstm:lstm-observed@1@2"]
    assert "<accelerated>" not in page and "&lt;accelerated&gt;" in page
    assert "<p id='lstm-quotas'>none</p>" in render(REPORT | {"lstm_quotas": {}}, 480.0, True)
