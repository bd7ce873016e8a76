"""Bounded input everywhere (issue 8): every observation of the issue as a named scenario.

1. request bodies over ``max_body_bytes`` (default 1 MiB) are a 413 problem, by Content-Length and
   when streamed without one; the server passes its setting to the API;
2. numbers are strict: ``true`` is not 1 and ``"2"`` is not 2 (an int is still a valid float);
3. no control characters (C0, DEL, C1, bidi controls) in text fields; names and labels printable;
   TAB allowed in command arguments and environment values only; ``cwd`` / ``checkpoint_dir``
   absolute and without ``..``;
4. a forged or garbage pagination cursor is a 422 naming ``cursor``, never a 500;
5. a log ``offset`` past the end is a 416 naming ``offset`` and the log's size (follow mode too);
6. a file the CLI reads that is not UTF-8 is one line naming the file, never a traceback;
7. simulator inputs are bounded (``gpufleet.sim.limits``), errors naming the field.
"""

from __future__ import annotations

import base64
import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from typer.testing import CliRunner

from gpufleet.cli.main import app as cli_app
from gpufleet.errors import GpufleetError, InputError, TraceError
from gpufleet.io.traces import load_openb_nodes, load_openb_pods, load_philly
from gpufleet.sim import limits
from gpufleet.sim.clusterspec import load_cluster
from gpufleet.sim.traces.jsonl import parse_jsonl
from gpufleet.sim.traces.philly import PhillyOptions
from gpufleet.sim.traces.synthetic import SyntheticOptions
from gpufleet.store import repo
from tests.support.api_support import Api, fields, make_api, problem

MIB = 1024 * 1024


@pytest.fixture
def api(tmp_path: Path, db_url: str) -> Iterator[Api]:
    yield from make_api(tmp_path, db_url)


@pytest.fixture
def small_api(tmp_path: Path) -> Iterator[Api]:
    """SQLite only, with a 4 KiB body limit (the limit is configurable)."""
    yield from make_api(tmp_path, max_body_bytes=4096)


def job_count(api: Api) -> int:
    with api.db.session(readonly=True) as s:
        rows, _ = repo.list_jobs(s, teams=None, states=None, project=None, labels=None, cursor=None, limit=1000)
    return len(rows)


# -- 1. request body limit -------------------------------------------------------------------------


def _big_body(size: int) -> bytes:
    return json.dumps({"command": ["python", "x" * size]}).encode()


def _chunks(data: bytes, size: int = 64 * 1024) -> Iterator[bytes]:
    for i in range(0, len(data), size):
        yield data[i : i + size]


BODY_LIMIT_CASES: list[tuple[str, str]] = [
    ("content-length over 1 MiB", "content-length"),
    ("chunked without content-length over 1 MiB", "chunked"),
]


@pytest.mark.parametrize(("case", "how"), BODY_LIMIT_CASES, ids=[c[0] for c in BODY_LIMIT_CASES])
def test_body_over_the_default_limit_is_413(api: Api, case: str, how: str) -> None:
    body = _big_body(int(12.6 * MIB))  # the 12.6 MB job
    headers = api.h("alice", **{"Content-Type": "application/json"})
    if how == "content-length":
        r = api.client.post("/v1/jobs", content=body, headers=headers)
    else:
        r = api.client.post("/v1/jobs", content=_chunks(body), headers=headers)
        assert "content-length" not in {k.lower() for k in r.request.headers}
    doc = problem(r, 413, "payload_too_large")
    assert str(MIB) in doc["detail"] and fields(doc) == ["body"]
    assert job_count(api) == 0  # nothing was copied into the store


def test_body_under_the_limit_is_accepted(api: Api) -> None:
    r = api.client.post("/v1/jobs", json={"command": ["python", *["x" * 4000] * 200]}, headers=api.h("alice"))
    assert r.status_code == 201, r.text[:300]


SMALL_LIMIT_CASES: list[tuple[str, int, bool, int]] = [
    ("just under the configured limit", 3000, False, 201),
    ("over the configured limit", 5000, False, 413),
    ("over the configured limit, chunked", 5000, True, 413),
]


@pytest.mark.parametrize(
    ("case", "size", "chunked", "status"), SMALL_LIMIT_CASES, ids=[c[0] for c in SMALL_LIMIT_CASES]
)
def test_body_limit_is_configurable(small_api: Api, case: str, size: int, chunked: bool, status: int) -> None:
    body = _big_body(size)
    headers = small_api.h("alice", **{"Content-Type": "application/json"})
    content: bytes | Iterator[bytes] = _chunks(body, 1000) if chunked else body
    r = small_api.client.post("/v1/jobs", content=content, headers=headers)
    assert r.status_code == status, r.text[:300]
    if status == 413:
        assert "4096" in problem(r, 413, "payload_too_large")["detail"]


def test_server_passes_its_body_limit_to_the_api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gpufleet.server import host as server_mod
    from gpufleet.server.settings import Settings
    from gpufleet.store.db import Database

    settings = Settings(home=tmp_path, db=f"sqlite:///{tmp_path / 'g.db'}", max_body_bytes=5000)
    db = Database(settings.db_url)
    controller = SimpleNamespace(wake=lambda: None, ready=lambda: True)
    others = {f.name: None for f in dataclasses.fields(server_mod.Server)}  # fields app() does not use
    srv = server_mod.Server(**{**others, "settings": settings, "db": db, "controller": cast(Any, controller)})
    assert srv.app().state.ctx.max_body_bytes == 5000
    monkeypatch.setenv(server_mod.SETTINGS_ENV, settings.model_dump_json())
    assert server_mod.worker_app().state.ctx.max_body_bytes == 5000
    db.dispose()


# -- 2. strict numbers -----------------------------------------------------------------------------

STRICT_SUBMITS: list[tuple[str, dict[str, Any], str]] = [
    ("gpus true", {"gpus": True}, "body.gpus"),
    ("gpus false", {"gpus": False}, "body.gpus"),
    ("gpus string", {"gpus": "2"}, "body.gpus"),
    ("gpus float", {"gpus": 2.0}, "body.gpus"),
    ("cpu_milli false", {"cpu_milli": False}, "body.cpu_milli"),
    ("memory_mib true", {"memory_mib": True}, "body.memory_mib"),
    ("gpu_milli true", {"gpu_milli": True}, "body.gpu_milli"),
    ("min_gpu_memory_gib true", {"min_gpu_memory_gib": True}, "body.min_gpu_memory_gib"),
    ("max_runtime_s string", {"max_runtime_s": "60"}, "body.max_runtime_s"),
    ("estimated_runtime_s true", {"estimated_runtime_s": True}, "body.estimated_runtime_s"),
    ("budget_usd true", {"budget_usd": True}, "body.budget_usd"),
    ("preemptible string", {"preemptible": "yes"}, "body.preemptible"),
    ("preemptible one", {"preemptible": 1}, "body.preemptible"),
]


@pytest.mark.parametrize(("case", "patch", "field"), STRICT_SUBMITS, ids=[c[0] for c in STRICT_SUBMITS])
def test_submit_numbers_are_strict(api: Api, case: str, patch: dict[str, Any], field: str) -> None:
    body = {"command": ["python", "train.py"], **patch}
    doc = problem(api.client.post("/v1/jobs", json=body, headers=api.h("alice")), 422, "invalid_input")
    assert field in fields(doc), doc
    assert job_count(api) == 0


def test_ints_are_still_valid_floats(api: Api) -> None:
    job = api.submit("alice", gpus=1, max_runtime_s=60, estimated_runtime_s=30, min_gpu_memory_gib=8, budget_usd=5)
    assert job["gpus"] == 1 and job["max_runtime_s"] == 60.0


STRICT_PROGRESS: list[tuple[str, dict[str, Any], str]] = [
    ("step true", {"step": True}, "body.step"),
    ("total_steps string", {"total_steps": "100"}, "body.total_steps"),
    ("metric false", {"metrics": {"loss": False}}, "body.metrics.loss"),
    ("metric name with NUL", {"metrics": {"lo\x00ss": 0.5}}, "body.metrics.lo\\x00ss"),
]


@pytest.mark.parametrize(("case", "body", "field"), STRICT_PROGRESS, ids=[c[0] for c in STRICT_PROGRESS])
def test_progress_numbers_are_strict(api: Api, case: str, body: dict[str, Any], field: str) -> None:
    job = api.submit("alice")["id"]
    r = api.client.post(f"/v1/jobs/{job}/progress", json=body, headers=api.h("alice"))
    assert field in fields(problem(r, 422, "invalid_input"))


# -- 3. control characters and paths ---------------------------------------------------------------

CONTROL_SUBMITS: list[tuple[str, dict[str, Any], str]] = [
    ("NUL in a command argument", {"command": ["python", "a\x00b"]}, "body.command[1]"),
    ("BEL in a command argument", {"command": ["python", "a\x07b"]}, "body.command[1]"),
    ("vertical tab in an env value", {"env": {"A": "x\x0by"}}, "body.env.A"),
    ("ESC in a command argument", {"command": ["\x1b[2Jpython"]}, "body.command[0]"),
    ("RLO in a command argument", {"command": ["python", "\u202etxt.exe"]}, "body.command[1]"),
    ("NUL in an env value", {"env": {"A": "x\x00y"}}, "body.env.A"),
    ("C1 in an env value", {"env": {"A": "x\x85y"}}, "body.env.A"),
    ("NUL in an env key", {"env": {"A\x00": "x"}}, "body.env.A\\x00"),
    ("NUL in cwd", {"cwd": "/work\x00/x"}, "body.cwd"),
    ("NUL in checkpoint_dir", {"checkpoint_dir": "/ckpt\x00"}, "body.checkpoint_dir"),
    ("NUL in name", {"name": "a\x00b"}, "body.name"),
    ("RLO in name", {"name": "evil\u202egnp.exe"}, "body.name"),
    ("tab in name", {"name": "a\tb"}, "body.name"),
    ("DEL in project", {"project": "p\x7f"}, "body.project"),
    ("LRI in namespace", {"namespace": "ns\u2066x\u2069"}, "body.namespace"),
    ("LRM in experiment", {"experiment": "e\u200e"}, "body.experiment"),
    ("RLM in experiment", {"experiment": "e\u200f"}, "body.experiment"),
    ("NUL in a label key", {"labels": {"k\x00": "v"}}, "body.labels.k\\x00"),
    ("RLO in a label value", {"labels": {"owner": "\u202enna"}}, "body.labels.owner"),
    ("zero-width format char in a label", {"labels": {"owner": "a\u200bb"}}, "body.labels.owner"),
    ("NUL in a gpu type", {"gpus": 1, "gpu_types": ["A100\x00"]}, "body.gpu_types[0]"),
    ("relative cwd", {"cwd": "work/x"}, "body.cwd"),
    ("dot-dot in cwd", {"cwd": "/srv/../etc"}, "body.cwd"),
    ("relative checkpoint_dir", {"checkpoint_dir": "ckpt"}, "body.checkpoint_dir"),
    ("dot-dot in checkpoint_dir", {"checkpoint_dir": "/ckpt/.."}, "body.checkpoint_dir"),
]


@pytest.mark.parametrize(("case", "patch", "field"), CONTROL_SUBMITS, ids=[c[0] for c in CONTROL_SUBMITS])
def test_control_characters_and_bad_paths_are_refused(api: Api, case: str, patch: dict[str, Any], field: str) -> None:
    body = {"command": ["python", "train.py"], **patch}
    doc = problem(api.client.post("/v1/jobs", json=body, headers=api.h("alice")), 422, "invalid_input")
    assert field in fields(doc), doc
    assert all(e["message"] for e in doc["errors"])
    assert job_count(api) == 0


def test_tab_and_unicode_text_are_allowed_where_documented(api: Api) -> None:
    job = api.submit(
        "alice",
        command=["printf", "a\tb", "line 1\nline 2\r\n"],  # multi-line scripts: TAB, LF, CR allowed
        env={"SEP": "\t", "SCRIPT": "a\nb"},
        name="résumé 训练",
        labels={"owner": "zoë"},
        cwd="/work",
        checkpoint_dir="//ckpt/./run1/",
    )
    assert job["command"][1] == "a\tb" and job["name"] == "résumé 训练"
    assert job["checkpoint_dir"] == "/ckpt/run1"  # normalized


# -- 4. pagination cursor --------------------------------------------------------------------------


def _b64(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


BAD_CURSORS: list[tuple[str, str]] = [
    ("garbage", "!!!not-base64!!!"),
    ("base64 garbage", _b64("hello")),
    ("huge integer", _b64("s1:" + "9" * 40)),
    ("just past int64", _b64(f"s1:{2**63}")),
    ("negative", _b64("s1:-1")),
    ("plus sign", _b64("s1:+5")),
    ("spaces", _b64("s1: 5")),
    ("unicode digits", _b64("s1:\u0665")),
    ("not utf-8", base64.urlsafe_b64encode(b"s1:\xff\xfe").decode()),
    ("non-ascii text", "é"),
    ("too long", "A" * 65),
]


@pytest.mark.parametrize(("case", "cursor"), BAD_CURSORS, ids=[c[0] for c in BAD_CURSORS])
def test_bad_cursor_is_422_naming_cursor(api: Api, case: str, cursor: str) -> None:
    api.submit("alice")
    r = api.client.get("/v1/jobs", params={"cursor": cursor}, headers=api.h("admin"))
    assert "query.cursor" in fields(problem(r, 422, "invalid_input"))


def test_issued_cursor_still_works(api: Api) -> None:
    for _ in range(3):
        api.submit("alice")
    page = api.client.get("/v1/jobs", params={"limit": 2}, headers=api.h("alice")).json()
    rest = api.client.get("/v1/jobs", params={"cursor": page["next_cursor"]}, headers=api.h("alice"))
    assert rest.status_code == 200 and len(rest.json()["items"]) == 1


# -- 5. log offset ---------------------------------------------------------------------------------


def _running(api: Api, job_id: str) -> None:
    with api.db.session() as s:
        for state in ("ADMITTED", "RUNNING"):
            repo.transition(s, repo.get_job(s, job_id), state, f"test → {state}", api.clock.now())


LOG_OFFSETS: list[tuple[str, int, bool, bool, int]] = [
    # case, offset, follow, running, expected status
    ("past the end", 13, False, False, 416),
    ("far past the end", 2**62, False, False, 416),
    ("past the end, follow on a running job", 100, True, True, 416),
    ("past the end, follow on an ended job", 100, True, False, 416),
    ("at the end", 12, False, False, 200),
    ("at the end, follow on an ended job", 12, True, False, 200),
]


@pytest.mark.parametrize(
    ("case", "offset", "follow", "running", "status"), LOG_OFFSETS, ids=[c[0] for c in LOG_OFFSETS]
)
def test_log_offset_past_the_end_is_416(
    api: Api, case: str, offset: int, follow: bool, running: bool, status: int
) -> None:
    job = api.submit("alice")["id"]
    if running:
        _running(api, job)
    else:
        api.client.post(f"/v1/jobs/{job}/cancel", headers=api.h("alice"))
    (api.logs / f"{job}.log").write_bytes(b"hello world\n")  # 12 bytes
    params: dict[str, Any] = {"offset": offset, "follow": follow}
    r = api.client.get(f"/v1/jobs/{job}/logs", params=params, headers=api.h("alice"))
    if status == 200:
        assert r.status_code == 200 and r.content == b""
        return
    doc = problem(r, 416, "offset_out_of_range")
    assert fields(doc) == ["query.offset"] and "12 bytes" in doc["detail"]
    assert r.headers["content-range"] == "bytes */12"


def test_log_offset_with_no_log_yet_is_416(api: Api) -> None:
    job = api.submit("alice")["id"]
    r = api.client.get(f"/v1/jobs/{job}/logs", params={"offset": 1}, headers=api.h("alice"))
    assert "0 bytes" in problem(r, 416, "offset_out_of_range")["detail"]


def test_negative_log_offset_is_422(api: Api) -> None:
    job = api.submit("alice")["id"]
    r = api.client.get(f"/v1/jobs/{job}/logs", params={"offset": -1}, headers=api.h("alice"))
    assert "query.offset" in fields(problem(r, 422, "invalid_input"))


# -- 6. files that are not UTF-8 -------------------------------------------------------------------

runner = CliRunner()
BAD = b"\xff\xfe\x00bad"

# case, file name, file content, CLI args ({f} is the file)
NOT_UTF8: list[tuple[str, str, bytes, list[str]]] = [
    ("jsonl trace", "t.jsonl", b'{"kind": "job", "submit": 0, "name": "\xff"}\n', ["simulate", "--trace", "{f}"]),
    ("philly csv by extension", "p.csv", b"timestamp,duration,num_gpus\n" + BAD, ["simulate", "--trace", "{f}"]),
    ("philly csv by prefix", "p.csv", b"timestamp,duration\n" + BAD, ["simulate", "--trace", "philly:{f}"]),
    ("openb csv by extension", "o.csv", b"name,cpu_milli\n" + BAD, ["simulate", "--trace", "{f}"]),
    ("openb pod list", "o.csv", b"name,cpu_milli\n" + BAD, ["simulate", "--trace", "openb:{f}"]),
    (
        "openb pod list (fragmentation experiment)",
        "o.csv",
        b"name,cpu_milli\n" + BAD,
        ["experiment", "fragmentation", "--trace", "{f}"],
    ),
    (
        "scheduling profile",
        "profile.yaml",
        b"queue_sort: \xff\n",
        ["simulate", "--trace", "synthetic", "--limit", "5", "--profile", "{f}"],
    ),
    (
        "cluster yaml",
        "cluster.yaml",
        b"nodes: \xff\n",
        ["simulate", "--trace", "synthetic", "--limit", "5", "--cluster", "{f}"],
    ),
    ("server settings", "settings.yaml", b"port: \xff\n", ["up", "--config", "{f}"]),
    ("price catalog", "prices.csv", b"provider,region\n" + BAD, ["prices", "--path", "{f}"]),
    ("price csv to merge", "prices.csv", b"provider,region\n" + BAD, ["cost", "update-prices", "--csv", "{f}"]),
]


@pytest.mark.parametrize(("case", "name", "content", "args"), NOT_UTF8, ids=[c[0] for c in NOT_UTF8])
def test_non_utf8_file_is_one_line_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str, name: str, content: bytes, args: list[str]
) -> None:
    from gpufleet.server import host as server_mod

    def must_not_start(*_a: object, **_k: object) -> None:
        raise AssertionError("the server started despite a bad settings file")

    monkeypatch.setattr(server_mod, "build_server", must_not_start)
    monkeypatch.setenv("GPUFLEET_HOME", str(tmp_path / "home"))
    path = tmp_path / name
    path.write_bytes(content)
    res = runner.invoke(cli_app, [a.replace("{f}", str(path)) for a in args])
    assert res.exit_code == 2, res.output
    assert isinstance(res.exception, SystemExit), repr(res.exception)
    out = res.output.strip()
    assert "Traceback" not in out and len(out.splitlines()) == 1, out
    assert str(path) in out.replace("\n", "") and "UTF-8" in out


def test_pricing_rules_file_not_utf8_fails_up_before_anything_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpufleet.server import host as server_mod

    def must_not_start(*_a: object, **_k: object) -> None:
        raise AssertionError("the server started despite a bad pricing rules file")

    monkeypatch.setattr(server_mod, "build_server", must_not_start)
    rules = tmp_path / "rules.yaml"
    rules.write_bytes(b"windows: \xff\n")
    settings = tmp_path / "settings.yaml"
    settings.write_text(f"pricing: {rules}\nhome: {tmp_path / 'home'}\n", encoding="utf-8")
    res = runner.invoke(cli_app, ["up", "--config", str(settings)])
    assert res.exit_code == 2 and isinstance(res.exception, SystemExit), res.output
    out = res.output.strip()
    assert len(out.splitlines()) == 1 and str(rules) in out and "UTF-8" in out, out
    assert not (tmp_path / "home").exists()


def test_client_server_file_not_utf8_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "server.json").write_bytes(b'{"url": "\xff"}')
    monkeypatch.setenv("GPUFLEET_HOME", str(home))
    monkeypatch.delenv("GPUFLEET_URL", raising=False)
    res = runner.invoke(cli_app, ["ls"])
    assert res.exit_code != 0 and isinstance(res.exception, SystemExit), repr(res.exception)
    assert "Traceback" not in res.output and "server.json" in res.output and "UTF-8" in res.output


# -- 7. simulator bounds ---------------------------------------------------------------------------


def _job(**fields: Any) -> str:
    return json.dumps({"kind": "job", "submit": 0, "name": "j", "gpus": 1, "duration_s": 60, **fields})


JSONL_BOUNDS: list[tuple[str, str, str]] = [
    ("gang size of a billion", _job(gang_size=1_000_000_000), "gang_size"),
    ("gang size one past the limit", _job(gang_size=limits.MAX_GANG_SIZE + 1), "gang_size"),
    ("GPUs per pod", _job(gpus=limits.MAX_GPUS_PER_POD + 1), "gpus"),
    ("CPU per pod", _job(cpu_milli=limits.MAX_CPU_MILLI + 1), "cpu_milli"),
    ("memory per pod", _job(memory_mib=limits.MAX_MEMORY_MIB + 1), "memory_mib"),
    ("submit past 10 years", _job(submit=limits.MAX_TIME_S + 1), "submit"),
    ("negative submit", _job(submit=-1), "submit"),
    ("duration past 10 years", _job(duration_s=1e12), "duration_s"),
    ("negative duration", _job(duration_s=-5), "duration_s"),
    ("estimate past 10 years", _job(estimated_runtime_s=1e300), "estimated_runtime_s"),
    ("max runtime past 10 years", _job(max_runtime_s=1e12), "max_runtime_s"),
    ("checkpoint interval past 10 years", _job(preemptible=True, checkpoint_interval_s=1e12), "checkpoint_interval_s"),
    (
        "node GPUs",
        json.dumps({"kind": "cluster", "nodes": [{"name": "n", "gpu_count": 1000}]}),
        "nodes.0.gpu_count",
    ),
    (
        "pool max_nodes",
        json.dumps(
            {
                "kind": "cluster",
                "pools": [
                    {
                        "name": "p",
                        "gpu_model": "A100",
                        "gpus_per_node": 8,
                        "cpu_milli": 1000,
                        "memory_mib": 1024,
                        "max_nodes": 10**9,
                    }
                ],
            }
        ),
        "pools.0.max_nodes",
    ),
]


@pytest.mark.parametrize(("case", "line", "field"), JSONL_BOUNDS, ids=[c[0] for c in JSONL_BOUNDS])
def test_jsonl_sizes_and_times_are_bounded(case: str, line: str, field: str) -> None:
    with pytest.raises(TraceError) as err:
        parse_jsonl([line], source="t.jsonl")
    assert err.value.field == field and err.value.line == 1 and err.value.source == "t.jsonl"


def test_jsonl_pools_together_are_bounded() -> None:
    pool = {"gpu_model": "A100", "gpus_per_node": 8, "cpu_milli": 1000, "memory_mib": 1024, "max_nodes": 60_000}
    line = json.dumps({"kind": "cluster", "pools": [{"name": "a", **pool}, {"name": "b", **pool}]})
    with pytest.raises(TraceError, match=str(limits.MAX_NODES)):
        parse_jsonl([line], source="t.jsonl")


def test_jsonl_at_the_limits_loads() -> None:
    trace = parse_jsonl([_job(gang_size=limits.MAX_GANG_SIZE, submit=limits.MAX_TIME_S, duration_s=limits.MAX_TIME_S)])
    assert trace.jobs[0].spec.gang_size == limits.MAX_GANG_SIZE


CLUSTER_BOUNDS: list[tuple[str, dict[str, Any], str]] = [
    (
        "node count",
        {"nodes": [{"count": 10**9, "gpus": 8, "gpu_model": "A100", "cpu": 8, "memory_gib": 64}]},
        "nodes.0.count",
    ),
    ("GPUs per node", {"nodes": [{"gpus": 1000, "gpu_model": "A100", "cpu": 8, "memory_gib": 64}]}, "nodes.0.gpus"),
    ("CPU per node", {"nodes": [{"cpu": 10**7, "memory_gib": 64}]}, "nodes.0.cpu"),
    ("infinite memory", {"nodes": [{"cpu": 8, "memory_gib": float("inf")}]}, "nodes.0.memory_gib"),
    ("pool max_nodes", {"pools": [{"name": "p", "cpu": 8, "memory_gib": 64, "max_nodes": 10**9}]}, "pools.0.max_nodes"),
    (
        "provisioning delay",
        {"pools": [{"name": "p", "cpu": 8, "memory_gib": 64, "provisioning_delay_s": 1e12}]},
        "pools.0.provisioning_delay_s",
    ),
    (
        "static plus pools",
        {
            "nodes": [{"count": 60_000, "cpu": 8, "memory_gib": 64}],
            "pools": [{"name": "p", "cpu": 8, "memory_gib": 64, "max_nodes": 60_000}],
        },
        "(root)",
    ),
]


@pytest.mark.parametrize(("case", "spec", "field"), CLUSTER_BOUNDS, ids=[c[0] for c in CLUSTER_BOUNDS])
def test_cluster_spec_is_bounded(case: str, spec: dict[str, Any], field: str) -> None:
    with pytest.raises(InputError) as err:
        load_cluster(spec, source="cluster.yaml")
    assert err.value.field == field and err.value.source == "cluster.yaml"


PHILLY_HEADER = "timestamp,duration,num_gpus,gpu_time,cluster\n"
PHILLY_BOUNDS: list[tuple[str, str, str]] = [
    ("GPU count of a billion", "2017-10-09 07:01:55,60,1000000000,60,vc1\n", "num_gpus"),
    ("duration past 10 years", "2017-10-09 07:01:55,1e12,1,60,vc1\n", "duration"),
    ("infinite duration", "2017-10-09 07:01:55,inf,1,60,vc1\n", "duration"),
    (
        "span past 10 years",
        "2017-10-09 07:01:55,60,1,60,vc1\n2037-10-09 07:01:55,60,1,60,vc1\n",
        "timestamp",
    ),
]


@pytest.mark.parametrize(("case", "rows", "field"), PHILLY_BOUNDS, ids=[c[0] for c in PHILLY_BOUNDS])
def test_philly_is_bounded(tmp_path: Path, case: str, rows: str, field: str) -> None:
    path = tmp_path / "philly.csv"
    path.write_text(PHILLY_HEADER + rows, encoding="utf-8")
    with pytest.raises(TraceError) as err:
        load_philly(path)
    assert err.value.field == field


def test_philly_gang_of_one_gpu_nodes_is_bounded(tmp_path: Path) -> None:
    path = tmp_path / "philly.csv"
    path.write_text(PHILLY_HEADER + f"2017-10-09 07:01:55,60,{limits.MAX_GANG_SIZE + 1},60,vc1\n", encoding="utf-8")
    with pytest.raises(TraceError) as err:
        load_philly(path, PhillyOptions(gpus_per_node=1))
    assert err.value.field == "num_gpus" and "pods" in err.value.message


OPENB_POD_HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n"
OPENB_FULL_HEADER = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n"
)
OPENB_BOUNDS: list[tuple[str, str, str]] = [
    ("GPUs per pod", OPENB_POD_HEADER + "p,1000,1024,100000,1000\n", "num_gpu"),
    ("CPU per pod", OPENB_POD_HEADER + "p,999999999999,1024,1,1000\n", "cpu_milli"),
    ("creation time past 10 years", OPENB_FULL_HEADER + "p,1000,1024,1,1000,,LS,Running,1e12,,\n", "creation_time"),
    ("deletion time infinite", OPENB_FULL_HEADER + "p,1000,1024,1,1000,,LS,Running,0,inf,\n", "deletion_time"),
]


@pytest.mark.parametrize(("case", "text", "field"), OPENB_BOUNDS, ids=[c[0] for c in OPENB_BOUNDS])
def test_openb_pods_are_bounded(tmp_path: Path, case: str, text: str, field: str) -> None:
    path = tmp_path / "pods.csv"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(TraceError) as err:
        load_openb_pods(path)
    assert err.value.field == field and err.value.line == 2


def test_openb_node_gpus_are_bounded(tmp_path: Path) -> None:
    path = tmp_path / "nodes.csv"
    path.write_text("sn,cpu_milli,memory_mib,gpu,model\nn1,1000,1024,100000,V100M16\n", encoding="utf-8")
    with pytest.raises(TraceError) as err:
        load_openb_nodes(path)
    assert err.value.field == "gpu"


SYNTHETIC_BOUNDS: list[tuple[str, dict[str, Any], str]] = [
    ("a billion jobs", {"num_jobs": 1_000_000_000}, "num_jobs"),
    ("gang of a billion pods", {"gang_sizes": (2, 1_000_000_000)}, "gang_sizes"),
    ("GPUs per node", {"gpus_per_node": 10_000}, "gpus_per_node"),
    ("multi-GPU count", {"multi_gpu_counts": (2, 100_000)}, "multi_gpu_counts"),
    ("duration max past 10 years", {"duration_max_s": 1e12}, "duration_max_s"),
    ("infinite arrival rate", {"arrival_rate_per_hour": float("inf")}, "arrival_rate_per_hour"),
    ("arrivals over 10 years", {"num_jobs": 1000, "arrival_rate_per_hour": 1e-3}, "arrival_rate_per_hour"),
    ("CPU per pod", {"cpu_milli_per_gpu": 10**9}, "cpu_milli_per_gpu"),
    ("checkpoint interval", {"checkpoint_intervals_s": (1e12,)}, "checkpoint_intervals_s"),
]


@pytest.mark.parametrize(("case", "opts", "field"), SYNTHETIC_BOUNDS, ids=[c[0] for c in SYNTHETIC_BOUNDS])
def test_synthetic_options_are_bounded(case: str, opts: dict[str, Any], field: str) -> None:
    with pytest.raises(InputError) as err:
        SyntheticOptions(**opts)
    assert err.value.field == field


SIMULATE_CLI_BOUNDS: list[tuple[str, list[str], str]] = [
    ("synthetic limit of a trillion", ["--trace", "synthetic", "--limit", "1000000000000"], "num_jobs"),
    ("synthetic seed not a number", ["--trace", "synthetic:abc"], "trace"),
]


@pytest.mark.parametrize(("case", "args", "field"), SIMULATE_CLI_BOUNDS, ids=[c[0] for c in SIMULATE_CLI_BOUNDS])
def test_simulate_cli_bounds_are_one_line(case: str, args: list[str], field: str) -> None:
    res = runner.invoke(cli_app, ["simulate", *args])
    assert res.exit_code == 2 and isinstance(res.exception, SystemExit), repr(res.exception)
    assert f"field '{field}'" in res.output and len(res.output.strip().splitlines()) == 1, res.output


def test_jsonl_gang_via_cli_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(_job(gang_size=1_000_000_000) + "\n", encoding="utf-8")
    res = runner.invoke(cli_app, ["simulate", "--trace", str(path)])
    assert res.exit_code == 2, res.output
    assert f"{path}:1" in res.output.replace("\n", "") and "gang_size" in res.output


def test_limits_are_errors_of_the_project() -> None:
    assert issubclass(TraceError, GpufleetError)
    assert limits.MAX_TIME_S == 10 * 365 * 86_400 and limits.time_problem(float("nan")) is not None
