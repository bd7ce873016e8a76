"""Queue ordering policies (QueueSort), one module each, registered in ``QUEUE_SORT``."""

from gpufleet.scheduling.ordering import decayed, drf, fifo, priority  # noqa: F401  (registration)
from gpufleet.scheduling.ordering.aging import Aging

__all__ = ["Aging"]
