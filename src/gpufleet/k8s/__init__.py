"""Kubernetes, all of it: what gpufleet reads from a cluster, does to it and puts in it.

- :mod:`gpufleet.k8s.vocabulary` — every label, annotation, resource and group name, once;
- :mod:`gpufleet.k8s.adapter` — the backend: gpufleet's scheduler driving a cluster through its API
  (node and pod translation, Job/Pod objects, binding, eviction, logs, DCGM, the lease, the
  Karpenter provisioner);
- :mod:`gpufleet.k8s.adopt` — adopting GPU workloads gpufleet did not create;
- :mod:`gpufleet.k8s.reconcile` — the reconcilers of the ``CostBudget`` and ``CostAttribution`` CRs;
- :mod:`gpufleet.k8s.webhook` — the admission webhook's HTTPS server; its decisions are
  :mod:`gpufleet.k8s.review`'s (pure);
- plain data (no client, no I/O): :mod:`~gpufleet.k8s.crds` (the ``gpufleet.io/v1alpha1`` CRDs),
  :mod:`~gpufleet.k8s.crread` (reading those CRs), :mod:`~gpufleet.k8s.costbudget` (a ``CostBudget``
  ↔ a budget), :mod:`~gpufleet.k8s.attribution` (a ``CostAttribution`` → a cost report),
  :mod:`~gpufleet.k8s.policies` (PriorityClasses, team Namespaces, quotas), :mod:`~gpufleet.k8s.schemacheck`
  and :mod:`~gpufleet.k8s.gpustack` (the GPU Operator / device plugin / Karpenter configuration).

``gpufleet k8s ...`` prints the plain data (:mod:`gpufleet.cli.k8s`).
"""
