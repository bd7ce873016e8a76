#!/usr/bin/env python3
"""A Kubeflow Pipelines (v2) pipeline whose tasks carry gpufleet's cost labels.

Every task's pod gets the labels gpufleet attributes cost by (``team``, ``project``,
``experiment-id``, ``cost-center``) and the annotation ``gpufleet.io/cost-limit`` (the job's own
budget, in dollars) through kfp-kubernetes' ``add_pod_label`` / ``add_pod_annotation``; the training
task asks for one NVIDIA GPU. Compile it (needs ``pip install kfp kfp-kubernetes``)::

    python examples/kubeflow_pipeline.py pipeline.yaml

and upload ``pipeline.yaml`` in the KFP UI, or run it with ``kfp.Client().create_run_from_pipeline_package``.

What gpufleet needs besides the labels: pods reach gpufleet only with ``schedulerName: gpufleet``,
and KFP has no per-task setting for it. On KFP's Argo backend set it for every pod of the runs'
workflows in the workflow controller's defaults (:data:`ARGO_WORKFLOW_DEFAULTS`), or with a
mutating policy of your cluster (Kyverno, a MutatingAdmissionPolicy) on pods that carry the labels.
See examples/README.md for what gpufleet does with such pods today.

:data:`EXPECTED_POD_METADATA` is what the compiled pipeline's Kubernetes platform spec holds for each
task (tests/project/test_examples.py compiles the pipeline and compares, when kfp is installed).
"""

import sys  # no `from __future__ import annotations`: kfp reads the components' annotations as types
from typing import Any

COST_LABELS = {"team": "vision", "project": "resnet", "experiment-id": "lr-sweep-3", "cost-center": "cc-42"}
COST_LIMIT_USD = "250"  # dollars: gpufleet stops the job once it has cost this
TASKS = ("prepare-data", "train", "evaluate")

EXPECTED_POD_METADATA = """
prepare-data:
  labels: {team: vision, project: resnet, experiment-id: lr-sweep-3, cost-center: cc-42}
  annotations: {gpufleet.io/cost-limit: "250"}
train:
  labels: {team: vision, project: resnet, experiment-id: lr-sweep-3, cost-center: cc-42}
  annotations: {gpufleet.io/cost-limit: "250"}
evaluate:
  labels: {team: vision, project: resnet, experiment-id: lr-sweep-3, cost-center: cc-42}
  annotations: {gpufleet.io/cost-limit: "250"}
"""

# Argo Workflows (KFP's backend): every pod of every workflow asks for gpufleet. Merge into the
# workflow controller's ConfigMap (its name and namespace depend on how KFP was installed).
ARGO_WORKFLOW_DEFAULTS = """
apiVersion: v1
kind: ConfigMap
metadata:
  name: workflow-controller-configmap
  namespace: kubeflow
data:
  workflowDefaults: |
    spec:
      schedulerName: gpufleet
"""


def with_costs(task: Any) -> Any:
    """``task`` with gpufleet's cost labels and cost limit on its pod."""
    from kfp import kubernetes

    for key, value in COST_LABELS.items():
        kubernetes.add_pod_label(task, key, value)
    kubernetes.add_pod_annotation(task, "gpufleet.io/cost-limit", COST_LIMIT_USD)
    return task


def build_pipeline() -> Any:
    """The pipeline function (kfp is imported here, so that this file imports without it)."""
    from kfp import dsl

    @dsl.component(base_image="python:3.11-slim")
    def prepare_data(rows: int, data: dsl.Output[dsl.Dataset]) -> None:
        import random

        rng = random.Random(0)
        with open(data.path, "w") as f:
            for _ in range(rows):
                x = rng.uniform(-1, 1)
                f.write(f"{x},{int(x > 0)}\n")

    @dsl.component(base_image="pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime")
    def train(steps: int, data: dsl.Input[dsl.Dataset], model: dsl.Output[dsl.Model]) -> float:
        import torch

        with open(data.path) as f:
            rows = [line.split(",") for line in f]
        x = torch.tensor([[float(a)] for a, _ in rows])
        y = torch.tensor([float(b) for _, b in rows])
        device = "cuda" if torch.cuda.is_available() else "cpu"
        w = torch.zeros(1, device=device, requires_grad=True)
        opt = torch.optim.SGD([w], lr=0.5)
        for _ in range(steps):
            loss = torch.nn.functional.binary_cross_entropy_with_logits((x.to(device) * w).squeeze(1), y.to(device))
            opt.zero_grad()
            loss.backward()
            opt.step()
        torch.save(w.detach().cpu(), model.path)
        return float(loss)

    @dsl.component(base_image="python:3.11-slim")
    def evaluate(final_loss: float) -> str:
        return "ok" if final_loss < 0.6 else "underfit"

    @dsl.pipeline(name="resnet-lr-sweep-3", description="trains on a GPU; every pod carries gpufleet's cost labels")
    def pipeline(rows: int = 2000, steps: int = 200) -> None:
        data = with_costs(prepare_data(rows=rows))
        model = with_costs(train(steps=steps, data=data.outputs["data"]))
        model.set_accelerator_type("nvidia.com/gpu").set_accelerator_limit(1)
        model.set_cpu_request("2").set_memory_request("8G")
        with_costs(evaluate(final_loss=model.outputs["Output"]))

    return pipeline


def main(argv: list[str] | None = None) -> int:
    from kfp import compiler

    args = sys.argv[1:] if argv is None else argv
    out = args[0] if args else "kubeflow_pipeline.yaml"
    compiler.Compiler().compile(build_pipeline(), package_path=out)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
