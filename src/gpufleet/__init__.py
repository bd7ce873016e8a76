"""gpufleet: a cost-aware GPU scheduler and cost manager.

One scheduling cycle and one cost engine run unchanged in three worlds: a trace simulator,
a single multi-GPU server, and Kubernetes. See DESIGN.md for the layers and contracts.
"""

from gpufleet.errors import GpufleetError

__all__ = ["GpufleetError", "__version__"]
__version__ = "0.1.0"
