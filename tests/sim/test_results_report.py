"""Simulation results: summary figures on a hand-built result, CSV/JSON output, the HTML report."""

from __future__ import annotations

import csv
import json
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

from gpufleet.errors import InputError
from gpufleet.io.results import read_json, write_csv, write_json
from gpufleet.sim.report import MAX_POINTS, downsample, render_html
from gpufleet.sim.results import JobRecord, Sample, SimResult


def record(job_id: str, team: str = "x", **kw: object) -> JobRecord:
    base: dict[str, object] = dict(
        job_id=job_id,
        name=job_id,
        team=team,
        project="",
        gpus=1.0,
        submit=0.0,
        start=None,
        end=None,
        state="PENDING",
        wait_s=None,
        jct_s=None,
        gpu_seconds=0.0,
        cost_usd=0.0,
    )
    base.update(kw)
    return JobRecord(**base)  # type: ignore[arg-type]


def hand_built(name: str = "fifo") -> SimResult:
    records = [
        record(
            "a",
            "x",
            submit=0.0,
            start=0.0,
            end=100.0,
            state="SUCCEEDED",
            wait_s=0.0,
            jct_s=100.0,
            gpu_seconds=100.0,
            cost_usd=1.0,
            capacity_type="on-demand",
        ),
        record(
            "b",
            "y",
            gpus=2.0,
            submit=0.0,
            start=50.0,
            end=150.0,
            state="SUCCEEDED",
            wait_s=50.0,
            jct_s=150.0,
            gpu_seconds=200.0,
            cost_usd=2.0,
            preemptions=1,
            restarts=1,
            spot_restarts=1,
            lost_work_s=10.0,
            capacity_type="spot",
        ),
        record("c", "x", submit=10.0, end=20.0, state="CANCELLED", jct_s=10.0),
        record("d", "y", submit=100.0),
    ]
    # 4 GPUs at $72/h for 200 s = $4; allocated 1, 3, 2, 0 GPUs for 50 s each.
    samples = [
        Sample(0.0, 1.0, 4.0, 3.0, 1, 1, 72.0, 1),
        Sample(50.0, 3.0, 4.0, 1.0, 1, 2, 72.0, 1),
        Sample(100.0, 2.0, 4.0, 2.0, 1, 1, 72.0, 1),
        Sample(150.0, 0.0, 4.0, 4.0, 1, 0, 72.0, 1),
    ]
    return SimResult(name, records, samples, {"policy": name}, makespan=200.0, events_processed=9)


def test_summary_figures() -> None:
    s = hand_built().summary()
    assert (s["jobs"], s["completed"], s["cancelled"], s["failed"], s["unfinished"], s["never_started"]) == (
        4,
        2,
        1,
        0,
        1,
        2,
    )
    assert (s["wait_mean_s"], s["wait_median_s"]) == (25.0, 25.0)
    assert s["wait_p95_s"] == pytest.approx(47.5)
    assert s["jct_mean_s"] == pytest.approx(260 / 3)
    assert s["jct_median_s"] == 100.0
    assert s["jct_p99_s"] == pytest.approx(149.0)
    assert s["utilization"] == pytest.approx(300 / 800)
    assert (s["mean_allocated_gpus"], s["mean_total_gpus"], s["peak_queue_length"]) == (1.5, 4.0, 1)
    assert s["gpu_hours"] == pytest.approx(300 / 3600)
    assert s["cluster_cost_usd"] == pytest.approx(4.0)
    assert s["job_cost_usd"] == pytest.approx(3.0)
    assert s["idle_cost_usd"] == pytest.approx(1.0)
    assert s["total_cost_usd"] == pytest.approx(4.0)
    assert s["cost_per_gpu_hour_usd"] == pytest.approx(48.0)
    assert (s["preemptions"], s["restarts"], s["spot_restarts"], s["lost_work_s"]) == (1, 1, 1, 10.0)
    assert (s["makespan_s"], s["events_processed"]) == (200.0, 9)


def test_empty_result_has_undefined_figures() -> None:
    s = SimResult("empty").summary()
    assert s["jobs"] == 0 and s["wait_mean_s"] is None and s["utilization"] is None
    assert s["total_cost_usd"] == 0.0 and s["cost_per_gpu_hour_usd"] is None
    assert "<svg" in render_html(SimResult("empty"))


def test_cost_by_team() -> None:
    assert hand_built().cost_by_team() == {"y": 2.0, "x": 1.0}


def test_csv_output(tmp_path: Path) -> None:
    jobs, ts = write_csv(hand_built(), tmp_path / "out")
    with open(jobs, newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [r["job_id"] for r in rows] == ["a", "b", "c", "d"]
    assert rows[2]["start"] == "" and rows[1]["capacity_type"] == "spot" and rows[1]["wait_s"] == "50.0"
    with open(ts, newline="") as fh:
        samples = list(csv.DictReader(fh))
    assert len(samples) == 4 and samples[1]["allocated_gpus"] == "3.0"
    assert list(samples[0]) == [
        "time",
        "allocated_gpus",
        "total_gpus",
        "idle_gpus",
        "queue_length",
        "running_jobs",
        "cost_rate_usd_per_hour",
        "nodes",
    ]


def test_json_round_trip(tmp_path: Path) -> None:
    result = hand_built()
    path = write_json(result, tmp_path / "r" / "result.json")
    data = json.loads(path.read_text())
    assert data["summary"]["utilization"] == pytest.approx(0.375)
    back = read_json(path)
    assert (back.records, back.samples, back.config, back.makespan) == (
        result.records,
        result.samples,
        result.config,
        result.makespan,
    )
    (tmp_path / "junk.json").write_text('{"records": 1}')
    with pytest.raises(InputError, match=r"junk\.json"):
        read_json(tmp_path / "junk.json")


class Page(HTMLParser):
    """Collects what the report tests look at."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.attrs: list[tuple[str, str | None]] = []
        self.polylines: list[int] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.attrs.extend(attrs)
        if tag == "polyline":
            points = dict(attrs)["points"] or ""
            self.polylines.append(len(points.split()))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def parse(page: str) -> Page:
    parser = Page()
    parser.feed(page)
    parser.close()
    return parser


CHARTS = 6  # GPUs, queue, cost rate, wait CDF, JCT CDF, cost by team


def test_report_is_self_contained_with_one_svg_per_chart() -> None:
    page = render_html(hand_built())
    doc = parse(page)
    assert doc.tags.count("svg") == CHARTS
    assert doc.tags.count("figure") == CHARTS
    assert doc.tags.count("table") >= 1
    assert not {"script", "link", "img", "iframe", "object"} & set(doc.tags)
    assert "http" not in page
    assert all(not (v or "").startswith(("//", "data:")) for k, v in doc.attrs if k in ("src", "href"))
    text = " ".join(doc.text)
    for figure in ("Queue length", "Cost by team", "Wait time (CDF)", "Job completion time (CDF)"):
        assert figure in text
    assert "37.5%" in text and "$4.00" in text and "$48.00" in text


def test_report_overlays_several_results_with_a_legend() -> None:
    page = render_html([hand_built("fifo"), hand_built("backfill")])
    doc = parse(page)
    assert doc.tags.count("svg") == CHARTS
    text = " ".join(doc.text)
    assert "fifo: allocated" in text and "backfill: idle" in text
    # 2 results: 4 GPU lines, then 2 each for queue, cost, wait and JCT.
    assert len(doc.polylines) == 4 + 2 * 4
    assert doc.tags.count("rect") == 2 * 2  # two teams x two results


def test_report_escapes_text() -> None:
    result = hand_built('<b>"fifo"&</b>')
    evil = "<script>alert(1)</script>"
    result.records.append(record("e", evil, cost_usd=0.5))
    result.config["note"] = evil
    page = render_html(result)
    assert "<script>" not in page and "<b>" not in page
    assert "&lt;script&gt;" in page and "&lt;b&gt;&quot;fifo&quot;&amp;&lt;/b&gt;" in page
    assert "script" not in parse(page).tags


def test_long_series_are_downsampled() -> None:
    n = 50_000
    t = np.arange(n, dtype=float)
    samples = [Sample(float(i), float(i % 97), 100.0, 100.0 - i % 97, i % 13, 1, 10.0, 2) for i in range(n)]
    records = [
        record(str(i), wait_s=float(i), start=float(i), jct_s=float(i) + 5, end=float(i) + 5, state="SUCCEEDED")
        for i in range(n)
    ]
    page = render_html(SimResult("long", records, samples, makespan=float(n)))
    doc = parse(page)
    assert doc.polylines and max(doc.polylines) <= MAX_POINTS
    x, y = downsample(t, np.sin(t / 1000.0))
    assert len(x) <= MAX_POINTS and x[0] == 0 and x[-1] == n - 1 and np.all(np.diff(x) > 0)
    assert y.max() == pytest.approx(1.0, abs=1e-6) and y.min() == pytest.approx(-1.0, abs=1e-6)


def test_short_series_are_kept() -> None:
    x = np.array([0.0, 1.0, 2.0])
    assert downsample(x, x)[0] is x
