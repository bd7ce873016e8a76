"""The console's colours, its cost chart's opening range and an ended job's cost (issue 23, items 10
and 11), on a real ``gpufleet up`` (4 declared A100-80GB, teams alpha and beta) in Debian's
headless Chromium, like ``test_console.py``:

- a team keeps its colour on the cost chart when the ranking of the teams changes between two
  refreshes (the colour is the team's own, by its name, not its rank);
- every job on the node map has a colour of its own: 13 jobs share the GPUs (more than the 12
  colours the console once had, so two of them had to share one);
- a finished job's page shows what the ledger charged it;
- a server younger than the chart's 24 hours opens the cost chart on the shortest range that covers
  its life (its first hour), not on 23 hours of empty bars.

The tests run in the order written: the first's jobs are cancelled before the node map's start.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.api.test_console import (
    Guard,
    _login,
    _settled,
    _wait_state,
    browser,  # noqa: F401  (the module-scoped browser fixture)
    guarded_page,
    needs_chromium,
)
from tests.support.serverproc import ServerProcess

pytestmark = [pytest.mark.slow, needs_chromium]
REDRAW_MS = 90_000  # the cost page redraws every 15 s; a loaded machine is slow to
SHARED_JOBS = 13  # one more than the old palette's 12 colours: two jobs were bound to share one


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    srv = ServerProcess(tmp_path_factory.mktemp("colours") / "home", gpus="4xA100-80GB").start()
    try:
        with srv.client() as c:
            c.set_team("alpha")
            c.set_team("beta")
        yield srv
    finally:
        srv.stop()  # first: a server still up would restart the jobs killed under it
        srv.kill_jobs()


@pytest.fixture
def page(browser: Browser, server: ServerProcess) -> Iterator[tuple[Page, Guard]]:  # noqa: F811
    yield from guarded_page(browser, server.url)


def _stop(server: ServerProcess, ids: list[str]) -> None:
    """Cancel the jobs not ended yet and wait until none holds a GPU."""
    with server.client() as c:
        live = [j for j in ids if c.get(j).state not in ("SUCCEEDED", "FAILED", "CANCELLED", "TIMED_OUT")]
        for j in live:
            c.cancel(j)
        for j in live:
            _wait_state(c, j, "CANCELLED")


def _legend_colour(pg: Page, label: str) -> str:
    item = pg.locator("#cost-time .legend-item", has_text=label).first
    expect(item).to_be_visible(timeout=REDRAW_MS)  # a job's first charge reaches the next redraw
    return str(item.locator(".swatch").first.evaluate("e => getComputedStyle(e).backgroundColor"))


def _first_series(pg: Page) -> str:
    return str(pg.locator("#cost-time .legend-item").first.inner_text()).strip()


def test_a_team_keeps_its_colour_when_the_ranking_changes(page: tuple[Page, Guard], server: ServerProcess) -> None:
    pg, guard = page
    with server.client() as c:
        beta = c.submit(name="beta-big", team="beta", command=["sleep", "600"], gpus=2).id
        alpha = [c.submit(name="alpha-small", team="alpha", command=["sleep", "600"], gpus=1).id]
        for j in (beta, *alpha):
            _wait_state(c, j, "RUNNING")
    try:
        _login(pg, server.url, server.token)
        pg.click("#nav-cost")
        _settled(pg)
        expect(pg.locator("#cost-time .legend-item").first).to_have_text("beta", timeout=REDRAW_MS)
        before = _legend_colour(pg, "alpha")
        # beta stops; alpha takes all four GPUs and overtakes beta's spend
        with server.client() as c:
            c.cancel(beta)
            _wait_state(c, beta, "CANCELLED")
            alpha += [c.submit(name="alpha-more", team="alpha", command=["sleep", "600"], gpus=1).id for _ in range(3)]
        # the page's own refresh (every 15 s) redraws the chart with alpha ranked first
        expect(pg.locator("#cost-time .legend-item").first).to_have_text("alpha", timeout=REDRAW_MS)
        after = _legend_colour(pg, "alpha")
        assert after == before, f"alpha's colour changed with its rank: {before} → {after}"
        assert _legend_colour(pg, "beta") != after
        guard.check()
    finally:  # the GPUs are the next test's
        _stop(server, [beta, *alpha])


def test_every_job_on_the_node_map_has_its_own_colour(page: tuple[Page, Guard], server: ServerProcess) -> None:
    pg, guard = page
    with server.client() as c:
        ids = [
            c.submit(name=f"share-{i}", team="alpha" if i % 2 else "beta", command=["sleep", "600"], gpu_milli=250).id
            for i in range(SHARED_JOBS)
        ]
        for j in ids:
            _wait_state(c, j, "RUNNING")
    try:
        _login(pg, server.url, server.token)
        pg.click("#nav-nodes")
        _settled(pg)
        colours: dict[str, str] = {}
        for j in ids:
            seg = pg.locator(f'.gpu-bar .seg[data-job="{j}"]').first
            expect(seg).to_be_visible()
            colours[j] = str(seg.evaluate("e => getComputedStyle(e).backgroundColor"))
        by_colour: dict[str, list[str]] = {}
        for j, col in colours.items():
            by_colour.setdefault(col, []).append(j)
        shared = {col: js for col, js in by_colour.items() if len(js) > 1}
        assert shared == {}, f"jobs sharing a colour on the node map: {shared}"
        guard.check()
    finally:
        _stop(server, ids)


def test_a_finished_jobs_page_shows_its_cost(page: tuple[Page, Guard], server: ServerProcess) -> None:
    pg, guard = page
    with server.client() as c:
        job = c.submit(name="short-one", team="alpha", command=["sleep", "2"], gpus=1).id
        c.wait(job, timeout=60)
        spent = c.forecast(job).spent_usd  # the ledger's charge for its run: final once it ended
    assert spent > 0
    _login(pg, server.url, server.token)
    pg.goto(f"{server.url}/ui/#/jobs/{job}")
    cost = pg.locator("#job-forecast")
    expect(cost).to_contain_text("Cost:")
    expect(cost).to_contain_text(f"${spent:,.2f}" if spent >= 0.01 else f"${spent:,.4f}")
    expect(cost).to_contain_text("from the ledger")
    guard.check()


def test_a_young_servers_cost_chart_opens_on_its_first_hour(page: tuple[Page, Guard], server: ServerProcess) -> None:
    pg, guard = page
    with server.client() as c:
        born = c.forecast_spend().history_since
    assert born is not None and time.time() - born.timestamp() < 3000  # a server minutes old
    _login(pg, server.url, server.token)
    pg.click("#nav-cost")
    _settled(pg)
    expect(pg.locator("#cost-range")).to_have_value("1h")
    expect(pg.locator("#cost-time figcaption")).to_contain_text("last hour")
    # a range the reader picks is kept: the opening choice is made once
    pg.select_option("#cost-range", "7d")
    expect(pg.locator("#cost-time figcaption")).to_contain_text("last 7 days")
    expect(pg.locator("#cost-range")).to_have_value("7d")
    guard.check()
