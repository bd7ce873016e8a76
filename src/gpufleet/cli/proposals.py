"""``gpufleet proposals ls|show|approve|reject``: actions an agent proposed, decided by a person.

Exit codes as for the other API commands (2 bad input, 3 not found, 4 forbidden — e.g. approving
one's own proposal —, 6 conflict: not pending any more); ``approve`` also exits 6 when the action
failed at execution (the proposal is then ``failed``, and nothing of the action was kept).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

from gpufleet.cli import jobs as cli_jobs
from gpufleet.cli.common import console, handle_errors
from gpufleet.cli.jobs import JsonOpt, TokenOpt, UrlOpt, WideOpt
from gpufleet.cli.render import (
    EXIT_CONFLICT,
    Col,
    ago,
    bad_option,
    emit_json,
    make_table,
    money,
    note,
    print_table,
    until,
)

if TYPE_CHECKING:
    from gpufleet.wire import ProposalOut

proposals_app = typer.Typer(
    no_args_is_help=True,
    help="Proposals: actions an agent proposed; a person approves (executes) or rejects them.",
)

STATES = ("pending", "executed", "failed", "rejected", "expired")
_STATE_STYLE = {
    "pending": "yellow",
    "executed": "green",
    "failed": "bold red",
    "rejected": "dim",
    "expired": "dim",
}


def _state(state: str) -> str:
    style = _STATE_STYLE.get(state)
    return f"[{style}]{state}[/]" if style else state


def _per_month(value: float | None) -> str:
    return "–" if value is None else f"{money(value)}/mo"


def _compact(d: object) -> str:
    return json.dumps(d, separators=(", ", ": "), ensure_ascii=False, default=str)


@proposals_app.command("ls")
@handle_errors
def ls(
    state: Annotated[str | None, typer.Option("--state", help=f"only this state: {' | '.join(STATES)}")] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=1000, help="at most this many, newest first")] = 100,
    as_json: JsonOpt = False,
    wide: WideOpt = False,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """Proposals newest first: their action, target, estimated and measured $/month saved."""
    if state is not None and state not in STATES:
        raise bad_option("--state", f"unknown state '{state}' (known: {', '.join(STATES)})")
    with cli_jobs.make_client(url, token) as client:
        items = client.proposals(state, limit=limit)
    if as_json:
        emit_json(items)
        return
    if not items:
        note("no proposals" + (f" in state {state}" if state else ""))
        return
    cols = [  # ids are never cut (the proposal's, and a job id as TARGET): they are what people copy
        Col("ID"),
        Col("STATE"),
        Col("ACTION"),
        Col("TARGET"),
        Col("TEAM", cut="middle", min_width=6, hide=2),
        Col("EST/MO", justify="right"),
        Col("REAL/MO", justify="right", hide=3),
        Col("AGE", justify="right", hide=4),
        Col("RATIONALE", cut="end", min_width=10, hide=1),
    ]
    rows = [
        [
            escape(p.id),
            _state(p.state),
            p.action,
            escape(p.target),
            escape(p.team or "–"),
            _per_month(p.estimate.monthly_savings_usd if p.estimate else None),
            _per_month(p.measured.monthly_savings_usd if p.measured else None),
            ago(p.created_at).removesuffix(" ago"),
            escape(p.rationale),
        ]
        for p in items
    ]
    print_table(make_table(cols, rows, wide=wide), wide=wide)


def print_proposal(p: ProposalOut) -> None:
    """A proposal for people: what, why, the estimate, the decision, what was done and its effect."""
    team = f" (team {escape(p.team)})" if p.team else ""
    console.print(f"[bold]{escape(p.id)}[/]  {p.action} {escape(p.target)}{team} — {_state(p.state)}")
    if p.params:
        console.print(f"  params: {escape(_compact(p.params))}")
    if p.rationale:
        console.print(f"  rationale: {escape(p.rationale)}")
    console.print(f"  proposed by {escape(p.proposed_by)}, {ago(p.created_at)}")
    if p.state == "pending":
        console.print(f"  expires {until(p.expires_at)}")
    if p.estimate is not None:
        e = p.estimate
        basis = f": {escape(e.basis)}" if e.basis else ""
        console.print(f"  estimate: {money(e.monthly_savings_usd)}/month saved (confidence {e.confidence:.0%}){basis}")
    else:
        console.print("  estimate: none given")
    if p.decided_by is not None:
        why = f": {escape(p.reason)}" if p.reason else ""
        verb = "rejected" if p.state == "rejected" else "approved"
        console.print(f"  {verb} by {escape(p.decided_by)}, {ago(p.decided_at)}{why}")
    elif p.reason:
        console.print(f"  {escape(p.reason)}")
    if p.result:
        label = "[red]failed[/]" if p.state == "failed" else "done"
        console.print(f"  {label}: {escape(p.result)}")
    before, after = p.change.get("before"), p.change.get("after")
    if isinstance(before, dict) and isinstance(after, dict):
        for key in sorted(set(before) | set(after)):
            was, now = _compact(before.get(key)), _compact(after.get(key))
            console.print(f"  {escape(str(key))}: {escape(was)} → {escape(now)}")
    if p.measured is not None:
        m = p.measured
        hours = m.window_s / 3600
        line = (
            f"  effect: {money(m.before_usd_per_hour)}/h over {hours:g} h before → "
            f"{money(m.after_usd_per_hour)}/h over {hours:g} h after: {money(m.monthly_savings_usd)}/month saved"
        )
        if p.estimate is not None and p.estimate_error_usd is not None:
            off = ("+" if p.estimate_error_usd >= 0 else "-") + money(abs(p.estimate_error_usd))
            line += f" (estimated {money(p.estimate.monthly_savings_usd)}: {off})"
        console.print(line)
        if m.note:
            console.print(f"  [dim]{escape(m.note)}[/]")
    elif p.state == "executed" and p.effect_due_at is not None:
        hours = p.effect_window_s / 3600
        console.print(f"  effect: measured {until(p.effect_due_at)} ({hours:g} h after it was executed)")


@proposals_app.command("show")
@handle_errors
def show(
    proposal_id: Annotated[str, typer.Argument(metavar="ID", help="the proposal's id")],
    as_json: JsonOpt = False,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """A proposal: what, why, the estimate, the decision, what was done and the measured effect."""
    with cli_jobs.make_client(url, token) as client:
        p = client.proposal(proposal_id)
    if as_json:
        emit_json(p)
        return
    print_proposal(p)


@proposals_app.command("approve")
@handle_errors
def approve(
    proposal_id: Annotated[str, typer.Argument(metavar="ID", help="the proposal's id")],
    reason: Annotated[str, typer.Option("--reason", help="why (kept with the decision)")] = "",
    as_json: JsonOpt = False,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """Approve a pending proposal: its action is executed now (exit 6 if it failed: nothing was kept)."""
    with cli_jobs.make_client(url, token) as client:
        p = client.approve(proposal_id, reason)
    if as_json:
        emit_json(p)
    else:
        print_proposal(p)
    if p.state != "executed":
        if not as_json:
            note(f"[red]proposal {escape(p.id)} failed:[/] {escape(p.result)}")
        raise typer.Exit(EXIT_CONFLICT)


@proposals_app.command("reject")
@handle_errors
def reject(
    proposal_id: Annotated[str, typer.Argument(metavar="ID", help="the proposal's id")],
    reason: Annotated[str, typer.Option("--reason", help="why (required)", show_default=False)],
    as_json: JsonOpt = False,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """Reject a pending proposal: nothing changes."""
    if not reason.strip():
        raise bad_option("--reason", "say why the proposal is rejected")
    with cli_jobs.make_client(url, token) as client:
        p = client.reject(proposal_id, reason)
    if as_json:
        emit_json(p)
    else:
        print_proposal(p)
