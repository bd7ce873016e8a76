"""MLflow logging (optional: the ``mlflow`` extra, ``mlflow-skinny`` suffices).

Each measured configuration becomes one run of the experiment (``gpufleet-inference`` unless
named): params ``batch``, ``precision``, ``device`` (and ``device_name``, ``threads``, ``seed``,
``dataset``), metrics ``throughput``, ``p50_ms``, ``p99_ms``, ``accuracy``, ``usd_per_1k`` (and
``cpu_fraction``), tags for the challenge's step and status. Runs go through an
``MlflowClient(tracking_uri=...)``, so nothing global (``mlflow.set_tracking_uri``) is changed.

A ``file:`` URI is MLflow's file store. MLflow 3.x keeps it in maintenance mode and refuses it
unless ``MLFLOW_ALLOW_FILE_STORE=true``; since the user named a file store explicitly, that
variable is set for the duration of the logging (and restored). Any other URI (``sqlite:///...``,
``http://...``) is passed through unchanged.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import time
from collections.abc import Iterator
from typing import Any

from gpufleet.experiments.inference.run import InferenceResult

DEFAULT_EXPERIMENT = "gpufleet-inference"


def available() -> bool:
    try:
        importlib.import_module("mlflow.tracking")
    except ImportError:
        return False
    return True


@contextlib.contextmanager
def _file_store_allowed(uri: str) -> Iterator[None]:
    key = "MLFLOW_ALLOW_FILE_STORE"
    old = os.environ.get(key)
    if uri.startswith("file:") and old is None:
        os.environ[key] = "true"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(key, None)


def log_runs(res: InferenceResult, uri: str, experiment: str = DEFAULT_EXPERIMENT) -> list[str]:
    """Log each measured configuration as a run; the run ids, in grid order."""
    tracking = importlib.import_module("mlflow.tracking")
    entities = importlib.import_module("mlflow.entities")
    steps = {(s.device, s.batch, s.precision): s for s in res.scenario.steps if s.kind == "measured"}
    ids: list[str] = []
    with _file_store_allowed(uri):
        client: Any = tracking.MlflowClient(tracking_uri=uri)
        found = client.get_experiment_by_name(experiment)
        exp_id = found.experiment_id if found is not None else client.create_experiment(experiment)
        for m in [*res.grid, *res.extra]:
            step = steps.get((m.device, m.batch, m.precision))
            tags = {"gpufleet.experiment": "inference", "device_kind": res.device.kind}
            if step is not None:
                tags |= {"challenge_step": step.name, "challenge_status": step.status}
            run = client.create_run(exp_id, run_name=f"{m.device}-b{m.batch}-{m.precision}", tags=tags)
            rid = run.info.run_id
            params = {
                "batch": m.batch,
                "precision": m.precision,
                "device": m.device,
                "device_name": m.device_name,
                "threads": m.threads,
                "seed": res.trained.seed,
                "dataset": res.trained.data.name,
            }
            metrics = {
                "throughput": m.throughput,
                "p50_ms": m.p50_ms,
                "p99_ms": m.p99_ms,
                "accuracy": m.accuracy,
                "usd_per_1k": m.usd_per_1k,
                "cpu_fraction": m.cpu_fraction,
            }
            now_ms = int(time.time() * 1000)
            client.log_batch(
                rid,
                params=[entities.Param(k, str(v)) for k, v in params.items()],
                metrics=[entities.Metric(k, float(v), now_ms, 0) for k, v in metrics.items() if v is not None],
            )
            client.set_terminated(rid)
            ids.append(rid)
    return ids


def read_runs(uri: str, experiment: str = DEFAULT_EXPERIMENT) -> list[dict[str, Any]]:
    """The runs of ``experiment`` as {run_name, params, metrics} (for checks and tests)."""
    tracking = importlib.import_module("mlflow.tracking")
    with _file_store_allowed(uri):
        client: Any = tracking.MlflowClient(tracking_uri=uri)
        found = client.get_experiment_by_name(experiment)
        if found is None:
            return []
        runs = client.search_runs([found.experiment_id], max_results=1000)
        return [
            {"run_name": r.info.run_name, "params": dict(r.data.params), "metrics": dict(r.data.metrics)} for r in runs
        ]
