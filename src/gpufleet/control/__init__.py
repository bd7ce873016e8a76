"""The server's world: the controller (the one loop over the store and a backend), the store-backed
scheduler state it restores after a restart (``sqlstate``), leader election (``leader``) and reading
a job's progress file within bounds (``progress_files``).

The process that runs it is the composition root, :mod:`gpufleet.server`; what the API and the
controller ask of the store is in :mod:`gpufleet.services`.
"""
