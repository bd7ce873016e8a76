"""Parsers for the openb traces (Alibaba GPU cluster trace 2023, as used by the FGD paper).

Source: the ``cluster-trace-gpu-v2023/csv`` folder of the public alibaba/clusterdata repository.
Cite: Weng et al., "Beware of Fragmentation: Scheduling GPU-Sharing Workloads with Fragmentation
Gradient Descent", USENIX ATC 2023. The CSVs ship as package data in ``gpufleet/data/openb``.

Two file kinds:

- node lists ``sn,cpu_milli,memory_mib,gpu,model`` (:func:`parse_openb_nodes`);
- pod lists ``name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,
  deletion_time,scheduled_time`` or, for the ``multigpu*`` files, only the first five columns
  (:func:`parse_openb_pods`).

Units: CPU in milli-cores, memory in MiB, GPU in milli-GPU per GPU, times in seconds.
openb model names (``V100M16``...) are mapped through :func:`canonical_gpu_name`; a ``gpu_spec``
constraint such as ``V100M16|V100M32`` is canonicalized the same way, so it matches node types.
Bad rows raise :class:`TraceError` naming the file, line and field; sizes, counts and times are
bounded by :mod:`gpufleet.sim.limits`.

The FGD paper's simulator (hkust-adsl/kubernetes-scheduler-simulator) runs every openb pod list
on the GPU-node list (1,213 nodes, 6,212 GPUs): :data:`DEFAULT_NODE_LIST`.

This module parses text; :mod:`gpufleet.io.traces` reads the packaged files and paths
(``load_openb_nodes``, ``load_openb_pods``, ``load_openb_trace``).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gpufleet.errors import TraceError
from gpufleet.model.gpu import MILLI, canonical_gpu_name
from gpufleet.model.job import GpuRequest, JobSpec
from gpufleet.model.node import Node, SharingMode
from gpufleet.sim.limits import (
    MAX_CPU_MILLI,
    MAX_GPUS_PER_NODE,
    MAX_GPUS_PER_POD,
    MAX_JOBS,
    MAX_MEMORY_MIB,
    MAX_NODES,
    time_problem,
)
from gpufleet.sim.traces.base import Trace, TraceJob

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
POD_COLUMNS = (
    "name",
    "cpu_milli",
    "memory_mib",
    "num_gpu",
    "gpu_milli",
    "gpu_spec",
    "qos",
    "pod_phase",
    "creation_time",
    "deletion_time",
    "scheduled_time",
)
POD_COLUMNS_SHORT = POD_COLUMNS[:5]

DEFAULT_NODE_LIST = "gpu_node"  # what the FGD paper's simulator used for every openb pod list
DEFAULT_POD_LIST = "default"
TRACE_NAMES = (
    "default",
    "cpu050",
    "cpu200",
    "gpushare40",
    "gpushare60",
    "gpuspec10",
    "gpuspec20",
    "multigpu20",
    "multigpu30",
)
DEFAULT_TEAM = "openb"


@dataclass(frozen=True, slots=True)
class OpenbNodes:
    """A node list as arrays (one entry per node, file order)."""

    source: str
    names: list[str]
    cpu_milli: IntArray
    memory_mib: IntArray
    gpu_count: IntArray
    model: list[str]  # canonical GPU model name; "" for CPU-only nodes

    def __len__(self) -> int:
        return len(self.names)

    @property
    def total_gpus(self) -> int:
        return int(self.gpu_count.sum())

    def to_nodes(self, sharing: SharingMode = SharingMode.SHARED) -> list[Node]:
        return [
            Node(
                name=self.names[i],
                gpu_model=self.model[i] if self.gpu_count[i] > 0 else "",
                gpu_count=int(self.gpu_count[i]),
                cpu_milli=int(self.cpu_milli[i]),
                memory_mib=int(self.memory_mib[i]),
                pool="openb",
                sharing=sharing,
            )
            for i in range(len(self))
        ]


@dataclass(frozen=True, slots=True)
class OpenbPods:
    """A pod list as arrays (one entry per pod, file order).

    ``gpu_milli`` is per GPU (1000 for whole GPUs, 0 for CPU-only pods); ``gpu_spec`` is the
    tuple of allowed canonical GPU models (empty: any). Times are NaN where the file has none.
    """

    source: str
    names: list[str]
    cpu_milli: IntArray
    memory_mib: IntArray
    num_gpu: IntArray
    gpu_milli: IntArray
    gpu_spec: list[tuple[str, ...]]
    gpu_spec_raw: list[str]  # the column as written (the FGD simulator keys typical pods on it)
    qos: list[str]
    creation_time: FloatArray
    deletion_time: FloatArray

    def __len__(self) -> int:
        return len(self.names)

    @property
    def total_gpu_milli(self) -> IntArray:
        return self.num_gpu * self.gpu_milli

    def spec(self, i: int, team: str | None = None) -> JobSpec:
        """The :class:`JobSpec` of pod ``i`` (team from ``qos`` unless ``team`` is given)."""
        n, m = int(self.num_gpu[i]), int(self.gpu_milli[i])
        gpu = GpuRequest(count=n, milli=m) if n > 0 else GpuRequest()
        created, deleted = float(self.creation_time[i]), float(self.deletion_time[i])
        duration = deleted - created if np.isfinite(created) and np.isfinite(deleted) else None
        return JobSpec(
            name=self.names[i],
            team=team or (self.qos[i] or DEFAULT_TEAM),
            gpu=gpu,
            gpu_types=frozenset(self.gpu_spec[i]),
            cpu_milli=int(self.cpu_milli[i]),
            memory_mib=int(self.memory_mib[i]),
            duration_s=duration,
        )

    def to_trace(self, name: str, nodes: OpenbNodes | None = None, team: str | None = None) -> Trace:
        """A :class:`Trace`: submit = creation time (0 where unknown), duration = deletion − creation."""
        jobs = []
        for i in range(len(self)):
            created = float(self.creation_time[i])
            jobs.append(TraceJob(submit_time=created if np.isfinite(created) else 0.0, spec=self.spec(i, team)))
        return Trace(
            name=name,
            jobs=jobs,
            nodes=nodes.to_nodes() if nodes is not None else [],
            source=self.source,
        )


# -- parsing ----------------------------------------------------------------------------------------
def _int(value: str, source: str, line: int, field: str, *, minimum: int = 0, maximum: int | None = None) -> int:
    try:
        v = int(value.strip())
    except ValueError:
        try:
            f = float(value.strip())
        except ValueError:
            raise TraceError(f"not an integer: {value!r}", source=source, line=line, field=field) from None
        if not f.is_integer():
            raise TraceError(f"not an integer: {value!r}", source=source, line=line, field=field) from None
        v = int(f)
    if v < minimum:
        raise TraceError(f"must be >= {minimum}, got {v}", source=source, line=line, field=field)
    if maximum is not None and v > maximum:
        raise TraceError(f"must be <= {maximum}, got {v}", source=source, line=line, field=field)
    return v


def _time(value: str, source: str, line: int, field: str) -> float:
    value = value.strip()
    if value == "":
        return float("nan")
    try:
        t = float(value)
    except ValueError:
        raise TraceError(f"not a number: {value!r}", source=source, line=line, field=field) from None
    problem = time_problem(t)
    if problem is not None:
        raise TraceError(problem, source=source, line=line, field=field)
    return t


def _model(value: str, source: str, line: int, field: str) -> str:
    value = value.strip()
    if not value:
        raise TraceError("empty GPU model", source=source, line=line, field=field)
    return canonical_gpu_name(value) or value


def _header(lines: list[str], source: str, layouts: tuple[tuple[str, ...], ...]) -> tuple[str, ...]:
    if not lines:
        raise TraceError("empty file (no header)", source=source, line=1)
    header = tuple(h.strip() for h in next(csv.reader([lines[0]])))
    for layout in layouts:
        if header == layout:
            return layout
    expected = " or ".join(",".join(x) for x in layouts)
    raise TraceError(f"unexpected header {','.join(header)!r}; expected {expected}", source=source, line=1)


def parse_openb_nodes(lines: list[str], source: str) -> OpenbNodes:
    """Parse the lines of an openb node list (``source`` names them in errors)."""
    _header(lines, source, (NODE_COLUMNS,))
    names: list[str] = []
    cpu: list[int] = []
    mem: list[int] = []
    gpus: list[int] = []
    models: list[str] = []
    seen: set[str] = set()
    for lineno, row in enumerate(csv.reader(lines[1:]), start=2):
        if not row or all(not c.strip() for c in row):
            continue
        if len(row) != len(NODE_COLUMNS):
            raise TraceError(f"expected {len(NODE_COLUMNS)} columns, got {len(row)}", source=source, line=lineno)
        name = row[0].strip()
        if not name:
            raise TraceError("empty node name", source=source, line=lineno, field="sn")
        if name in seen:
            raise TraceError(f"duplicate node {name!r}", source=source, line=lineno, field="sn")
        if len(seen) >= MAX_NODES:
            raise TraceError(f"more than {MAX_NODES} nodes", source=source, line=lineno)
        seen.add(name)
        n_gpu = _int(row[3], source, lineno, "gpu", maximum=MAX_GPUS_PER_NODE)
        names.append(name)
        cpu.append(_int(row[1], source, lineno, "cpu_milli", minimum=1, maximum=MAX_CPU_MILLI))
        mem.append(_int(row[2], source, lineno, "memory_mib", minimum=1, maximum=MAX_MEMORY_MIB))
        gpus.append(n_gpu)
        models.append(_model(row[4], source, lineno, "model") if n_gpu > 0 else "")
    return OpenbNodes(
        source=source,
        names=names,
        cpu_milli=np.array(cpu, dtype=np.int64),
        memory_mib=np.array(mem, dtype=np.int64),
        gpu_count=np.array(gpus, dtype=np.int64),
        model=models,
    )


def parse_openb_pods(lines: list[str], source: str) -> OpenbPods:
    """Parse the lines of an openb pod list (``source`` names them in errors).

    Accepts both column layouts (11 columns, or the five of the ``multigpu*`` files).
    """
    layout = _header(lines, source, (POD_COLUMNS, POD_COLUMNS_SHORT))
    width = len(layout)
    names: list[str] = []
    cpu: list[int] = []
    mem: list[int] = []
    ngpu: list[int] = []
    milli: list[int] = []
    spec: list[tuple[str, ...]] = []
    spec_raw: list[str] = []
    qos: list[str] = []
    created: list[float] = []
    deleted: list[float] = []
    for lineno, row in enumerate(csv.reader(lines[1:]), start=2):
        if not row or all(not c.strip() for c in row):
            continue
        if len(row) != width:
            raise TraceError(f"expected {width} columns, got {len(row)}", source=source, line=lineno)
        name = row[0].strip()
        if not name:
            raise TraceError("empty pod name", source=source, line=lineno, field="name")
        if len(names) >= MAX_JOBS:
            raise TraceError(f"more than {MAX_JOBS} pods", source=source, line=lineno)
        n = _int(row[3], source, lineno, "num_gpu", maximum=MAX_GPUS_PER_POD)
        m = _int(row[4], source, lineno, "gpu_milli")
        if m > MILLI:
            raise TraceError(f"gpu_milli must be <= {MILLI}, got {m}", source=source, line=lineno, field="gpu_milli")
        if n == 0 and m != 0:
            raise TraceError("gpu_milli > 0 with num_gpu = 0", source=source, line=lineno, field="gpu_milli")
        if n > 0 and m == 0:
            raise TraceError("gpu_milli = 0 with num_gpu > 0", source=source, line=lineno, field="gpu_milli")
        if n > 1 and m < MILLI:
            raise TraceError(
                "a GPU-sharing pod (gpu_milli < 1000) must ask for one GPU",
                source=source,
                line=lineno,
                field="num_gpu",
            )
        names.append(name)
        cpu.append(_int(row[1], source, lineno, "cpu_milli", maximum=MAX_CPU_MILLI))
        mem.append(_int(row[2], source, lineno, "memory_mib", maximum=MAX_MEMORY_MIB))
        ngpu.append(n)
        milli.append(m)
        if width == len(POD_COLUMNS):
            raw = row[5].strip()
            types = tuple(dict.fromkeys(_model(t, source, lineno, "gpu_spec") for t in raw.split("|") if t.strip()))
            spec.append(types)
            spec_raw.append(raw)
            qos.append(row[6].strip())
            c = _time(row[8], source, lineno, "creation_time")
            d = _time(row[9], source, lineno, "deletion_time")
            if np.isfinite(c) and np.isfinite(d) and d < c:
                raise TraceError(
                    f"deletion_time {d:g} is before creation_time {c:g}",
                    source=source,
                    line=lineno,
                    field="deletion_time",
                )
            created.append(c)
            deleted.append(d)
        else:
            spec.append(())
            spec_raw.append("")
            qos.append("")
            created.append(float("nan"))
            deleted.append(float("nan"))
    return OpenbPods(
        source=source,
        names=names,
        cpu_milli=np.array(cpu, dtype=np.int64),
        memory_mib=np.array(mem, dtype=np.int64),
        num_gpu=np.array(ngpu, dtype=np.int64),
        gpu_milli=np.array(milli, dtype=np.int64),
        gpu_spec=spec,
        gpu_spec_raw=spec_raw,
        qos=qos,
        creation_time=np.array(created, dtype=np.float64),
        deletion_time=np.array(deleted, dtype=np.float64),
    )
