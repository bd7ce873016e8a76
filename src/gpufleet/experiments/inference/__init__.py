"""``gpufleet experiment inference``: a real model served for inference on the devices present.

A small MLP is trained (seeded, seconds on a CPU) on scikit-learn's bundled 8×8 digits, then served
on the CPU (always) and on CUDA GPUs (when ``torch.cuda.is_available()``) at several batch sizes and
precisions; two workloads share one device; N replicas face an open-loop request rate. Every
configuration reports throughput, p50/p99 latency, held-out accuracy and the cost of 1,000
inferences priced from the catalog. The modules:

- :mod:`.model` — the data set, the model, training, precision variants (FP32/BF16/FP16/INT8).
- :mod:`.measure` — the devices, the closed-loop harness, worker processes, sharing.
- :mod:`.scaling` — the open-loop load generator against N replicas, and its queueing model.
- :mod:`.pricing` — $ per device-hour (the catalog for GPUs, a documented vCPU price for the CPU).
- :mod:`.scenario` — the cost optimization challenge (cumulative savings).
- :mod:`.run` — one call that runs it all (the CLI and the benchmark use it).
- :mod:`.report` — Markdown table and the plot (matplotlib when installed, else a hand-drawn SVG).
- :mod:`.tracking` — MLflow logging (optional).

Needs the ``inference`` extra (torch, scikit-learn); nothing here is imported by ``gpufleet`` at
start-up.
"""
