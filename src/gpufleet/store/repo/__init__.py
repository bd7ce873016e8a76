"""Repository functions: every read and write of the store, as plain functions of a ``Session``.

This package is the facade: one module per aggregate (teams and their quotas, tokens, jobs and
their events, runs, nodes and their priced intervals, usage segments and the ledger, GPU samples,
controllers), every public function re-exported here so callers write ``repo.get_job(s, ...)``.

The service layer owns transactions (``with db.session() as s: ...``): a function here never
commits, so several of them compose into one atomic change (e.g. ``end_run`` + ``append_segment``
+ ``transition`` when a job finishes). They flush when they need database-generated values or must
surface a constraint violation at a known place.

Concurrency contracts (they hold on SQLite, where write transactions are serialized by
``BEGIN IMMEDIATE``, and on PostgreSQL at READ COMMITTED, where several API replicas and one
controller write at once):

- ``submit_job`` with an idempotency key creates at most one job per ``(submitted_by, key)``: the
  unique constraint decides, the loser of a race rolls back its SAVEPOINT and returns the winner's.
- ``ensure_team``/``upsert_team``/``heartbeat`` are single-statement upserts (``ON CONFLICT``).
- ``transition`` is a compare-and-set on the job's state: if another transaction moved the job
  since it was read, it raises :class:`ConflictError` instead of overwriting that change.
- ``append_segment`` and ``end_run`` are idempotent, so crash recovery may replay them.
"""

from __future__ import annotations

from gpufleet.store.repo._common import _insert
from gpufleet.store.repo.controllers import heartbeat, leader, list_controllers
from gpufleet.store.repo.gpu_samples import job_gpu_stats, record_gpu_samples
from gpufleet.store.repo.health import ping
from gpufleet.store.repo.jobs import (
    MAX_PAGE,
    SUBMIT_FIELDS,
    TERMINAL_STATES,
    changed_since,
    get_job,
    job_counts,
    job_events,
    job_ids_in_states,
    jobs_after,
    jobs_by_id,
    jobs_in_states,
    list_jobs,
    pending_jobs,
    request_cancel,
    state_changes_since,
    submit_job,
    transition,
)
from gpufleet.store.repo.nodes import gpu_capacity, list_nodes, node_intervals, node_models, remove_node, upsert_node
from gpufleet.store.repo.pods import is_local, pod_name
from gpufleet.store.repo.proposals import (
    MAX_PROPOSALS_PAGE,
    decide_proposal,
    expire_proposals,
    get_proposal,
    insert_proposal,
    job_utilization,
    list_proposals,
    lock_team,
    proposal_by_key,
    proposal_upkeep_due,
    proposals_to_measure,
)
from gpufleet.store.repo.runs import (
    end_run,
    get_run,
    mark_run_started,
    open_run,
    open_run_placements,
    open_runs,
    open_runs_by_team,
    request_stop,
    run_history,
    run_seconds,
)
from gpufleet.store.repo.scrape import (
    admissions_by_team,
    autoscaled_nodes,
    latest_gpu_samples,
    ledger_start,
    live_nodes,
    open_pods,
    queue_wait_histogram,
    requeues_by_team,
    waiting_teams,
)
from gpufleet.store.repo.segments import append_segment, load_ledger
from gpufleet.store.repo.teams import (
    all_quotas,
    ensure_team,
    get_team,
    list_teams,
    quotas_by_team,
    team_quotas,
    upsert_team,
)
from gpufleet.store.repo.tokens import (
    ROLES,
    authenticate,
    create_token,
    hash_secret,
    list_tokens,
    revoke_token,
    token_owner,
)

__all__ = [
    "MAX_PAGE",
    "MAX_PROPOSALS_PAGE",
    "ROLES",
    "SUBMIT_FIELDS",
    "TERMINAL_STATES",
    "_insert",  # the dialect's INSERT, used by store.budgets_repo",
    "admissions_by_team",
    "all_quotas",
    "append_segment",
    "authenticate",
    "autoscaled_nodes",
    "changed_since",
    "create_token",
    "decide_proposal",
    "end_run",
    "ensure_team",
    "expire_proposals",
    "get_job",
    "get_proposal",
    "get_run",
    "get_team",
    "gpu_capacity",
    "hash_secret",
    "heartbeat",
    "insert_proposal",
    "is_local",
    "job_counts",
    "job_events",
    "job_gpu_stats",
    "job_ids_in_states",
    "job_utilization",
    "jobs_after",
    "jobs_by_id",
    "jobs_in_states",
    "latest_gpu_samples",
    "leader",
    "ledger_start",
    "list_controllers",
    "list_jobs",
    "list_nodes",
    "list_proposals",
    "list_teams",
    "list_tokens",
    "live_nodes",
    "load_ledger",
    "lock_team",
    "mark_run_started",
    "node_intervals",
    "node_models",
    "open_pods",
    "open_run",
    "open_run_placements",
    "open_runs",
    "open_runs_by_team",
    "pending_jobs",
    "ping",
    "pod_name",
    "proposal_by_key",
    "proposal_upkeep_due",
    "proposals_to_measure",
    "queue_wait_histogram",
    "quotas_by_team",
    "record_gpu_samples",
    "remove_node",
    "request_cancel",
    "request_stop",
    "requeues_by_team",
    "revoke_token",
    "run_history",
    "run_seconds",
    "state_changes_since",
    "submit_job",
    "team_quotas",
    "token_owner",
    "transition",
    "upsert_node",
    "upsert_team",
    "waiting_teams",
]
