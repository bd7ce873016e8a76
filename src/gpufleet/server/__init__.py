"""The composition root: the settings (``settings``) and the process that wires the store, a
backend, the controller, the integrations, the webhook and the HTTP API together and serves them
(``host``; ``gpufleet up``). Nothing below imports it.
"""
