"""Repository functions: every read and write of the store, as plain functions of a ``Session``.

This package is the facade: one module per aggregate (teams and their quotas, tokens, jobs and
their events, runs, nodes and their priced intervals, usage segments and the ledger, GPU samples,
controllers, budgets with their alerts and notification outbox), every public function re-exported
here so callers write ``repo.get_job(s, ...)``. Budgets are persistence only: what a scope spent,
what a job is expected to cost and whether a budget covers it are decided in
:mod:`gpufleet.services.budgets` (with :mod:`gpufleet.cost`).

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
- ``insert_alert`` fires a threshold once per budget and period, whoever evaluates: one
  ``INSERT ... ON CONFLICT DO NOTHING`` on the unique (budget, period, threshold); only the winner
  inserts the alert's outbox rows (in the same transaction), so notifications are queued once.
- ``lock_budgets`` serializes the block check of a submission with the insert of the job, per
  budget: ``SELECT ... FOR UPDATE`` on the budget rows (in id order, so two submitters never wait
  on each other crosswise) on PostgreSQL; on SQLite the write transaction already holds the single
  write lock (``BEGIN IMMEDIATE`` and :class:`~gpufleet.store.db.Database`'s writer lock).
- ``claim_notification`` is a compare-and-set on ``(status, attempts)``: of several dispatchers
  only one gets to attempt a given delivery at a time.
"""

from __future__ import annotations

from gpufleet.store.repo.budgets import (
    alert_payload,
    alerts_of,
    anomaly_payload,
    budget_of,
    check_project_free,
    claim_notification,
    create_budget,
    current_run_starts,
    delete_budget,
    due_notifications,
    finish_notification,
    get_budget,
    insert_alert,
    insert_anomaly_alert,
    key_used,
    list_budgets,
    lock_budgets,
    notifications_of,
    over_since,
    project_owner,
    running_jobs_with_budget,
    scope_of,
    set_over_since,
    unfinished_jobs,
    update_budget,
)
from gpufleet.store.repo.controllers import heartbeat, leader, list_controllers
from gpufleet.store.repo.custom_resources import budget_named, team_jobs_matching
from gpufleet.store.repo.gpu_samples import job_gpu_stats, record_gpu_samples
from gpufleet.store.repo.health import ping, write_probe
from gpufleet.store.repo.jobs import (
    MAX_PAGE,
    SUBMIT_FIELDS,
    TERMINAL_STATES,
    add_job_note,
    changed_since,
    find_job,
    get_job,
    job_counts,
    job_ended_at,
    job_events,
    job_ids_in_states,
    job_state,
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
from gpufleet.store.repo.leadership import advisory_unlock, ping_connection, try_advisory_lock
from gpufleet.store.repo.mlflow import (
    final_state_events,
    job_segment_spans,
    jobs_with_event_reason,
    newest_job_event_id,
    run_fields,
)
from gpufleet.store.repo.nodes import (
    gpu_capacity,
    list_nodes,
    node_intervals,
    node_intervals_between,
    node_models,
    nodes_named,
    remove_node,
    upsert_node,
)
from gpufleet.store.repo.pods import is_local, pod_name
from gpufleet.store.repo.progress import add_progress_reports, latest_progress_time
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
    last_run_end,
    mark_run_started,
    open_run,
    open_run_placements,
    open_runs,
    open_runs_by_team,
    request_stop,
    run_history,
    run_seconds,
    run_spans,
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
    stopped_runs,
    waiting_teams,
)
from gpufleet.store.repo.segments import append_segment, load_ledger
from gpufleet.store.repo.teams import (
    all_quotas,
    ensure_team,
    find_team,
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
    find_token,
    hash_secret,
    list_tokens,
    live_token_ids,
    revoke_token,
    token_owner,
)

__all__ = [
    "MAX_PAGE",
    "MAX_PROPOSALS_PAGE",
    "ROLES",
    "SUBMIT_FIELDS",
    "TERMINAL_STATES",
    "add_job_note",
    "add_progress_reports",
    "admissions_by_team",
    "advisory_unlock",
    "alert_payload",
    "alerts_of",
    "all_quotas",
    "anomaly_payload",
    "append_segment",
    "authenticate",
    "autoscaled_nodes",
    "budget_named",
    "budget_of",
    "changed_since",
    "check_project_free",
    "claim_notification",
    "create_budget",
    "create_token",
    "current_run_starts",
    "decide_proposal",
    "delete_budget",
    "due_notifications",
    "end_run",
    "ensure_team",
    "expire_proposals",
    "final_state_events",
    "find_job",
    "find_team",
    "find_token",
    "finish_notification",
    "get_budget",
    "get_job",
    "get_proposal",
    "get_run",
    "get_team",
    "gpu_capacity",
    "hash_secret",
    "heartbeat",
    "insert_alert",
    "insert_anomaly_alert",
    "insert_proposal",
    "is_local",
    "job_counts",
    "job_ended_at",
    "job_events",
    "job_gpu_stats",
    "job_ids_in_states",
    "job_segment_spans",
    "job_state",
    "job_utilization",
    "jobs_after",
    "jobs_by_id",
    "jobs_in_states",
    "jobs_with_event_reason",
    "key_used",
    "last_run_end",
    "latest_gpu_samples",
    "latest_progress_time",
    "leader",
    "ledger_start",
    "list_budgets",
    "list_controllers",
    "list_jobs",
    "list_nodes",
    "list_proposals",
    "list_teams",
    "list_tokens",
    "live_nodes",
    "live_token_ids",
    "load_ledger",
    "lock_budgets",
    "lock_team",
    "mark_run_started",
    "newest_job_event_id",
    "node_intervals",
    "node_intervals_between",
    "node_models",
    "nodes_named",
    "notifications_of",
    "open_pods",
    "open_run",
    "open_run_placements",
    "open_runs",
    "open_runs_by_team",
    "over_since",
    "pending_jobs",
    "ping",
    "ping_connection",
    "pod_name",
    "project_owner",
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
    "run_fields",
    "run_history",
    "run_seconds",
    "run_spans",
    "running_jobs_with_budget",
    "scope_of",
    "set_over_since",
    "state_changes_since",
    "stopped_runs",
    "submit_job",
    "team_jobs_matching",
    "team_quotas",
    "token_owner",
    "transition",
    "try_advisory_lock",
    "unfinished_jobs",
    "update_budget",
    "upsert_node",
    "upsert_team",
    "waiting_teams",
    "write_probe",
]
