"""What a waiting pod says, and to whom: the ``PodScheduled`` condition gpufleet writes on the unbound
pods of a queued job, chosen so that exactly one provisioner adds nodes for it.

Karpenter provisions for any pod whose ``PodScheduled`` condition has reason ``Unschedulable``
(``pkg/utils/pod`` ``FailedToSchedule`` / ``IsProvisionable``: it never looks at ``schedulerName``,
nor at the condition's status or message); the cluster autoscaler reads the same reason. So:

- when gpufleet provisions (a :class:`~gpufleet.k8s.adapter.provisioner.KarpenterProvisioner` is
  configured), it never writes ``Unschedulable``: it creates the NodeClaims itself, and Karpenter
  launching nodes for the same pods would double the capacity (and the bill);
- when it does not, it writes ``Unschedulable`` only when capacity is why the job waits
  (:attr:`~gpufleet.scheduling.framework.WaitKind.CAPACITY`: no node has room, or none could ever
  hold it), so the cluster's node autoscaler can add a node; a job held by gpufleet's own decisions
  (quota, budget, a preemption under way) would not start on a new node, and an autoscaler that
  launched one would pay for an empty node until its consolidation gave it back.

Every other wait gets reason ``SchedulingGated``: no autoscaler acts on it, and it is the reason
Kubernetes gives a pod held back before scheduling by an admission decision (Kueue's quota wait
holds its pods with scheduling gates, and the kube-scheduler marks them so); ``kubectl get pods``
shows it as the pod's STATUS (its printer special-cases this reason), where ``Unschedulable`` shows
as ``Pending``. The pod has no ``spec.schedulingGates``: gpufleet, its scheduler, holds it. The
message is gpufleet's reason in both cases (``kubectl get pod -o yaml``; ``kubectl describe`` shows
only the condition's type and status).

Pure: the backend's ``report_waiting`` writes the condition (a strategic-merge patch of
``status.conditions``, merged by ``type``).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from gpufleet.scheduling.framework import WaitKind

# PodScheduled reasons (k8s.io/api core/v1: PodReasonUnschedulable, PodReasonSchedulingGated)
REASON_UNSCHEDULABLE = "Unschedulable"  # what node autoscalers provision for
REASON_GATED = "SchedulingGated"  # held back by gpufleet: no autoscaler acts on it

__all__ = ["REASON_GATED", "REASON_UNSCHEDULABLE", "pod_condition_for"]


def pod_condition_for(kind: WaitKind | str, text: str, provisioning: bool, at: float | None = None) -> dict[str, Any]:
    """The ``PodScheduled=False`` condition for a pod whose job waits for ``kind`` with gpufleet's
    reason ``text``: reason ``Unschedulable`` only for a capacity wait while gpufleet does not
    provision (``provisioning``: a Karpenter provisioner is configured), else ``SchedulingGated``
    (see the module docstring). A kind gpufleet does not know counts as not capacity (it never asks
    an autoscaler for a node on a guess). ``at`` (UNIX seconds) sets ``lastTransitionTime``."""
    try:
        known = WaitKind(kind)
    except ValueError:
        known = WaitKind.OTHER
    capacity = known is WaitKind.CAPACITY and not provisioning
    condition: dict[str, Any] = {
        "type": "PodScheduled",
        "status": "False",
        "reason": REASON_UNSCHEDULABLE if capacity else REASON_GATED,
        "message": str(text),
    }
    if at is not None:
        condition["lastTransitionTime"] = datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return condition
