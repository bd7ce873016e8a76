"""The CLI as people use it (issue 10, observations 14, 15, 17 and 18 in part): progress bars on long
commands, ``--watch``, shell completion, tables that fit 80 columns in one style with human units,
a light start-up, one exit-code table, and ``experiment`` reading traces as ``simulate`` does.

Every test here failed on the code before these changes. Tables are read at a fixed width of 80
columns (``COLUMNS=80``; Rich's consoles are not terminals under the runner)."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from rich.console import Console
from rich.text import Text
from typer.testing import CliRunner

from gpufleet.cli import jobs as cli_jobs
from gpufleet.cli import progress as cli_progress
from gpufleet.cli import render
from gpufleet.cli.main import app
from gpufleet.sdk import Client
from tests.cli.test_cli_client import FakeServer
from tests.cli.test_sdk import job_json
from tests.support.paths import REPO

runner = CliRunner()
ROOT = REPO
W80 = {"COLUMNS": "80"}
RANGE = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d → \d{4}-\d\d-\d\d \d\d:\d\d UTC")
BOX = set("│┃─━┏┓┗┛┡┩╇╋┼╭╮╰╯")


def run(*args: str, env: dict[str, str] | None = None) -> Any:
    return runner.invoke(app, list(args), env=env)


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> FakeServer:
    """The fake API of tests/cli/test_cli_client.py, with long names and a long reason."""
    fake = FakeServer()

    def make_client(url: str | None, token: str | None) -> Client:
        c = Client("http://fake", token or "t", transport=httpx.MockTransport(fake), retries=0, backoff=0)
        c._sleep = lambda s: None
        return c

    monkeypatch.setattr(cli_jobs, "make_client", make_client)
    return fake


@pytest.fixture
def terminal(monkeypatch: pytest.MonkeyPatch) -> Iterator[io.StringIO]:
    """stderr as a terminal (what the progress bars are drawn on), captured."""
    buf = io.StringIO()
    monkeypatch.setattr(cli_progress, "err_console", Console(file=buf, force_terminal=True, width=120))
    yield buf


def add_job(fake: FakeServer, job_id: str, **fields: Any) -> None:
    fake.jobs[job_id] = {**job_json(job_id), **fields}


LONG_NAME = "train-resnet50-imagenet-augmented-v2"
REASON = "waiting for 2×A100-80GB: the quota of team research-vision is used up (8 of 8 GPUs)"


def long_jobs(fake: FakeServer) -> None:
    add_job(fake, "j-a1b2c3d4e5", name=LONG_NAME, team="research-vision", gpus=2, gpu_types=["A100-80GB"],
            reason=REASON, priority="normal")  # fmt: skip
    add_job(fake, "j-f6g7h8i9j0", name="bert", team="nlp", gpus=1, gpu_types=["A100-80GB"], state="RUNNING",
            started_at=(datetime.now(UTC) - timedelta(minutes=5, seconds=9)).isoformat())  # fmt: skip


def assert_fits(stdout: str, width: int = 80) -> list[str]:
    lines = stdout.rstrip("\n").splitlines()
    too_wide = [ln for ln in lines if Text(ln).cell_len > width]
    assert not too_wide, "\n" + stdout
    return lines


# ---------------------------------------------------------------------------------- 15: tables at 80


def test_ls_fits_80_columns_one_line_per_job_models_whole_names_cut_in_the_middle(server: FakeServer) -> None:
    """At 80 columns ``ls`` wrapped NAME over 5-6 lines and printed ``PRIOR…`` (observation 15)."""
    long_jobs(server)
    res = run("ls", env=W80)
    assert res.exit_code == 0, res.output
    lines = assert_fits(res.stdout)
    header = lines[0]
    assert header.split()[:2] == ["ID", "NAME"] and "…" not in header  # no header is cut
    rows = [ln for ln in lines if ln.startswith("j-")]
    assert len(rows) == 2 and len(lines) <= 4, res.stdout  # one line per job (+ header, + a caption)
    for row in rows:
        assert "2×A100-80GB" in row or "1×A100-80GB" in row  # the GPU model whole
    name = rows[0].split()[1]
    assert "…" in name and name.startswith("train-res") and name.endswith("-v2"), name
    # --wide: every column, nothing cut, whatever the terminal
    res = run("ls", "--wide", env=W80)
    assert res.exit_code == 0 and LONG_NAME in res.stdout and REASON in res.stdout, res.stdout
    assert "research-vision" in res.stdout and "…" not in res.stdout


def test_nodes_and_queue_fit_80_columns_with_whole_models(server: FakeServer) -> None:
    """``nodes`` showed ``A100-8…`` at 80 columns (observation 15)."""
    res = run("nodes", env=W80)
    assert res.exit_code == 0, res.output
    lines = assert_fits(res.stdout)
    row = next(ln for ln in lines if ln.startswith("box"))
    assert " A100-80GB " in row and "1.5/8" in row and "$20.00" in row
    wide = run("nodes", "--wide", env=W80).stdout
    assert "512 GiB" in wide and "on_demand" in wide  # human units; every column
    server.teams  # noqa: B018  (the queue answer is fixed by the fake)
    res = run("queue", env=W80)
    assert res.exit_code == 0, res.output
    lines = assert_fits(res.stdout)
    assert sum(1 for ln in lines if "j1" in ln) == 1 and "waiting for" in res.stdout


def test_tables_fit_80_columns_for_long_rows() -> None:
    """The fitting itself: long names, teams, pools and reasons at 80 columns, rows on one line."""
    from gpufleet.wire import NodeOut, QueueEntry

    now = datetime.now(UTC)
    node = NodeOut(name="gpu-node-0001.us-east-1.compute.internal", gpu_model="H100-80GB", gpu_count=8,
                   cpu_milli=192000, memory_mib=2048 * 1024, pool="on-demand-h100-capacity-block",
                   capacity_type="on_demand", sharing="mps", hourly_price_usd=98.32, state="ready",
                   allocated_gpus=7.5, running_jobs=12)  # fmt: skip
    entry = QueueEntry(job_id="j-zz9y8x7w6v", name=LONG_NAME, team="research-vision", priority="background",
                       position=12, reason=REASON, estimated_start=now + timedelta(hours=3),
                       submitted_at=now - timedelta(days=2))  # fmt: skip
    out = io.StringIO()
    console = Console(file=out, width=80)
    console.print(render.nodes_table([node] * 3, width=80))
    console.print(render.queue_table([entry] * 3, width=80))
    lines = assert_fits(out.getvalue())
    assert sum("H100-80GB" in ln for ln in lines) == 3  # three nodes, three lines, the model whole
    assert sum("j-zz9y8x7w6v" in ln for ln in lines) == 3


def test_cost_title_never_breaks_inside_the_window(server: FakeServer) -> None:
    """Cost report titles broke mid-range at 80 columns (observation 15): the table is narrower than
    its title, and Rich wrapped the title at the table's width."""
    for argv in (["cost"], ["cost", "--format", "detailed"], ["usage"]):
        res = run(*argv, env=W80)
        assert res.exit_code == 0, res.output
        assert_fits(res.stdout)
        assert RANGE.search(res.stdout.splitlines()[0]), res.stdout


def test_one_table_style_and_human_units() -> None:
    """Mixed styles (boxed tables next to bare ones) and raw units (observation 15)."""
    assert render.humanize_duration(309) == "5m09s"
    assert render.humanize_duration(7500) == "2h05m"
    assert render.humanize_duration(3 * 86400 + 4 * 3600) == "3d04h"
    assert render.money("1234.5") == "$1,234.50" and render.money(-3) == "-$3.00"
    assert render.gib(512 * 1024) == "512 GiB" and render.gib(1536) == "1.5 GiB"
    cut = render.cut_text(Text("train-resnet50-imagenet-v2"), 13, "middle")
    assert cut.plain == "train-res…-v2"
    res = run("simulate", "--trace", "synthetic:2", "--limit", "30", env=W80)
    assert res.exit_code == 0, res.output
    lines = assert_fits(res.stdout)
    assert not BOX & set(res.stdout), res.stdout  # the one style: no box
    assert lines[1].split() == ["METRIC", "VALUE"]
    row = next(ln for ln in lines if ln.startswith("jct_mean_s"))
    assert re.search(r"\d+(m\d\ds|h\d\dm|\.\ds)$", row), row  # a duration, not 2,084
    assert re.search(r"\$[\d,]+\.\d\d$", next(ln for ln in lines if ln.startswith("total_cost_usd")))


# ---------------------------------------------------------------------------- 14: progress and watch


def test_simulate_draws_a_progress_bar_on_a_terminal_only(terminal: io.StringIO) -> None:
    """No progress indication on ``simulate`` (observation 14)."""
    res = run("simulate", "--trace", "synthetic:1", "--limit", "60")
    assert res.exit_code == 0, res.output
    drawn = terminal.getvalue()
    assert "simulating" in drawn and "60/60 jobs" in drawn and "ETA" in drawn, drawn
    terminal.truncate(0)
    res = run("simulate", "--trace", "synthetic:1", "--limit", "60", "--json")
    assert res.exit_code == 0 and terminal.getvalue() == ""  # quiet under --json
    json.loads(res.stdout.splitlines()[-1])


def test_the_engine_reports_real_progress() -> None:
    """The bar is fed by the engine: (jobs ended, jobs in the trace), never decreasing, ending whole."""
    from gpufleet.io.traces import TraceOptions, load_trace
    from gpufleet.scheduling.profile import Profile
    from gpufleet.sim.engine import SimOptions
    from gpufleet.sim.runner import run_simulation

    seen: list[tuple[float, float]] = []
    trace = load_trace("synthetic:3", TraceOptions(limit=80))
    plain = run_simulation(trace, Profile(), options=SimOptions(seed=3))
    fed = run_simulation(trace, Profile(), options=SimOptions(seed=3, progress=lambda d, t: seen.append((d, t))))
    assert seen and {t for _, t in seen} == {80}
    assert [d for d, _ in seen] == sorted(d for d, _ in seen) and seen[-1] == (80, 80)
    assert fed.summary() == plain.summary()  # watching changes nothing


def test_whatif_and_fragmentation_draw_progress(terminal: io.StringIO, tmp_path: Path) -> None:
    """No progress on ``whatif`` (two runs) nor ``experiment fragmentation`` (observation 14)."""
    res = run("whatif", "--change", "spot", "--trace", "synthetic:1", "--limit", "40")
    assert res.exit_code == 0, res.output
    drawn = terminal.getvalue()
    assert "what-if baseline" in drawn and "what-if variant" in drawn and "40/40 jobs" in drawn, drawn
    terminal.truncate(0)
    pods = ROOT / "src" / "gpufleet" / "data" / "openb" / "openb_pod_list_default.csv"
    small = tmp_path / "pods.csv"
    small.write_text("".join(pods.read_text().splitlines(keepends=True)[:300]))
    res = run("experiment", "fragmentation", "-p", "bestfit", "-p", "fgd", "-t", str(small), "--seeds", "42,43")
    assert res.exit_code == 0, res.output
    assert "4/4 runs" in terminal.getvalue(), terminal.getvalue()
    assert_fits(res.stdout, 80)


def test_wait_shows_the_job_and_its_eta(terminal: io.StringIO, monkeypatch: pytest.MonkeyPatch) -> None:
    """No progress on ``wait`` (observation 14): the job's state, and its run time against its estimate."""
    started = (datetime.now(UTC) - timedelta(seconds=30)).isoformat()
    answers = iter(
        [
            {**job_json("j1"), "state": "RUNNING", "started_at": started, "estimated_runtime_s": 120.0},
            {**job_json("j1"), "state": "SUCCEEDED", "started_at": started, "exit_code": 0},
        ]
    )

    def handler(req: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=next(answers))

    monkeypatch.setattr(cli_jobs, "POLL_S", 0.01)
    monkeypatch.setattr(
        cli_jobs, "make_client", lambda url, token: Client("http://fake", "t", transport=httpx.MockTransport(handler))
    )
    res = run("wait", "j1")
    assert res.exit_code == 0, res.output
    drawn = terminal.getvalue()
    assert "j1" in drawn and "RUNNING" in drawn and "of estimate 2m00s" in drawn and "ETA" in drawn, drawn


@pytest.mark.parametrize("command", ["ls", "queue", "nodes"])
def test_watch_redraws_until_ctrl_c(server: FakeServer, monkeypatch: pytest.MonkeyPatch, command: str) -> None:
    """No ``--watch`` on ``ls``/``queue``/``nodes`` (observation 14): redraw until Ctrl-C, exit 0."""
    add_job(server, "j1")
    naps: list[float] = []

    def nap(seconds: float) -> None:
        naps.append(seconds)
        if len(naps) == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(cli_progress, "_sleep", nap)
    res = run(command, "--watch", "--interval", "5", env=W80)
    assert res.exit_code == 0, res.output
    assert naps == [5.0, 5.0]
    assert len(server.requests) == 2  # drawn, redrawn once, then Ctrl-C
    assert "Ctrl-C" in res.stdout
    res = run(command, "--watch", "--json")
    assert res.exit_code == 2 and "--watch" in res.stderr and "--json" in res.stderr


def test_shell_completion_is_offered_and_works() -> None:
    """No shell completion (observation 14)."""
    res = run("--help")
    assert "--install-completion" in res.stdout and "--show-completion" in res.stdout
    res = run("--show-completion", "bash")
    assert res.exit_code == 0 and "_GPUFLEET_COMPLETE" in res.stdout
    env = {"_GPUFLEET_COMPLETE": "complete_bash", "COMP_WORDS": "gpufleet l", "COMP_CWORD": "1"}
    res = runner.invoke(app, [], env=env, prog_name="gpufleet")
    assert res.stdout.split() == ["ls", "logs"]


# ------------------------------------------------------------------------------------ 17: start-up

HEAVY = ("sqlalchemy", "fastapi", "uvicorn", "numpy", "httpx", "pydantic", "gpufleet.sdk", "gpufleet.sim",
         "gpufleet.cost", "gpufleet.store", "gpufleet.wire", "gpufleet.scheduling")  # fmt: skip


def test_start_up_imports_nothing_heavy() -> None:
    """Every CLI call paid for every import, ~0.8 s before ``--help`` printed (observation 17): building
    the whole command tree (what ``--help`` and completion do) loads no heavy module."""
    code = (
        "import sys, json\n"
        "from typer.main import get_command\n"
        "from gpufleet.cli.main import app\n"
        "get_command(app)\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    loaded = json.loads(out)
    heavy = sorted(m for m in loaded if any(m == h or m.startswith(h + ".") for h in HEAVY))
    assert heavy == [], heavy


def test_role_choices_are_the_wire_roles() -> None:
    """``token create --role`` names the roles without importing the wire models at start-up."""
    from typing import get_args

    from gpufleet.cli.admin import RoleName
    from gpufleet.wire import Role

    assert set(get_args(RoleName)) == {r.value for r in Role}


# --------------------------------------------------------------------------------- exit codes, docs


def test_exit_codes_are_one_table_documented_everywhere() -> None:
    """Every command maps an error family to the same code, and the codes are listed in the help,
    in render.py's docstring and in the README's CLI section."""
    from gpufleet.errors import ConfigError, RegistryError, StoreError

    codes = {v for k, v in vars(render).items() if k.startswith("EXIT_") and isinstance(v, int)} | {130}
    assert codes == {0, 1, 2, 3, 4, 5, 6, 7, 8, 130}
    doc = render.__doc__ or ""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    cli_section = readme[readme.index("### CLI") :]
    cli_section = cli_section[: cli_section.index("\n## ")]
    for code in codes:
        assert re.search(rf"^{code}\s", doc, re.M), code
        assert re.search(rf"\|\s*`?{code}`?\s*\|", cli_section), code
        assert f"{code} " in render.EXIT_CODES_EPILOG, code
    assert render.exit_code_for(RegistryError("unknown placement policy 'x'")) == 2
    assert render.exit_code_for(ConfigError("bad")) == 2
    assert render.exit_code_for(StoreError("down")) == 5
    # local commands use the same table as the API ones (bad input is 2 everywhere)
    assert run("simulate", "--placement", "magic", "--limit", "5").exit_code == 2
    assert run("experiment", "fragmentation", "--policy", "nope").exit_code == 2
    assert run("whatif", "--change", "nonsense").exit_code == 2


# --------------------------------------------------------------------- 18: experiment's trace specs


def test_experiment_takes_traces_as_simulate_does() -> None:
    """``experiment fragmentation -t openb:cpu050`` failed with "file not found" though ``simulate
    --trace openb:cpu050`` works (observation 18): both read ``--trace`` with one function."""
    from gpufleet.io.traces import openb_variant

    assert openb_variant("openb") == "default" and openb_variant("openb:cpu050") == "cpu050"
    assert openb_variant("synthetic:1") is None and openb_variant("pods.csv") is None
    res = run("experiment", "fragmentation", "-t", "openb:cpu050", "-p", "bestfit", "--seeds", "42", "--json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["trace"] == "cpu050"
    # a variant that is not packaged: the same clear error from both commands, naming the packaged ones
    for argv in (["experiment", "fragmentation", "-t", "openb:cpu100"], ["simulate", "--trace", "openb:cpu100"]):
        res = run(*argv)
        assert res.exit_code == 2, res.output
        assert "unknown openb trace 'cpu100'" in res.stderr and "cpu050" in res.stderr, res.stderr
