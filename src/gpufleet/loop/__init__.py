"""The one world loop: the rules every world runs (simulator, shared server, Kubernetes).

:class:`~gpufleet.loop.world.WorldLoop` owns the queue, the running set, admission, the scheduling
cycle, binding with roll-back, metering, budget enforcement, spot fall-back, checkpoint-resume and
autoscaling decisions. A world supplies only a clock (``now`` passed to each step), a backend
(:mod:`gpufleet.backends.base`: the simulated cluster, local processes, later Kubernetes) and a
state store (:class:`~gpufleet.loop.state.StateStore`: in memory for the simulator, SQL for the
server). Nothing here knows which world it runs in; nothing here does I/O.
"""
