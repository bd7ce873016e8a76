"""The bounds of simulator input, in one place.

A trace or cluster description is input like any other: a number in it can ask the simulator for
unbounded memory or time (``gang_size: 1000000000`` once grew memory without end). Every loader
(JSONL traces, openb and Philly CSVs, the synthetic generator, cluster YAML) refuses a value past
these limits with a :class:`~gpufleet.errors.TraceError` / :class:`~gpufleet.errors.InputError`
naming the file, line and field. The limits are far above any real cluster or trace:

=========================  =============  ========================================================
``MAX_GANG_SIZE``          4,096          pods of one gang (placed all-or-nothing)
``MAX_GPUS_PER_POD``       64             GPUs one pod asks for (the API's ``gpus`` bound too)
``MAX_GPUS_PER_NODE``      64             GPUs of one node or one pool's nodes
``MAX_JOB_GPUS``           262,144        GPUs of one job: gang size x GPUs per pod
``MAX_NODES``              100,000        nodes of a cluster: static nodes, a group's ``count``,
                                          a pool's ``max_nodes``, all pools' ``max_nodes`` together
``MAX_POOLS``              1,000          autoscaled pools (and static node groups) of a cluster
``MAX_JOBS``               10,000,000     jobs of one trace (read or generated)
``MAX_CPU_MILLI``          1,024,000      CPU of one pod or node, in milli-cores (1,024 cores)
``MAX_MEMORY_MIB``         67,108,864     memory of one pod or node, in MiB (64 TiB)
``MAX_TIME_S``             315,360,000    any time or duration in seconds (10 years of 365 days):
                                          submit times, durations, runtime estimates and limits,
                                          checkpoint intervals, provisioning delays
=========================  =============  ========================================================

Times must also be finite (no NaN or infinity) and not negative.
"""

from __future__ import annotations

import math

MAX_GANG_SIZE = 4_096
MAX_GPUS_PER_POD = 64
MAX_GPUS_PER_NODE = 64
MAX_JOB_GPUS = MAX_GANG_SIZE * MAX_GPUS_PER_POD
MAX_NODES = 100_000
MAX_POOLS = 1_000
MAX_JOBS = 10_000_000
MAX_CPU_MILLI = 1_024_000
MAX_MEMORY_MIB = 64 * 1024 * 1024
MAX_TIME_S = 10 * 365 * 86_400.0


def time_problem(value: float) -> str | None:
    """Why ``value`` is not a valid time in seconds, or None when it is."""
    if not math.isfinite(value):
        return f"must be a finite number of seconds, got {value!r}"
    if value < 0:
        return f"must be >= 0, got {value:g}"
    if value > MAX_TIME_S:
        return f"must be <= {MAX_TIME_S:.0f} s (10 years), got {value:g}"
    return None
