"""OpenCost's allocation API: ``GET /allocation/compute`` (and ``/allocation``), so OpenCost
clients (``kubectl cost``, Grafana's JSON data sources, FinOps tools) read gpufleet's costs.

Parameters and the response are OpenCost's (see :mod:`gpufleet.cost.opencost`): ``window``
(``today``, ``yesterday``, ``week``, ``lastweek``, ``month``, ``lastmonth``, ``7d``, ``24h``,
``90m``, or ``start,end`` in RFC 3339 or UNIX seconds — gpufleet's windows, the same as
``/v1/usage``), ``aggregate``, ``accumulate``, ``step``, ``idle``, ``shareIdle`` and ``filter``.
The answer is ``{"code": 200, "status": "success", "data": [{name: allocation, ...}, ...]}``, one
set per step.

Money comes from the one path of money (:func:`gpufleet.cost.spend.spend_report`, the server's
pricing rules): a set's ``totalCost`` per name is ``/v1/usage``'s row for the same window and
grouping. With a ``filter`` on a field that is not aggregated the rows are grouped by the filter's
fields too, filtered, then summed (each part to the cent).

Authentication as the rest of the API: a token other than admin sees its own team's allocations
only (the ``__idle__`` line stays the cluster's, as ``/v1/usage``'s idle line). A bad parameter is a
400 problem naming it (``errors[0].field``: ``query.<parameter>``), as OpenCost answers 400.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse, Response

from gpufleet.api.deps import AUTHED, Caller, Ctx
from gpufleet.api.problems import problem_response
from gpufleet.api.windows import parse_window
from gpufleet.cost import opencost
from gpufleet.cost.report import Filters
from gpufleet.cost.spend import spend_report
from gpufleet.errors import InputError
from gpufleet.store import repo
from gpufleet.wire import FieldError

router = APIRouter(tags=["opencost"])

_Text = Annotated[str | None, Query(max_length=2000)]
_BAD: dict[int | str, dict[str, Any]] = {400: {"description": "A bad parameter (named in `errors`)"}, 401: AUTHED[401]}


def _bad(request: Request, e: InputError) -> Response:
    field = f"query.{e.field}" if e.field else "query"
    message = e.message.split(": ", 1)[1] if e.message.startswith("field '") else e.message
    return problem_response(
        400,
        "invalid_parameter",
        f"{field}: {message}",
        instance=request.url.path,
        errors=[FieldError(field=field, message=message)],
    )


def _compute(
    request: Request,
    ctx: Ctx,
    who: Caller,
    window: str | None,
    aggregate: str | None,
    accumulate: str | None,
    step: str | None,
    idle: str | None,
    share_idle: str | None,
    filter_: str | None,
) -> Response:
    now = ctx.clock.now()
    try:
        if window is None or not window.strip():
            raise InputError("window is required (e.g. 7d, today, lastweek, or start,end)", field="window")
        win = parse_window(window, now)
        dims = opencost.parse_aggregate(aggregate)
        acc = opencost.parse_bool(accumulate, "accumulate")
        with_idle = opencost.parse_bool(idle, "idle")
        spread = opencost.parse_bool(share_idle, "shareIdle")
        flt = opencost.parse_filter(filter_)
        windows = opencost.steps(win.start, win.end, step, acc)
    except InputError as e:
        return _bad(request, e)
    by_pod = opencost.needs_pods(dims, flt)
    fields = opencost.grouping(dims, flt, by_pod=by_pod)
    team = None if who.is_admin else who.team
    query = opencost.AllocationQuery(tuple(dims), flt, with_idle, by_pod, team)
    with ctx.database.session(readonly=True) as s:
        ledger = repo.load_ledger(s, win.start, win.end, now, by_pod=by_pod)
    sets: list[dict[str, dict[str, Any]]] = []
    for start, end in windows:
        try:
            rep = spend_report(
                ledger,
                start,
                end,
                aggregate=fields,
                rules=ctx.pricing_rules,
                spread_idle=spread,
                filters=Filters(team=team),
                as_of=now,
            )
        except InputError as e:
            return _bad(request, e)
        sets.append(opencost.allocation_set(rep, ledger, query, as_of=now))
    return JSONResponse(opencost.response(sets))


_SUMMARY = "OpenCost-compatible cost allocation"


@router.get("/allocation/compute", response_class=JSONResponse, responses=_BAD, summary=_SUMMARY)
@router.get("/allocation", response_class=JSONResponse, responses=_BAD, summary=_SUMMARY)
def allocation_compute(
    request: Request,
    ctx: Ctx,
    who: Caller,
    window: _Text = None,
    aggregate: _Text = None,
    accumulate: _Text = None,
    step: _Text = None,
    idle: _Text = None,
    shareIdle: _Text = None,
    filter: _Text = None,
) -> Response:
    """Costs and resources by ``aggregate`` over ``window`` (OpenCost's ``/allocation/compute``, and
    its older path ``/allocation``)."""
    return _compute(request, ctx, who, window, aggregate, accumulate, step, idle, shareIdle, filter)
