"""``/v1/budgets``: create, list, get, replace, delete, status, and the feasibility check of a job.

Privacy: admins see every budget in full. Members and viewers see their own team's budgets (its
``team:`` budget and the project, namespace, experiment and label budgets it owns), each channel
only as its kind and a masked target; ``/check`` reports those and the cluster-wide (``all``)
budgets — limit, committed spend and what is left, the figures that say whether a job fits —
never another team's."""

from __future__ import annotations

from datetime import UTC, datetime

from fastapi import APIRouter, Response
from sqlalchemy.orm import Session

from gpufleet.api.auth import Principal, require_admin
from gpufleet.api.deps import ADMIN, AUTHED, READ_ONE, SCOPED, Caller, Ctx
from gpufleet.api.problems import input_at
from gpufleet.cost.budgets.model import Budget
from gpufleet.cost.budgets.status import check_block
from gpufleet.cost.job_estimate import estimate_job_cost
from gpufleet.errors import InputError, NotFoundError
from gpufleet.io.catalog import load_catalog
from gpufleet.model.share import milli_gpus
from gpufleet.notify.channels import masked, public_channel
from gpufleet.services.budgets import (
    budget_from_in,
    budget_status_out,
    budgets_covering,
    check_project,
    committed_spend,
    plan_gpu_hour_price,
)
from gpufleet.services.submit import check_fits_store, prepare_submit
from gpufleet.store.models import BudgetRow
from gpufleet.store.repo import budgets as budgets_repo
from gpufleet.wire import (
    BudgetCheckLine,
    BudgetCheckOut,
    BudgetIn,
    BudgetOut,
    BudgetStatusOut,
    JobSubmit,
    ThresholdOut,
    ThrottleIn,
)

router = APIRouter(prefix="/v1/budgets", tags=["budgets"])


def _dt(t: float | None) -> datetime | None:
    return None if t is None else datetime.fromtimestamp(t, UTC)


def _budget(body: BudgetIn, id: str = "") -> Budget:
    """Validate a body into a pure budget (errors name ``body.<field>``)."""
    with input_at("body"):
        return budget_from_in(body, id)


def budget_out(row: BudgetRow, who: Principal | None = None) -> BudgetOut:
    """A budget as ``who`` may see it: in full for an admin (or no caller: the admin-only routes),
    channels reduced to their kind and a masked target for anyone else."""
    b = budgets_repo.budget_of(row)
    full = who is None or who.is_admin
    return BudgetOut(
        id=row.id,
        name=row.name,
        scope=str(b.scope),
        limit_usd=b.limit_usd,
        period=b.period,
        timezone=b.timezone,
        period_start=_dt(b.period_start),
        period_end=_dt(b.period_end),
        thresholds=[ThresholdOut(percent=t.percent, severity=t.severity) for t in b.thresholds],
        action=b.action,
        throttle=None if b.throttle.empty else ThrottleIn(**b.throttle.to_json()),
        grace_s=b.grace_s,
        channels=[masked(c) if full else public_channel(c) for c in b.channels],
        enabled=row.enabled,
        team=b.team,
        anomaly_alerts=b.anomaly_alerts,
        anomaly_threshold_pct=b.anomaly_threshold_pct,
        anomaly_floor_usd=b.anomaly_floor_usd,
        created_at=datetime.fromtimestamp(row.created_at, UTC),
        updated_at=datetime.fromtimestamp(row.updated_at, UTC),
    )


@router.post("", status_code=201, response_model=BudgetOut, responses={**ADMIN, 409: {"description": "Name taken"}})
def create_budget(body: BudgetIn, ctx: Ctx, who: Caller) -> BudgetOut:
    """Create a budget (admin)."""
    require_admin(who)
    budget = _budget(body)
    with ctx.database.session() as s:
        row = budgets_repo.create_budget(s, budget, created_by=who.token_id, now=ctx.clock.now())
        row.enabled = body.enabled
        return budget_out(row)


def _visible(who: Principal, row: BudgetRow) -> bool:
    """Admins see every budget; others only the budgets their own team owns (its ``team:`` budget,
    and the project/namespace/experiment/label budgets of the team). Unowned budgets on those
    scopes (stored before owners) may cover other teams' spend: admins only."""
    return who.is_admin or budgets_repo.scope_of(row).team == who.team


def _visible_budget(s: Session, who: Principal, ref: str) -> BudgetRow:
    row = budgets_repo.get_budget(s, ref)
    if not _visible(who, row):
        raise NotFoundError(f"budget '{ref}' not found")
    return row


@router.get("", response_model=list[BudgetOut], responses=AUTHED, summary="List budgets")
def list_budgets(ctx: Ctx, who: Caller) -> list[BudgetOut]:
    with ctx.database.session(readonly=True) as s:
        return [budget_out(r, who) for r in budgets_repo.list_budgets(s) if _visible(who, r)]


@router.post("/check", response_model=BudgetCheckOut, responses=SCOPED, summary="Would a job fit its budgets?")
def check_job(body: JobSubmit, ctx: Ctx, who: Caller) -> BudgetCheckOut:
    """The estimated cost of a job (GPUs x runtime estimate, else max runtime, else 1 h x the
    dearest GPU-hour among the nodes it may use) against what is left in every enabled budget whose
    scope covers it and the caller may see: an admin every one; anyone else their own team's and
    the cluster-wide (``all``) ones, whose limit, committed spend and remainder are shown so a
    member knows whether the job fits. A job tagged with a project another team owns is refused
    (403) as its submit would be. Nothing is submitted."""
    with input_at("body"):
        prepared = prepare_submit(body, caller_team=who.team, caller_role=who.role)
    f = prepared.fields
    now = ctx.clock.now()
    with ctx.database.session(readonly=True) as s:
        check_project(s, f["project"], prepared.team)
        price, price_basis = plan_gpu_hour_price(s, tuple(f["gpu_types"]), load_catalog)
        refused = None
        try:
            check_fits_store(s, f)  # the submit's own feasibility rules: would it be refused (422)?
        except InputError as e:
            refused = str(e)
        gpus = milli_gpus(f["pods"] * f["gpus"] * f["gpu_milli"])
        est = estimate_job_cost(
            gpus, price, estimated_runtime_s=f["estimated_runtime_s"], max_runtime_s=f["max_runtime_s"]
        )
        rows = budgets_covering(
            s,
            team=prepared.team,
            project=f["project"],
            namespace=f["namespace"],
            experiment=f["experiment"],
            labels=f["labels"],
        )
        lines = []
        blocked = False
        for row in rows:
            b = budgets_repo.budget_of(row)
            if not (who.is_admin or b.scope.kind == "all" or b.team == who.team):
                continue  # another team's (or an unowned, admins-only) budget: not the caller's to see
            period = b.period_at(now)
            committed = committed_spend(s, b.scope, period, now, rules=ctx.pricing_rules).total_usd
            v = check_block(b, committed, est.cost_usd)
            blocked |= b.action == "block" and not v.fits
            lines.append(
                BudgetCheckLine(
                    budget_id=b.id,
                    name=b.name,
                    scope=str(b.scope),
                    action=b.action,
                    limit_usd=b.limit_usd,
                    committed_usd=round(committed, 2),
                    remaining_usd=round(v.remaining_usd, 2),
                    fits=v.fits,
                )
            )
    return BudgetCheckOut(
        job_cost_usd=round(est.cost_usd, 2),
        gpus=gpus,
        runtime_s=est.runtime_s,
        runtime_source=est.runtime_source,
        usd_per_gpu_hour=round(price, 4),
        fits=all(line.fits for line in lines),
        blocked=blocked,
        budgets=lines,
        price_basis=price_basis,
        submit_refused=refused,
    )


@router.get("/{ref}", response_model=BudgetOut, responses=READ_ONE, summary="Get a budget (id or name)")
def get_budget(ref: str, ctx: Ctx, who: Caller) -> BudgetOut:
    with ctx.database.session(readonly=True) as s:
        return budget_out(_visible_budget(s, who, ref), who)


@router.put("/{ref}", response_model=BudgetOut, responses={**READ_ONE, **ADMIN}, summary="Replace a budget")
def put_budget(ref: str, body: BudgetIn, ctx: Ctx, who: Caller) -> BudgetOut:
    require_admin(who)
    with ctx.database.session() as s:
        row = budgets_repo.get_budget(s, ref)
        row = budgets_repo.update_budget(s, row.id, _budget(body, row.id), ctx.clock.now())
        row.enabled = body.enabled
        return budget_out(row)


@router.delete("/{ref}", status_code=204, responses={**READ_ONE, **ADMIN}, summary="Delete a budget")
def delete_budget(ref: str, ctx: Ctx, who: Caller) -> Response:
    require_admin(who)
    with ctx.database.session() as s:
        budgets_repo.delete_budget(s, ref)
    return Response(status_code=204)


@router.get("/{ref}/status", response_model=BudgetStatusOut, responses=READ_ONE, summary="A budget's status")
def budget_status_route(ref: str, ctx: Ctx, who: Caller) -> BudgetStatusOut:
    """Spend in the current period, percent used, projected period-end spend, days left, the
    committed spend that ``block`` checks against, and the alerts fired in the period."""
    with ctx.database.session(readonly=True) as s:
        return budget_status_out(s, _visible_budget(s, who, ref), ctx.clock.now(), ctx.pricing_rules)
