"""Small fixture builders for scheduler tests: ``job("a").gpus(2).team("x").build()``."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from gpufleet.model.job import GpuRequest, Job, JobSpec
from gpufleet.model.node import CapacityType, Node, SharingMode
from gpufleet.scheduling.snapshot import ClusterSnapshot


@dataclass
class JobBuilder:
    _spec: JobSpec
    _submit: float = 0.0
    _id: str = ""

    def gpus(self, n: int) -> JobBuilder:
        self._spec = replace(self._spec, gpu=GpuRequest(count=n))
        return self

    def milli(self, m: int) -> JobBuilder:
        self._spec = replace(self._spec, gpu=GpuRequest(count=1, milli=m))
        return self

    def mig(self, profile: str) -> JobBuilder:
        self._spec = replace(self._spec, gpu=GpuRequest(count=1, mig_profile=profile))
        return self

    def team(self, t: str) -> JobBuilder:
        self._spec = replace(self._spec, team=t)
        return self

    def priority(self, p: str) -> JobBuilder:
        self._spec = replace(self._spec, priority_class=p)
        return self

    def preemptible(self, checkpoint_s: float | None = None) -> JobBuilder:
        self._spec = replace(self._spec, preemptible=True, checkpoint_interval_s=checkpoint_s)
        return self

    def types(self, *t: str) -> JobBuilder:
        self._spec = replace(self._spec, gpu_types=frozenset(t))
        return self

    def runtime(self, seconds: float, estimate: float | None = None) -> JobBuilder:
        self._spec = replace(self._spec, duration_s=seconds, estimated_runtime_s=estimate or seconds)
        return self

    def gang(self, k: int) -> JobBuilder:
        self._spec = replace(self._spec, gang_size=k)
        return self

    def cpu(self, milli: int, mem_mib: int = 0) -> JobBuilder:
        self._spec = replace(self._spec, cpu_milli=milli, memory_mib=mem_mib)
        return self

    def at(self, t: float) -> JobBuilder:
        self._submit = t
        return self

    def build(self) -> Job:
        return Job(id=self._id, spec=self._spec, submit_time=self._submit)


def job(name: str) -> JobBuilder:
    return JobBuilder(JobSpec(name=name, gpu=GpuRequest(count=1)), _id=name)


@dataclass
class ClusterBuilder:
    nodes: list[Node] = field(default_factory=list)

    def add(
        self,
        name: str,
        model: str = "A100-80GB",
        gpus: int = 8,
        *,
        cpu: int = 96_000,
        mem: int = 1_000_000,
        spot: bool = False,
        sharing: SharingMode = SharingMode.SHARED,
        price: float | None = None,
        pool: str = "static",
    ) -> ClusterBuilder:
        self.nodes.append(
            Node(
                name=name,
                gpu_model=model,
                gpu_count=gpus,
                cpu_milli=cpu,
                memory_mib=mem,
                pool=pool,
                capacity_type=CapacityType.SPOT if spot else CapacityType.ON_DEMAND,
                hourly_price_usd=price,
                sharing=sharing,
            )
        )
        return self

    def snapshot(self) -> ClusterSnapshot:
        return ClusterSnapshot.from_nodes(
            self.nodes, prices=lambda n: (n.hourly_price_usd or 0.0) / max(1, n.gpu_count)
        )


def cluster() -> ClusterBuilder:
    return ClusterBuilder()
