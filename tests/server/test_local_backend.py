"""The local backend with real processes: environment, exits, logs, stops, timeouts and crash
recovery (a controller abandoned or SIGKILLed mid-run, a shim SIGKILLed) — a run never starts twice
and its end is never lost."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gpufleet.backends import shim
from gpufleet.backends.accounts import AccountPolicy
from gpufleet.backends.base import (
    Backend,
    BackendEvent,
    Capability,
    EventKind,
    LaunchRequest,
    RecoveredState,
)
from gpufleet.backends.local import LocalBackend, kill_stale
from gpufleet.errors import BackendError, ConfigError, InputError
from gpufleet.model.job import PodPlacement
from gpufleet.model.node import SharingMode
from tests.support.paths import REPO

NODE = "n1"
MakeBackend = Callable[..., LocalBackend]

SINGLE_USER = AccountPolicy(jobs_as_server=True)  # CI runs as root: jobs run as the test's own user


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    return tmp_path / "state"


@pytest.fixture
def make_backend(state_dir: Path) -> Iterator[MakeBackend]:
    """Backends on one state dir; teardown kills whatever a test left running."""

    def make(**kw: object) -> LocalBackend:
        kw.setdefault("node_name", NODE)
        kw.setdefault("gpus", "2xA100-80GB")
        kw.setdefault("use_nvml", False)
        kw.setdefault("policy", SINGLE_USER)
        kw.setdefault("job_root", state_dir.parent / "jobs")
        return LocalBackend(state_dir, **kw)  # type: ignore[arg-type]

    yield make
    runs = state_dir / "runs"
    for run_dir in runs.glob("*/*") if runs.exists() else []:
        info = shim.read_json(run_dir / shim.PID) or {}
        if shim.is_same_process(info.get("shim_pid"), info.get("shim_start")):
            os.kill(info["shim_pid"], signal.SIGKILL)
        kill_stale(run_dir)


@pytest.fixture
def backend(make_backend: MakeBackend) -> LocalBackend:
    return make_backend()


def req(job_id: str, script: str, run: int = 1, gpus: tuple[int, ...] = (), **kw: object) -> LaunchRequest:
    placement = (PodPlacement(NODE, gpus, **kw.pop("pod", {})),) if gpus else ()  # type: ignore[arg-type]
    return LaunchRequest(job_id, run, ["sh", "-c", script], placement, **kw)  # type: ignore[arg-type]


def wait_events(b: LocalBackend, n: int = 1, timeout: float = 5.0) -> list[BackendEvent]:
    """Poll like the controller does until ``n`` events arrived."""
    events: list[BackendEvent] = []
    deadline = time.time() + timeout
    while len(events) < n and time.time() < deadline:
        events += b.poll()
        time.sleep(0.02)
    assert len(events) >= n, f"expected {n} events, got {events}"
    return events


def wait_file(path: Path, timeout: float = 5.0) -> str:
    """The file's text once it exists and is complete (ends with a newline or a JSON brace)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if path.exists() and path.read_text().endswith(("\n", "}")):
            return path.read_text()
        time.sleep(0.01)
    raise AssertionError(f"{path} never appeared")


def gone(pid: int) -> bool:
    return shim.process_start_ticks(pid) is None


def wait_gone(pid: int, timeout: float = 3.0) -> bool:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if gone(pid):
            return True
        time.sleep(0.01)
    return False


def logged_env(b: LocalBackend, job_id: str) -> dict[str, str]:
    lines = b.log_path(job_id).read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if "=" in line and not line.startswith("==="))


# ---- contract, inventory, capabilities ----------------------------------------------------------


def test_is_a_backend_with_declared_inventory(make_backend: MakeBackend) -> None:
    b = make_backend(cpu_milli=4000, memory_mib=8192)
    assert isinstance(b, Backend)
    [node] = b.inventory()
    assert (node.name, node.gpu_model, node.gpu_count) == (NODE, "A100-80GB", 2)
    assert (node.cpu_milli, node.memory_mib, node.pool, node.sharing) == (4000, 8192, "local", SharingMode.SHARED)
    caps = b.capabilities
    assert Capability.FRACTIONAL in caps and Capability.PREEMPTION in caps and Capability.MIG not in caps
    assert caps.missing[Capability.SPOT] == "a single server has no spot market"
    assert caps.missing[Capability.MULTI_NODE] == "one server"
    assert caps.missing[Capability.AUTOSCALING] == "a single server cannot add nodes"
    assert "MIG" in caps.missing[Capability.MIG]


def test_no_driver_and_no_declaration_means_no_gpus(state_dir: Path) -> None:
    b = LocalBackend(state_dir, policy=SINGLE_USER)  # NVML is tried; this machine has no driver (or a real one)
    [node] = b.inventory()
    assert node.cpu_milli >= 1000 and node.memory_mib > 0 and node.name
    if b.gpu_source == "none":
        assert (node.gpu_count, node.gpu_model) == (0, "")
        assert b.telemetry() == []
    b.close()


def test_mig_declared_node(make_backend: MakeBackend) -> None:
    b = make_backend(gpus="1xH100:mig")
    [node] = b.inventory()
    assert (node.gpu_model, node.sharing) == ("H100-80GB", SharingMode.MIG)
    assert Capability.MIG in b.capabilities


def test_bad_declared_spec_names_field(state_dir: Path) -> None:
    with pytest.raises(ConfigError, match=r"'gpus'.*'A100-80G'"):
        LocalBackend(state_dir, gpus="8xA100-80G", use_nvml=False)


# ---- environment --------------------------------------------------------------------------------


def test_whole_gpu_env(backend: LocalBackend, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUFLEET_DATABASE_URL", "secret")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "7")
    r = req("env-a", "env", gpus=(0, 1), env={"MY_VAR": "x"}, restart_count=2)
    backend.launch(r)
    [ev] = wait_events(backend)
    assert ev.kind is EventKind.SUCCEEDED
    env = logged_env(backend, "env-a")
    assert env["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert (env["GPUFLEET_JOB_ID"], env["GPUFLEET_RUN"], env["GPUFLEET_RESTART_COUNT"]) == ("env-a", "1", "2")
    assert env["MY_VAR"] == "x"
    assert Path(env["GPUFLEET_CHECKPOINT_DIR"]).is_dir()
    assert "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE" not in env
    assert "GPUFLEET_DATABASE_URL" not in env  # the server's settings (secrets) are not inherited


@pytest.mark.parametrize(
    ("gpus_spec", "pod", "expected"),
    [
        pytest.param(
            "2xA100-80GB",
            {"milli": 250},
            {"CUDA_VISIBLE_DEVICES": "1", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "25"},
            id="fraction",
        ),
        pytest.param(
            "2xA100-80GB", {"milli": 333}, {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "34"}, id="fraction-rounds-up"
        ),
        pytest.param(
            "2xA100-80GB:mig",
            {"milli": 143, "mig_mask": 0b1000000},
            {"CUDA_VISIBLE_DEVICES": "1", "GPUFLEET_MIG_PROFILE": "1g.10gb", "GPUFLEET_MIG_MASK": "64"},
            id="mig-1g",
        ),
        pytest.param(
            "2xA100-80GB:mig", {"milli": 286, "mig_mask": 0b1100}, {"GPUFLEET_MIG_PROFILE": "2g.20gb"}, id="mig-2g"
        ),
        pytest.param(
            "2xA100-80GB:mig",
            {"milli": 143, "mig_mask": 0b1100},
            {"GPUFLEET_MIG_PROFILE": "1g.20gb"},
            id="mig-1g-2slices",
        ),
    ],
)
def test_shared_gpu_env(
    make_backend: MakeBackend, gpus_spec: str, pod: dict[str, int], expected: dict[str, str]
) -> None:
    b = make_backend(gpus=gpus_spec)
    b.launch(req("env-s", "env", gpus=(1,), pod=pod))
    wait_events(b)
    env = logged_env(b, "env-s")
    assert {k: env.get(k) for k in expected} == expected


def test_cpu_only_job_sees_no_gpu(backend: LocalBackend, tmp_path: Path) -> None:
    ckpt = tmp_path / "my-ckpt"
    backend.launch(req("cpu", "env", checkpoint_dir=str(ckpt)))
    wait_events(backend)
    env = logged_env(backend, "cpu")
    assert env["CUDA_VISIBLE_DEVICES"] == ""
    assert env["GPUFLEET_CHECKPOINT_DIR"] == str(ckpt) and ckpt.is_dir()


@pytest.mark.parametrize(
    ("gpus_spec", "placement", "match"),
    [
        ("2xA100-80GB", (PodPlacement(NODE, (2,)),), "GPU index 2 does not exist"),
        ("2xA100-80GB", (PodPlacement("other", (0,)),), "placed on node 'other'"),
        ("2xA100-80GB", (PodPlacement(NODE, (0,)), PodPlacement(NODE, (1,))), "one pod per job"),
        ("2xA100-80GB", (PodPlacement(NODE, (0,), mig_mask=1),), "not in MIG mode"),
        ("2xA100-80GB:mig", (PodPlacement(NODE, (0,)),), "needs a MIG slice"),
        ("2xA100-80GB:mig", (PodPlacement(NODE, (0,), mig_mask=0b101),), "not a valid placement"),
        ("2xA100-80GB", (PodPlacement(NODE, (0, 1), milli=500),), "exactly one GPU"),
    ],
)
def test_bad_placement_is_a_backend_error(
    make_backend: MakeBackend, gpus_spec: str, placement: tuple[PodPlacement, ...], match: str
) -> None:
    b = make_backend(gpus=gpus_spec)
    with pytest.raises(BackendError, match=match):
        b.launch(LaunchRequest("bad", 1, ["true"], placement))
    assert not (b.state_dir / "runs" / "bad" / "1" / shim.SPEC).exists()  # nothing was started


def test_bad_job_id(backend: LocalBackend) -> None:
    with pytest.raises(InputError, match="job_id"):
        backend.launch(LaunchRequest("../etc", 1, ["true"], ()))


# ---- exits, logs, timeouts ----------------------------------------------------------------------


def test_exit_codes_and_signals_become_events(backend: LocalBackend) -> None:
    backend.launch(req("ok", "exit 0"))
    backend.launch(req("bad", "exit 3"))
    backend.launch(req("sig", "kill -KILL $$"))
    backend.launch(LaunchRequest("noexec", 1, ["/nonexistent/binary"], ()))
    events = {e.job_id: e for e in wait_events(backend, 4)}
    assert events["ok"].kind is EventKind.SUCCEEDED and events["ok"].exit_code == 0
    assert (events["bad"].kind, events["bad"].exit_code, events["bad"].signal) == (EventKind.FAILED, 3, None)
    assert (events["sig"].kind, events["sig"].exit_code, events["sig"].signal) == (EventKind.FAILED, None, 9)
    assert (events["noexec"].kind, events["noexec"].exit_code) == (EventKind.FAILED, 127)
    for e in events.values():
        assert e.started_at is not None and e.ended_at is not None and e.started_at <= e.ended_at
        assert e.node == NODE
    assert backend.poll() == []  # each end is reported once


def test_log_has_header_footer_and_appends_across_runs(backend: LocalBackend) -> None:
    backend.launch(req("logged", "echo first; echo oops >&2"))
    wait_events(backend)
    backend.launch(req("logged", "echo second; exit 4", run=2))
    wait_events(backend)
    lines = backend.log_path("logged").read_text().splitlines()
    assert lines[0].startswith("=== gpufleet run 1 started ") and lines[0].endswith(" ===")
    assert lines[1:3] == ["first", "oops"]
    assert lines[3].startswith("=== gpufleet run 1 ended ") and "succeeded (exit code 0" in lines[3]
    assert lines[4].startswith("=== gpufleet run 2 started ")
    assert lines[5] == "second"
    assert "failed (exit code 4" in lines[6]


def test_max_runtime_times_out(backend: LocalBackend) -> None:
    t0 = time.time()
    backend.launch(req("slow", "sleep 10", max_runtime_s=0.3, grace_s=0.2))
    [ev] = wait_events(backend)
    assert ev.kind is EventKind.TIMED_OUT and ev.signal == signal.SIGTERM
    assert ev.started_at is not None and ev.ended_at is not None
    assert 0.3 <= ev.ended_at - ev.started_at < 0.8
    assert time.time() - t0 < 2


# ---- stop ---------------------------------------------------------------------------------------


def test_graceful_stop_lets_the_job_checkpoint(backend: LocalBackend, tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    script = f"""trap 'echo saved > "$GPUFLEET_CHECKPOINT_DIR/ckpt"; exit 143' TERM
        echo yes > {ready}
        while true; do sleep 0.02; done"""
    backend.launch(req("graceful", script))
    wait_file(ready)
    backend.stop("graceful", 1, "preempted by job x", grace_s=5)
    [ev] = wait_events(backend)
    assert (ev.kind, ev.exit_code, ev.reason) == (EventKind.STOPPED, 143, "preempted by job x")
    assert (backend.job_root / "default" / "graceful" / "checkpoints" / "ckpt").read_text() == "saved\n"
    assert ev.ended_at is not None and ev.ended_at - ev.time < 0.01


def test_forced_stop_kills_after_grace(backend: LocalBackend, tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    backend.launch(req("stubborn", f"trap '' TERM; echo yes > {ready}; sleep 30"))
    wait_file(ready)
    t0 = time.time()
    backend.stop("stubborn", 1, "cancelled", grace_s=0.3)
    [ev] = wait_events(backend)
    assert (ev.kind, ev.signal, ev.reason) == (EventKind.STOPPED, signal.SIGKILL, "cancelled")
    assert ev.ended_at is not None and 0.25 <= ev.ended_at - t0 < 1.5


def test_stop_is_idempotent_and_stop_of_unknown_is_a_noop(backend: LocalBackend) -> None:
    backend.stop("never-launched", 1, "x")
    backend.launch(req("quick", "exit 0"))
    wait_events(backend)
    backend.stop("quick", 1, "too late")  # ended: no-op
    assert not (backend.run_dir("quick", 1) / shim.STOP).exists()


# ---- idempotency --------------------------------------------------------------------------------


def test_launch_is_idempotent(backend: LocalBackend, tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    r = req("once", f"echo ran >> {marker}; sleep 0.3")
    h1 = backend.launch(r)
    h2 = backend.launch(r)
    assert h1 == h2 and h1.pid > 0
    [ev] = wait_events(backend)
    assert ev.kind is EventKind.SUCCEEDED
    h3 = backend.launch(r)  # ended and reported: a handle, no second process, no second event
    assert h3.pid == h1.pid
    time.sleep(0.1)
    assert backend.poll() == []
    assert marker.read_text() == "ran\n"


def test_no_zombie_shims(backend: LocalBackend) -> None:
    backend.launch(req("z", "exit 0"))
    wait_events(backend)
    info = shim.read_json(backend.run_dir("z", 1) / shim.PID)
    assert info is not None
    proc = Path(f"/proc/{info['shim_pid']}")
    deadline = time.time() + 3
    while proc.exists() and time.time() < deadline:  # a zombie still has a /proc entry
        backend.poll()  # the controller keeps polling; poll reaps finished shims
        time.sleep(0.01)
    assert not proc.exists()


def test_close_keeps_jobs_running(make_backend: MakeBackend, tmp_path: Path) -> None:
    a = make_backend()
    h = a.launch(req("survivor", "sleep 0.4"))
    a.close()
    assert not gone(h.pid)
    b = make_backend()
    rec = b.recover("survivor", 1)
    assert rec.state is RecoveredState.RUNNING and rec.handle is not None and rec.handle.pid == h.pid
    [ev] = wait_events(b)
    assert ev.kind is EventKind.SUCCEEDED


# ---- crash recovery -----------------------------------------------------------------------------

# The job's own view of its start and end (``date`` is cheap, so the stamps are close to exec/exit).
TIMED_JOB = "date +%s.%N >> {stamps}; sleep {sleep}; date +%s.%N >> {stamps}"


def job_times(path: Path) -> tuple[float, float]:
    start, end = (float(x) for x in path.read_text().split())
    return start, end


def test_abandoned_controller_run_is_adopted_and_its_true_times_reported(
    make_backend: MakeBackend, tmp_path: Path
) -> None:
    stamps = tmp_path / "stamps"
    a = make_backend()
    h = a.launch(req("crash", TIMED_JOB.format(stamps=stamps, sleep=0.6)))
    del a  # abandoned: no close, nothing killed
    b = make_backend()
    rec = b.recover("crash", 1)
    assert rec.state is RecoveredState.RUNNING and rec.handle is not None
    assert (rec.handle.pid, rec.handle.started_at) == (h.pid, h.started_at)
    [ev] = wait_events(b)
    assert ev.kind is EventKind.SUCCEEDED and ev.started_at is not None and ev.ended_at is not None
    start, end = job_times(stamps)
    assert abs(ev.started_at - start) < 0.5 and abs(ev.ended_at - end) < 0.5
    assert b.poll() == []


CONTROLLER = """
import json, sys
from pathlib import Path
from gpufleet.backends.local import LocalBackend
from gpufleet.backends.base import LaunchRequest
from gpufleet.backends.accounts import AccountPolicy
b = LocalBackend(Path(sys.argv[1]), node_name="n1", gpus="0", use_nvml=False, policy=AccountPolicy(True))
for job_id, script in json.loads(sys.argv[2]).items():
    b.launch(LaunchRequest(job_id, 1, ["sh", "-c", script], ()))
print("launched", flush=True)
sys.stdin.read()  # wait to be killed
"""


def test_sigkilled_controller_loses_nothing(make_backend: MakeBackend, state_dir: Path, tmp_path: Path) -> None:
    short, long_, marker = tmp_path / "short", tmp_path / "long", tmp_path / "marker"
    jobs = {
        "short": f"echo ran >> {marker}; " + TIMED_JOB.format(stamps=short, sleep=0.05),
        "long": f"echo ran >> {marker}; " + TIMED_JOB.format(stamps=long_, sleep=0.8),
    }
    ctl = subprocess.Popen(
        [sys.executable, "-c", CONTROLLER, str(state_dir), json.dumps(jobs)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert ctl.stdout is not None and ctl.stdout.readline() == "launched\n"
    ctl.kill()  # SIGKILL: the controller dies with both runs in flight
    ctl.wait()
    wait_file(state_dir / "runs" / "short" / "1" / shim.STATUS, timeout=5)  # ended while no one watched
    b = make_backend(gpus="0")
    ended = b.recover("short", 1)
    assert ended.state is RecoveredState.ENDED and ended.event is not None
    assert ended.event.kind is EventKind.SUCCEEDED
    start, end = job_times(short)
    assert ended.event.started_at is not None and abs(ended.event.started_at - start) < 0.5
    assert ended.event.ended_at is not None and abs(ended.event.ended_at - end) < 0.5
    running = b.recover("long", 1)
    assert running.state is RecoveredState.RUNNING
    # A confused controller launching again must not start a second copy of either run.
    b.launch(LaunchRequest("long", 1, ["sh", "-c", jobs["long"]], ()))
    b.launch(LaunchRequest("short", 1, ["sh", "-c", jobs["short"]], ()))
    [ev] = wait_events(b)
    assert (ev.job_id, ev.kind) == ("long", EventKind.SUCCEEDED)
    start, end = job_times(long_)
    assert ev.started_at is not None and abs(ev.started_at - start) < 0.5
    assert ev.ended_at is not None and abs(ev.ended_at - end) < 0.5
    assert b.poll() == []
    assert marker.read_text() == "ran\nran\n"  # each job ran exactly once


ORPHAN_JOB = "echo ran >> {marker}; sleep 30 & echo $! > {grandchild}; echo $$ > {child}; wait"


def _launch_orphanable(b: LocalBackend, tmp_path: Path, job_id: str) -> tuple[int, int, int]:
    files = {k: tmp_path / f"{job_id}-{k}" for k in ("marker", "grandchild", "child")}
    b.launch(req(job_id, ORPHAN_JOB.format(**files)))
    child, grandchild = int(wait_file(files["child"])), int(wait_file(files["grandchild"]))
    info = shim.read_json(b.run_dir(job_id, 1) / shim.PID)
    assert info is not None
    os.kill(info["shim_pid"], signal.SIGKILL)
    assert wait_gone(info["shim_pid"])
    assert not gone(child) and not gone(grandchild)  # orphaned, still running
    return child, grandchild, info["shim_pid"]


def test_killed_shim_recovers_as_absent_and_leaves_nothing_running(make_backend: MakeBackend, tmp_path: Path) -> None:
    a = make_backend()
    child, grandchild, _ = _launch_orphanable(a, tmp_path, "orphan")
    b = make_backend()
    rec = b.recover("orphan", 1)
    assert rec.state is RecoveredState.ABSENT
    assert wait_gone(child) and wait_gone(grandchild)
    # Launching the lost run again never re-runs it: poll says LOST instead.
    b.launch(req("orphan", f"echo again >> {tmp_path}/orphan-marker"))
    [ev] = wait_events(b)
    assert ev.kind is EventKind.LOST
    assert (tmp_path / "orphan-marker").read_text() == "ran\n"


def test_killed_shim_is_reported_lost_by_poll(backend: LocalBackend, tmp_path: Path) -> None:
    child, grandchild, _ = _launch_orphanable(backend, tmp_path, "lost")
    [ev] = wait_events(backend)
    assert (ev.kind, ev.job_id, ev.run) == (EventKind.LOST, "lost", 1)
    assert ev.started_at is not None
    assert wait_gone(child) and wait_gone(grandchild)


def test_recover_of_unknown_run_is_absent(backend: LocalBackend) -> None:
    assert backend.recover("nobody", 3).state is RecoveredState.ABSENT


def test_run_that_never_started_may_be_launched(backend: LocalBackend, tmp_path: Path) -> None:
    """A controller that died after writing spec.json but before spawning left no pid.json."""
    run_dir = backend.run_dir("half", 1)
    run_dir.mkdir(parents=True)
    shim.write_json_atomic(run_dir / shim.SPEC, {"job_id": "half"})
    assert backend.recover("half", 1).state is RecoveredState.ABSENT
    backend.launch(req("half", "exit 0"))
    [ev] = wait_events(backend)
    assert ev.kind is EventKind.SUCCEEDED


def test_stop_survives_controller_death(make_backend: MakeBackend, tmp_path: Path) -> None:
    """The shim enforces the grace period and SIGKILL itself once asked."""
    ready = tmp_path / "ready"
    a = make_backend()
    a.launch(req("stop-crash", f"trap '' TERM; echo yes > {ready}; sleep 30"))
    wait_file(ready)
    a.stop("stop-crash", 1, "preempted", grace_s=0.2)
    del a
    b = make_backend()
    rec = b.recover("stop-crash", 1)
    if rec.state is RecoveredState.RUNNING:
        [ev] = wait_events(b)
    else:
        assert rec.event is not None
        ev = rec.event
    assert (ev.kind, ev.signal, ev.reason) == (EventKind.STOPPED, signal.SIGKILL, "preempted")


def test_train_script_through_the_backend(backend: LocalBackend, tmp_path: Path) -> None:
    """Preempt the example trainer and resume it as run 2 from its checkpoint."""
    train = REPO / "examples" / "train.py"
    out = tmp_path / "result.json"
    cmd = [sys.executable, str(train), "--steps", "200", "--checkpoint-every", "20", "--sleep-per-step", "0.005"]
    cmd += ["--output", str(out)]
    backend.launch(LaunchRequest("train", 1, cmd, ()))
    log = backend.log_path("train")
    deadline = time.time() + 10
    while "step 30 " not in log.read_text() and time.time() < deadline:
        time.sleep(0.02)
    backend.stop("train", 1, "preempted", grace_s=5)
    [ev] = wait_events(backend, timeout=10)
    assert (ev.kind, ev.exit_code) == (EventKind.STOPPED, 143)
    backend.launch(LaunchRequest("train", 2, cmd, (), restart_count=1))
    [ev] = wait_events(backend, timeout=10)
    assert ev.kind is EventKind.SUCCEEDED
    result = json.loads(out.read_text())
    assert result["steps"] == 200 and result["resumed_from"] >= 30


def test_shim_refuses_a_started_run(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    shim.write_json_atomic(run_dir / shim.PID, {"shim_pid": 1})
    fd = os.open(run_dir / "lock", os.O_RDWR | os.O_CREAT)
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "gpufleet.backends.shim", str(run_dir), "--lock-fd", str(fd)],
            pass_fds=(fd,),
            capture_output=True,
            text=True,
            timeout=10,
        )
    finally:
        os.close(fd)
    assert proc.returncode == 3 and "refusing" in proc.stderr
