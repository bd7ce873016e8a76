"""Every Kubernetes name gpufleet reads or writes, once: labels, annotations, extended resources,
API groups. Data only (rank 0 in ``tests/project/test_layering.py``): any layer may name these; none
defines its own.
"""

from __future__ import annotations

from typing import Final

# -- gpufleet's own labels and annotations ----------------------------------------------------------

# An adopted job (its pods made by someone else): the owner object's kind/namespace/name.
LABEL_ADOPTED_OWNER: Final = "gpufleet.io/adopted-owner"
# ... whose pods each ask for this many replicas of a time-sliced GPU (set on adoption).
LABEL_REQUESTED_REPLICAS: Final = "gpufleet.io/requested-gpu-replicas"
