"""What to change: ``recommend`` (the API's recommendations), ``whatif`` (replay the jobs with a
change) and ``propose_action`` (file a proposal a person approves)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpufleet.agent.outputs import ProposalAnswer, Recommendations, ReplayFigures, WhatIfAnswer
from gpufleet.agent.tools.common import check_team, duration, milli, scope_of, to_recommendation, usd, when
from gpufleet.errors import InputError
from gpufleet.wire import JobOut, ProposalEstimate

if TYPE_CHECKING:
    from gpufleet.cost.catalog import PriceCatalog
    from gpufleet.sdk import Client

TERMINAL_STATES = ("SUCCEEDED", "FAILED", "CANCELLED", "TIMED_OUT")
# as `gpufleet whatif --trace history`: a job with a checkpoint directory checkpoints every 30 min
CHECKPOINT_INTERVAL_S = 1800.0


# --------------------------------------------------------------------------------------------- recommend


def recommend(client: Client, job: str | None = None, team: str | None = None, window: str = "7d") -> Recommendations:
    """``GET /v1/recommendations``, narrowed to one job or one team. The job (or team) is looked up
    first, so another team's is the API's 404, not an empty list."""
    if job is not None:
        client.get(job)
    check_team(client, team)
    recs = [
        r
        for r in client.recommendations(window)
        if (job is None or r.target == f"job:{job}") and (team is None or r.team == team)
    ]
    total = sum(r.monthly_savings_usd for r in recs)
    what = f"job {job}" if job else f"team {team}" if team else "what this token sees"
    if recs:
        top = recs[0]
        summary = (
            f"{len(recs)} recommendation{'s' if len(recs) != 1 else ''} for {what} over {window}: up to "
            f"{usd(total)}/month if every one is taken (they may overlap). Largest: {top.action} "
            f"({usd(top.monthly_savings_usd)}/month, {top.confidence:.0%} confidence; {top.monthly_basis or 'window'})."
        )
        if not all(r.enough_history for r in recs):
            summary += (
                f" Not enough history to quote these as savings: {duration(min(r.history_s for r in recs))} observed "
                "(at least an hour); the figures are orders of magnitude, not offers."
            )
    else:
        summary = f"Nothing to recommend for {what} over {window}."
    return Recommendations(
        summary=summary,
        window=window,
        job=job,
        team=team,
        items=[to_recommendation(r) for r in recs],
        total_monthly_savings_usd=total,
    )


# ------------------------------------------------------------------------------------------------ whatif


def whatif(
    client: Client,
    catalog: PriceCatalog,
    change: str,
    window: str = "7d",
    team: str | None = None,
    limit: int = 2000,
    spot_hazard: float = 0.01,
    seed: int = 1,
) -> WhatIfAnswer:
    """Replay the jobs this token may see that ran in ``window`` twice — on a fixed on-demand cluster
    of the cluster's current on-demand nodes, and with ``change`` — in the what-if engine, in this
    process. The API has no what-if endpoint; the jobs come from ``GET /v1/jobs`` (so a member's
    replay holds only their team's jobs) and the nodes from ``GET /v1/nodes``: the same inputs
    ``gpufleet whatif --trace history:<window>`` reads from the store, through the caller's token."""
    from gpufleet.model.node import CapacityType, Node, SharingMode
    from gpufleet.sim.engine import SimOptions
    from gpufleet.sim.history import HistoryJob, trace_from_history
    from gpufleet.sim.whatif import parse_change, run_whatif

    ch = parse_change(change)
    if limit < 1:
        raise InputError("must be >= 1", field="limit")
    rep = client.usage(window, aggregate="team", team=team)  # the window as the server resolves it
    start, end = rep.window_start, rep.window_end
    seen = team if team is not None else (rep.filters.get("team"))
    picked: list[JobOut] = []
    for j in client.iter_jobs(team=team, state=TERMINAL_STATES, page_size=500):
        if j.submitted_at >= end:
            continue
        if j.submitted_at < start:
            break  # newest first: the rest are older
        if j.run_seconds:
            picked.append(j)
    picked.sort(key=lambda j: j.submitted_at)
    picked = picked[:limit]
    if not picked:
        raise InputError(f"no job this token may see ran in {window}", field="window")
    hist = [
        HistoryJob(
            j.id,
            j.submitted_at.timestamp(),
            float(j.run_seconds or 0.0),
            j.team,
            j.project,
            j.priority,
            j.gpus,
            milli(j),
            j.mig,
            tuple(j.gpu_types),
            j.cpu_milli,
            j.memory_mib,
            max(1, j.pods),
            j.preemptible,
            CHECKPOINT_INTERVAL_S if j.checkpoint_dir else None,
            dict(j.labels),
        )
        for j in picked
    ]
    sharing_modes = {m.value for m in SharingMode}
    nodes = [
        Node(
            n.name,
            n.gpu_model,
            n.gpu_count,
            n.cpu_milli,
            n.memory_mib,
            pool=n.pool,
            hourly_price_usd=n.hourly_price_usd,
            sharing=SharingMode(n.sharing) if n.sharing in sharing_modes else SharingMode.SHARED,
        )
        for n in client.nodes()
        if n.capacity_type == CapacityType.ON_DEMAND.value and n.gpu_count
    ]
    result = run_whatif(
        trace_from_history(hist, name=f"history:{window}"),
        ch,
        nodes=nodes or None,
        options=SimOptions(seed=seed, spot_hazard_per_node_hour=spot_hazard),
        catalog=catalog,
    )

    def fig(f: Any) -> ReplayFigures:
        return ReplayFigures(**{k: getattr(f, k) for k in ReplayFigures.model_fields})

    b, v = fig(result.baseline), fig(result.variant)
    who = "all teams" if seen is None else f"team {seen}"
    pct = f" ({result.savings_pct:.1%})" if result.savings_pct is not None else ""
    verb = "saves" if result.savings_usd >= 0 else "costs"
    summary = (
        f"Replaying {len(picked)} jobs of {who} from {when(start)} to {when(end)}: the fixed on-demand cluster "
        f"({result.baseline_nodes} node{'s' if result.baseline_nodes != 1 else ''}) costs {usd(b.cost_usd)}"
        + (f" as the jobs ran (the ledger billed {usd(result.recorded_cost_usd)})" if result.recorded_cost_usd else "")
        + (
            f", {usd(b.cost_usd + result.baseline_kept_on_usd)} kept on until the variant's work ends"
            if result.baseline_kept_on_usd
            else ""
        )
        + f"; with {ch.text} {usd(v.cost_usd)}, which {verb} "
        f"{usd(abs(result.savings_usd))}{pct}; mean wait {duration(b.wait_mean_s)} → {duration(v.wait_mean_s)}, "
        f"jobs done {b.completed} → {v.completed}. No schedule of the variant costs less than "
        f"{usd(result.lower_bound_usd)}."
    )
    method = (
        "in-process replay of the what-if engine (the API has no what-if endpoint) over the jobs GET /v1/jobs "
        "returns to this token and the nodes of GET /v1/nodes"
    )
    extra = [
        "jobs: those that ended, submitted in the window, with their recorded run time; running jobs are left out",
        "nodes: the cluster's on-demand GPU nodes now (GET /v1/nodes), at their own prices",
    ]
    if seen is not None:
        extra.append(f"only team {seen}'s jobs are replayed, on the whole cluster")
    return WhatIfAnswer(
        summary=summary,
        change=ch.text,
        scope=scope_of(seen),
        window_start=start,
        window_end=end,
        jobs=len(picked),
        baseline_nodes=result.baseline_nodes,
        baseline=b,
        variant=v,
        savings_usd=result.savings_usd,
        savings_pct=result.savings_pct,
        lower_bound_usd=result.lower_bound_usd,
        method=method,
        assumptions=[*result.assumptions, *extra],
    )


# ---------------------------------------------------------------------------------------- propose_action


def propose_action(
    client: Client,
    action: str,
    target: str,
    params: dict[str, Any],
    rationale: str,
    estimate: ProposalEstimate | None = None,
) -> ProposalAnswer:
    """``POST /v1/proposals``: file a proposal. It stays pending — nothing changes — until a person
    approves or rejects it through the CLI (``gpufleet proposals approve|reject``) or the API; no
    tool here can approve it. The API checks the params and whether the caller may
    propose on the target."""
    p = client.propose(action, target, params, rationale, estimate)
    saving = f", expected to save {usd(p.estimate.monthly_savings_usd)}/month" if p.estimate else ""
    summary = (
        f"Proposal {p.id} ({action} on {target}{saving}) is {p.state}: nothing changes until a person approves it "
        f"(gpufleet proposals approve {p.id}, or the API); it expires {when(p.expires_at)}."
    )
    return ProposalAnswer(summary=summary, id=p.id, state=p.state, proposal=p)
