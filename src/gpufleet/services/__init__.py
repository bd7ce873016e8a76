"""Services: what the API, the CLI's server commands, the webhook and the controller ask of the
store, each rule once: submitting a job (``submit``, ``jobs``), budgets and their enforcement
checks (``budgets``), team owners and grants (``owners``), what-if replays of the store
(``whatif``) and the agent's proposals (``proposals``).
"""
