"""What gpufleet puts in a Kubernetes cluster, as plain data (no client, no I/O).

- :mod:`gpufleet.k8s.crds` — the ``gpufleet.io/v1alpha1`` CustomResourceDefinitions (``CostBudget``,
  ``CostAttribution``) with schemas that refuse bad specs, and their names;
- :mod:`gpufleet.k8s.crread` — reading those CRs (typed fields, errors naming the field), their
  ownership checks and the status parts both kinds share;
- :mod:`gpufleet.k8s.costbudget` — a ``CostBudget`` ↔ a gpufleet budget (``BudgetIn``) and its
  status subresource;
- :mod:`gpufleet.k8s.attribution` — a ``CostAttribution`` → a cost-report query and its status;
- :mod:`gpufleet.k8s.policies` — PriorityClasses, team Namespaces, ResourceQuotas and LimitRanges
  that the team layout implies.

``gpufleet k8s crds`` and ``gpufleet k8s policies`` print them (:mod:`gpufleet.cli.k8s`).
"""
