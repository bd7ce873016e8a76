"""The examples/ folder: each example runs, parses or validates as its README says.

- ``pytorch_train_checkpoint.py`` really trains (on the CPU, skipped without torch), is stopped with
  SIGTERM the way gpufleet stops a job, and resumes from its checkpoint in gpufleet's checkpoint
  folder to the same weights as a run that was never stopped;
- ``ray_job.yaml``: a RayJob whose GPU workers wait for gpufleet (``schedulerName: gpufleet``) with
  the cost labels and limit gpufleet reads from pods (the same parser the adoption uses), and whose
  pod templates pass ``kubernetes-validate --strict`` as Pods;
- ``kubeflow_pipeline.py``: compiled with kfp when kfp and kfp-kubernetes are installed (each task's
  pod metadata carries the cost labels); otherwise the YAML it documents is checked.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from gpufleet.cost.forecast import parse_progress_file
from gpufleet.k8s.adapter.pods import pod_facts
from gpufleet.k8s.vocabulary import ANNOTATION_COST_LIMIT, ANNOTATION_GANG_SIZE
from tests.support.paths import REPO

ROOT = REPO
EXAMPLES = ROOT / "examples"
TRAIN = EXAMPLES / "pytorch_train_checkpoint.py"
COST_LABELS = ("team", "project", "experiment-id", "cost-center")
K8S_VERSIONS = ("1.29.0", "1.33.0")


def test_the_readme_names_every_example() -> None:
    readme = (EXAMPLES / "README.md").read_text(encoding="utf-8")
    for path in sorted(EXAMPLES.iterdir()):
        if path.is_file() and path.name != "README.md":
            assert f"`{path.name}`" in readme, path.name


# -- PyTorch -----------------------------------------------------------------------------------------


def _train(tmp: Path, name: str, ckpt: Path, *extra: str) -> dict[str, Any]:
    out = tmp / f"{name}.json"
    env = dict(os.environ, GPUFLEET_CHECKPOINT_DIR=str(ckpt), GPUFLEET_PROGRESS_FILE=str(tmp / f"{name}.jsonl"))
    env.pop("MLFLOW_RUN_ID", None)
    proc = subprocess.run(
        [sys.executable, str(TRAIN), "--steps", "300", "--output", str(out), *extra],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result: dict[str, Any] = json.loads(out.read_text())
    return result


@pytest.mark.slow
def test_pytorch_example_resumes_from_its_checkpoint_after_sigterm(tmp_path: Path) -> None:
    pytest.importorskip("torch", reason="the PyTorch example needs torch")
    plain = _train(tmp_path, "plain", tmp_path / "plain-ckpt")
    assert plain["steps"] == 300 and plain["resumed_from"] == 0 and plain["device"] == "cpu"
    assert plain["accuracy"] > 0.6  # it learned (chance is 0.5)
    reports = parse_progress_file((tmp_path / "plain.jsonl").read_text(), source="progress")
    assert [r.step for r in reports][-1] == 300 and "accuracy" in reports[-1].metrics

    ckpt = tmp_path / "ckpt"
    env = dict(os.environ, GPUFLEET_CHECKPOINT_DIR=str(ckpt), GPUFLEET_RESTART_COUNT="0")
    env.pop("MLFLOW_RUN_ID", None)
    cmd = [sys.executable, str(TRAIN), "--steps", "300", "--sleep-per-step", "0.01"]
    # its own process group, signalled as a group: what gpufleet's shim does on preemption
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert proc.stdout is not None
    for line in proc.stdout:  # between two periodic checkpoints (every 50 steps)
        if line.startswith("step 125 "):
            os.killpg(proc.pid, signal.SIGTERM)
            break
    rest = proc.stdout.read()
    assert proc.wait(timeout=60) == 143, rest
    assert "SIGTERM: checkpointed at step" in rest
    stopped_at = int(rest.split("checkpointed at step ")[1].split(",")[0])
    assert 125 <= stopped_at < 300 and (ckpt / "checkpoint.pt").exists()

    resumed = _train(tmp_path, "resumed", ckpt)
    assert resumed["resumed_from"] == stopped_at
    assert (resumed["weights_sha256"], resumed["accuracy"], resumed["steps"]) == (
        plain["weights_sha256"],
        plain["accuracy"],
        plain["steps"],
    )
    assert not list(ckpt.glob(".*.tmp"))  # atomic saves leave nothing behind


# -- Ray --------------------------------------------------------------------------------------------


def _ray_job() -> dict[str, Any]:
    docs = [d for d in yaml.safe_load_all((EXAMPLES / "ray_job.yaml").read_text(encoding="utf-8")) if d]
    (job,) = [d for d in docs if d["kind"] == "RayJob"]
    return job  # type: ignore[no-any-return]


def _as_pod(template: dict[str, Any], name: str, owner: str = "RayCluster") -> dict[str, Any]:
    """A pod the template makes, as the API server would hold it while it waits for a scheduler."""
    meta = dict(template.get("metadata") or {})
    meta.update(name=name, namespace="team-vision", uid=f"uid-{name}")
    ref = {"apiVersion": "ray.io/v1", "kind": owner, "name": "resnet", "uid": "rc-1", "controller": True}
    meta["ownerReferences"] = [ref]
    status = {"phase": "Pending"}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": template["spec"], "status": status}


def test_ray_job_workers_wait_for_gpufleet_with_the_cost_labels() -> None:
    job = _ray_job()
    assert job["apiVersion"] == "ray.io/v1"
    spec = job["spec"]
    assert spec["entrypoint"] and spec["shutdownAfterJobFinishes"] is True
    cluster = spec["rayClusterSpec"]
    (workers,) = cluster["workerGroupSpecs"]
    assert workers["replicas"] == workers["minReplicas"] == workers["maxReplicas"]  # a fixed-size gang
    assert not cluster.get("enableInTreeAutoscaling", False)

    template = workers["template"]
    assert template["spec"]["schedulerName"] == "gpufleet"
    labels = template["metadata"]["labels"]
    assert all(labels.get(k) for k in COST_LABELS)
    annotations = template["metadata"]["annotations"]
    assert int(annotations[ANNOTATION_GANG_SIZE]) == workers["replicas"]

    facts = [pod_facts(_as_pod(template, f"resnet-gpu-worker-{i}")) for i in range(workers["replicas"])]
    for f in facts:  # what gpufleet's adoption reads from each worker pod
        assert f.scheduler == "gpufleet" and f.gpu_count == 1 and f.gpu_resource == "nvidia.com/gpu"
        assert (f.team, f.project, f.experiment, f.cost_center) == tuple(labels[k] for k in COST_LABELS)
        assert f.cost_limit_usd == float(annotations[ANNOTATION_COST_LIMIT]) > 0
        assert f.gang_size == workers["replicas"] and f.owner.kind == "RayCluster"
        assert f.priority_class == "gpufleet-normal"

    head = cluster["headGroupSpec"]["template"]
    assert head["spec"].get("schedulerName", "default-scheduler") == "default-scheduler"  # CPU only: not gpufleet's
    assert all(head["metadata"]["labels"].get(k) == labels[k] for k in COST_LABELS)
    head_facts = pod_facts(_as_pod(head, "resnet-head"))
    assert head_facts.gpu_count == 0


@pytest.mark.parametrize("group", ["head", "worker"])
def test_ray_job_pod_templates_pass_kubernetes_validate(group: str) -> None:
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    cluster = _ray_job()["spec"]["rayClusterSpec"]
    template = cluster["headGroupSpec"]["template"] if group == "head" else cluster["workerGroupSpecs"][0]["template"]
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"resnet-{group}", **template.get("metadata", {})}}
    pod["spec"] = template["spec"]
    for version in K8S_VERSIONS:
        kubernetes_validate.validate(pod, version, strict=True)


# -- Kubeflow Pipelines -------------------------------------------------------------------------------


def _load_kfp_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("kubeflow_pipeline_example", EXAMPLES / "kubeflow_pipeline.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # kfp is imported only when the pipeline is built
    return module


def _kfp_available() -> bool:
    return all(importlib.util.find_spec(m) is not None for m in ("kfp", "kfp.kubernetes"))


def test_kubeflow_example_imports_without_kfp_and_documents_its_pod_metadata() -> None:
    ast.parse((EXAMPLES / "kubeflow_pipeline.py").read_text(encoding="utf-8"))
    example = _load_kfp_example()
    documented = yaml.safe_load(example.EXPECTED_POD_METADATA)
    assert set(documented) == set(example.TASKS)
    for task in example.TASKS:
        meta = documented[task]
        assert {k: meta["labels"][k] for k in COST_LABELS} == example.COST_LABELS
        assert meta["annotations"] == {ANNOTATION_COST_LIMIT: example.COST_LIMIT_USD}
    argo = yaml.safe_load(example.ARGO_WORKFLOW_DEFAULTS)
    assert argo["kind"] == "ConfigMap" and yaml.safe_load(argo["data"]["workflowDefaults"])["spec"] == {
        "schedulerName": "gpufleet"
    }


@pytest.mark.skipif(not _kfp_available(), reason="kfp and kfp-kubernetes are not installed")
def test_kubeflow_pipeline_compiles_with_the_cost_labels_on_every_task(tmp_path: Path) -> None:
    example = _load_kfp_example()
    out = tmp_path / "pipeline.yaml"
    assert example.main([str(out)]) == 0
    docs = list(yaml.safe_load_all(out.read_text(encoding="utf-8")))
    platform = next(d for d in docs if "platforms" in d)["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    got = {name.removeprefix("exec-"): executor["podMetadata"] for name, executor in platform.items()}
    assert got == yaml.safe_load(example.EXPECTED_POD_METADATA)
    ir = docs[0]
    train = ir["deploymentSpec"]["executors"]["exec-train"]["container"]["resources"]
    assert train["accelerator"]["resourceType"] == "nvidia.com/gpu" and int(train["accelerator"]["resourceCount"]) == 1
