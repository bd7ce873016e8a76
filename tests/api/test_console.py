"""The web console at ``/ui`` works offline, with the API's tokens and roles: a real ``gpufleet up``
on 127.0.0.1 (4 declared A100-80GB, two teams with running, finished and waiting jobs, a budget each),
driven in Debian's headless Chromium by Playwright (never a browser Playwright downloads). Every
request that leaves the server is aborted and counted: there must be none.

Checks:

- ``/ui`` is static files from the package with a strict Content-Security-Policy on every answer
  (a miss included); the page and its modules name nothing outside the server; no module writes
  HTML from strings (``innerHTML`` and kin are absent from the sources);
- a bad token stays on the login page with the server's reason;
- a member logs in and sees only its team: the other team's job names and ids appear on no page
  (queue, jobs, a job, nodes — whose GPU map shows the other team's share without its id — cost,
  budgets, advice); it submits a job through the form, sees it in the list, cancels it (two clicks)
  and sees CANCELLED; it reads a finished job's log and follows a running one's stream
  (``follow=true``) as new lines arrive; every page renders without a JavaScript error;
- an admin sees both teams and every job id in the GPU map; a job named with HTML shows as that
  text (no element made of it, no handler run);
- a viewer sees no submit form and no cancel button; its token, revoked while the console is open,
  returns the console to its login page;
- proposals: an agent (a member token of alpha) proposes through the SDK; a viewer sees them pending
  with no button; the agent's own approval (two clicks) is refused with the API's self-approval
  message; another member approves a job resize (the job is replaced by a 2-GPU one, per the API),
  an admin approves a budget change (the limit changes, per the API) and rejects a quota change with
  a reason; the measured effect (before/after $/h, $/month, estimate error) shows next to the
  estimate; the other team's proposal reaches only the admin;
- a node in MIG mode: ``/v1/nodes`` names each slice's profile and memory slices; the map draws them.

Screenshots of each page go to ``reports/console/`` (git-ignored test artifacts). The browser
tests are skipped only where ``/usr/bin/chromium`` is missing (``make test`` installs it).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from playwright.sync_api import Browser, ConsoleMessage, Page, Request, Response, Route, expect, sync_playwright

from gpufleet.sdk import Client
from tests.support.paths import REPO
from tests.support.serverproc import ServerProcess

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
TIMEOUT_MS = 30_000  # a loaded CI machine (2 cores, the suite beside it) is slow to start Chromium
ROOT = REPO
SHOTS = ROOT / "reports" / "console"
STATIC = ROOT / "src" / "gpufleet" / "ui" / "static"
# names only the other team's jobs carry: none may reach the member's pages
BETA_NAMES = ("beta-secret-train", "beta-secret-share", "beta-secret-wait")
HOSTILE = '<img src=x onerror="window.__pwned=1"><b>bold</b>'  # a job name

pytestmark = pytest.mark.slow
needs_chromium = pytest.mark.skipif(
    not CHROMIUM.exists(), reason="no /usr/bin/chromium (Debian: apt-get install chromium; `make test` installs it)"
)


@dataclass
class Fleet:
    server: ServerProcess
    member: str  # alpha's member token
    doomed: str  # an alpha viewer token, revoked by a test
    doomed_id: str
    jobs: dict[str, str] = field(default_factory=dict)  # name → id

    @property
    def beta_ids(self) -> list[str]:
        return [j for n, j in self.jobs.items() if n.startswith("beta-")]


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    srv = ServerProcess(tmp_path_factory.mktemp("console") / "home", gpus="4xA100-80GB").start()
    try:
        with srv.client() as c:
            c.set_team("alpha")
            c.set_team("beta")
            member = c.create_token(team="alpha", role="member", name="ann", owner="ann")
            doomed = c.create_token(team="alpha", role="viewer", name="temp")
            c.create_budget(name="alpha-monthly", scope="team:alpha", limit_usd=5.0)
            c.create_budget(name="beta-monthly", scope="team:beta", limit_usd=9.0)
            jobs = {}
            specs: list[tuple[str, str, dict[str, Any]]] = [
                ("alpha-done", "alpha", {"command": ["sh", "-c", "echo hello-from-alpha; echo line-two"]}),
                ("alpha-train", "alpha", {"command": ["sleep", "120"], "gpus": 1, "estimated_runtime_s": 120.0}),
                ("alpha-share", "alpha", {"command": ["sleep", "120"], "gpu_milli": 500}),
                ("beta-secret-train", "beta", {"command": ["sleep", "120"], "gpus": 2}),
                ("beta-secret-share", "beta", {"command": ["sleep", "120"], "gpu_milli": 250}),
                ("beta-secret-wait", "beta", {"command": ["sleep", "1"], "gpus": 4}),
                ("alpha-waits", "alpha", {"command": ["sleep", "1"], "gpus": 2}),
            ]
            for name, team, spec in specs:
                jobs[name] = c.submit(name=name, team=team, **spec).id
            jobs["beta-hostile"] = c.submit(name=HOSTILE, team="beta", command=["true"]).id  # text, never HTML
            c.wait(jobs["alpha-done"], timeout=60)
            for name in ("alpha-train", "alpha-share", "beta-secret-train", "beta-secret-share"):
                _wait_state(c, jobs[name], "RUNNING")
        yield Fleet(srv, member.token, doomed.token, doomed.id, jobs)
    finally:
        srv.stop()  # first: a server still up would restart the jobs killed under it
        srv.kill_jobs()


def _wait_state(c: Client, job_id: str, state: str, timeout: float = 30.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if c.get(job_id).state == state:
            return
        time.sleep(0.1)
    raise AssertionError(f"{job_id} is not {state}: {c.get(job_id)}")


class Guard:
    """Lets through only requests to the server (``data:``/``blob:`` stay in the page); counts the
    others (aborted) and records failed requests, HTTP errors and JavaScript errors."""

    LOAD_ERROR = "Failed to load resource: the server responded with a status of"

    def __init__(self, server_url: str) -> None:
        self.origin = urlsplit(server_url).netloc
        self.blocked: list[str] = []
        self.failed: list[str] = []
        self.errors: list[str] = []
        self.http_errors: list[tuple[int, str]] = []  # (status, path) of answers >= 400
        self.reloading = False  # set by a test around a reload, which aborts the calls in flight

    def allowed(self, url: str) -> bool:
        parts = urlsplit(url)
        return parts.scheme in ("data", "blob") or (parts.scheme == "http" and parts.netloc == self.origin)

    def route(self, r: Route) -> None:
        if self.allowed(r.request.url):
            r.continue_()
        else:
            self.blocked.append(r.request.url)
            r.abort("blockedbyclient")

    def request_failed(self, req: Request) -> None:
        # a followed log stream that the console stops (leaving the job's page) is aborted by design
        if "/logs" in req.url and "follow=true" in req.url and "ERR_ABORTED" in str(req.failure):
            return
        if self.reloading and "ERR_ABORTED" in str(req.failure):
            return
        self.failed.append(f"{req.url}: {req.failure}")

    def response(self, resp: Response) -> None:
        if resp.status >= 400:
            self.http_errors.append((resp.status, urlsplit(resp.url).path))

    def console(self, msg: ConsoleMessage) -> None:
        if msg.type == "error":
            self.errors.append(msg.text)

    def check(self, *, expected_http: frozenset[tuple[int, str]] = frozenset()) -> None:
        """No outside request, no failed one, no HTTP error but ``expected_http``, and no JavaScript
        error but the browser's own line for each expected HTTP error."""
        assert self.blocked == [], f"the console requested outside the server: {self.blocked}"
        assert self.failed == [], f"failed requests: {self.failed}"
        unexpected = [e for e in self.http_errors if e not in expected_http]
        assert unexpected == [], f"HTTP errors: {unexpected}"
        errors = [e for e in self.errors if not e.startswith(self.LOAD_ERROR)]
        assert errors == [], f"JavaScript console errors: {errors}"
        loads = len(self.errors) - len(errors)
        assert loads <= len(self.http_errors), f"resource errors without an HTTP error: {self.errors}"


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, timeout=60_000)
        try:
            yield b
        finally:
            b.close()


def guarded_page(browser: Browser, url: str) -> Iterator[tuple[Page, Guard]]:
    """A page of the console at ``url`` whose requests, console messages and errors a :class:`Guard` watches."""
    guard = Guard(url)
    context = browser.new_context(viewport={"width": 1360, "height": 900}, service_workers="block")
    try:
        context.route("**/*", guard.route)
        pg = context.new_page()
        pg.set_default_timeout(TIMEOUT_MS)
        pg.on("requestfailed", guard.request_failed)
        pg.on("console", guard.console)
        pg.on("response", guard.response)
        pg.on("pageerror", lambda e: guard.errors.append(f"uncaught: {e}"))
        yield pg, guard
    finally:
        context.close()


@pytest.fixture
def page(browser: Browser, fleet: Fleet) -> Iterator[tuple[Page, Guard]]:
    yield from guarded_page(browser, fleet.server.url)


def _login(pg: Page, url: str, token: str) -> None:
    pg.goto(url + "/ui/", wait_until="load")
    pg.fill("#token", token)
    pg.click("#login-button")
    expect(pg.locator("#whoami")).to_be_visible()


def _shot(pg: Page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    pg.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def _settled(pg: Page) -> None:
    """The page's first refresh is done (the live status says when it last updated)."""
    expect(pg.locator("#live-status")).to_contain_text("updated")


def _no_beta(pg: Page, fleet: Fleet, where: str) -> None:
    text = pg.content()
    leaked = [n for n in (*BETA_NAMES, *fleet.beta_ids) if n in text]
    assert not leaked, f"the member's {where} page shows the other team's {leaked}"


# -- served as static files, strictly -----------------------------------------------------------


def test_console_files_are_served_with_a_strict_policy(fleet: Fleet) -> None:
    url = fleet.server.url
    r = httpx.get(url + "/ui", timeout=30)
    assert r.status_code in (307, 308) and r.headers["location"].endswith("/ui/"), r.status_code
    r = httpx.get(url + "/ui/", timeout=30)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    csp = r.headers["content-security-policy"]
    assert "default-src 'self'" in csp and "script-src 'self'" in csp and "unsafe" not in csp
    assert r.headers["x-content-type-options"] == "nosniff"
    assert "set-cookie" not in r.headers
    outside = re.findall(r"""https?://[^\s"'<>)]+""", r.text)
    assert outside == [], f"the console names outside assets: {outside}"
    for asset in re.findall(r"""(?:src|href)=["']([^"']+)["']""", r.text):
        got = httpx.get(f"{url}/ui/{asset}", timeout=30)
        assert got.status_code == 200 and "content-security-policy" in got.headers, asset
    sources = sorted(STATIC.rglob("*.js"))
    assert len(sources) >= 8
    for path in sources:
        rel = path.relative_to(STATIC).as_posix()
        got = httpx.get(f"{url}/ui/{rel}", timeout=30)
        assert got.status_code == 200 and "javascript" in got.headers["content-type"], rel
        assert got.headers["content-security-policy"] == csp
        code = path.read_text()
        for banned in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function"):
            assert banned not in code, f"{rel} uses {banned}"
        for imported in re.findall(r"""from\s+["'](\S+?)["']""", code):
            assert imported.startswith("."), f"{rel} imports {imported} from outside the package"
            assert (path.parent / imported).resolve().is_file(), f"{rel} imports a missing {imported}"
    miss = httpx.get(url + "/ui/nosuch.js", timeout=30)
    assert miss.status_code == 404 and miss.headers["content-security-policy"] == csp


# -- the browser ----------------------------------------------------------------------------------


@needs_chromium
def test_a_bad_token_shows_the_login_error(page: tuple[Page, Guard], fleet: Fleet) -> None:
    pg, guard = page
    pg.goto(fleet.server.url + "/ui/", wait_until="load")
    pg.fill("#token", "gpf_not-a-real-token")
    pg.click("#login-button")
    error = pg.locator("#login-error")
    expect(error).to_be_visible()
    expect(error).to_contain_text("refused")
    expect(error).to_contain_text("invalid, expired or revoked token")
    assert pg.locator("#whoami").count() == 0
    assert pg.evaluate("sessionStorage.length") == 0  # a refused token is not kept
    _shot(pg, "login-error")
    guard.check(expected_http=frozenset({(401, "/v1/whoami")}))


@needs_chromium
def test_member_sees_only_its_team_submits_cancels_and_reads_logs(page: tuple[Page, Guard], fleet: Fleet) -> None:
    pg, guard = page
    url, jobs = fleet.server.url, fleet.jobs
    _login(pg, url, fleet.member)
    expect(pg.locator("#whoami")).to_contain_text("alpha")
    assert pg.evaluate("document.cookie") == ""
    guard.reloading = True
    pg.reload()  # the token is kept for the tab (sessionStorage): still signed in
    expect(pg.locator("#whoami")).to_contain_text("alpha")
    guard.reloading = False

    # queue: its own waiting job with the scheduler's reason; not the other team's
    expect(pg.locator(f'#page-queue tr[data-job="{jobs["alpha-waits"]}"]')).to_be_visible()
    expect(pg.locator("#queue-summary")).to_contain_text("waiting")
    _settled(pg)
    _no_beta(pg, fleet, "queue")
    _shot(pg, "queue")

    # jobs: its team's jobs only
    pg.click("#nav-jobs")
    table = pg.locator("#jobs-table")
    expect(table.locator('tr[data-name="alpha-train"]')).to_be_visible()
    for name in ("alpha-done", "alpha-share", "alpha-waits"):
        expect(table.locator(f'tr[data-name="{name}"]')).to_have_count(1)
    _no_beta(pg, fleet, "jobs")

    # submit through the form: it appears in the list
    pg.click("#submit-panel summary")
    pg.fill("#submit-command", "sleep 300")
    pg.fill("#submit-name", "console-submitted")
    pg.fill("#submit-gpus", "1")
    pg.select_option("#submit-priority", "low")
    pg.check("#submit-preemptible")
    pg.click("#submit-button")
    expect(pg.locator("#submit-result")).to_contain_text("Submitted")
    row = table.locator('tr[data-name="console-submitted"]')
    expect(row).to_be_visible()
    expect(row).to_contain_text("preemptible")
    _shot(pg, "jobs")
    with fleet.server.client() as c:
        submitted = next(j for j in c.list(team="alpha") if j.name == "console-submitted")
    assert submitted.command == ["sh", "-c", "sleep 300"] and submitted.priority == "low" and submitted.preemptible

    # cancel it (the button asks once more) and see CANCELLED
    row.locator('button[data-action="cancel"]').click()
    expect(row.locator('button[data-action="cancel"]')).to_have_text("Really cancel?")
    row.locator('button[data-action="cancel"]').click()
    expect(table.locator('tr[data-name="console-submitted"] .badge')).to_have_text("CANCELLED")
    expect(pg.locator("#jobs-notice")).to_contain_text("cancelled")

    # a finished job's log, its events
    pg.click(f'a[href="#/jobs/{jobs["alpha-done"]}"]')
    expect(pg.locator("#job-log")).to_contain_text("hello-from-alpha")
    expect(pg.locator("#job-log")).to_contain_text("line-two")
    expect(pg.locator("#job-state")).to_have_text("SUCCEEDED")
    expect(pg.locator('[data-testid="events-table"]')).to_contain_text("submitted")
    _shot(pg, "job-done")

    # follow a running job's log as it is written (follow=true, read from the stream): the job
    # prints a line, waits for the test to see it in the page, then prints another and ends
    go = fleet.server.home.parent / "console-go"
    wait = f"i=0; while [ ! -e {go} ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done"
    script = f"echo tick-1; {wait}; echo tick-2-after-go"
    with fleet.server.client(fleet.member) as c:
        ticker = c.submit(name="alpha-ticker", command=["sh", "-c", script]).id
    pg.goto(f"{url}/ui/#/jobs/{ticker}")
    log = pg.locator("#job-log")
    expect(log).to_contain_text("tick-1")
    expect(pg.locator("#log-state")).to_have_text("following…")
    assert "tick-2" not in log.inner_text()
    go.touch()
    expect(log).to_contain_text("tick-2-after-go")  # arrived on the open stream
    expect(pg.locator("#job-state")).to_have_text("SUCCEEDED")
    expect(pg.locator("#log-state")).to_have_text("end of log")
    assert log.inner_text().count("tick-1") == 1  # nothing sent twice
    _shot(pg, "job-logs")

    # a running job's page, with its cost so far, and a cancel button
    pg.goto(f"{url}/ui/#/jobs/{jobs['alpha-train']}")
    expect(pg.locator("#job-state")).to_have_text("RUNNING")
    expect(pg.locator("#job-cancel")).to_be_visible()
    expect(pg.locator("#job-forecast")).to_contain_text("spent")
    expect(pg.locator("#job-log")).to_contain_text("gpufleet run 1 started")
    _shot(pg, "job-running")
    _no_beta(pg, fleet, "job")

    # another team's job: the same answer as a missing one
    pg.goto(f"{url}/ui/#/jobs/{jobs['beta-secret-train']}")
    expect(pg.locator("#job-facts")).to_contain_text("No job")
    assert "beta-secret-train" not in pg.content()

    # nodes: the GPU map, the other team's shares shown without their ids
    pg.click("#nav-nodes")
    node = pg.locator("article.node")
    expect(node).to_have_count(1)
    expect(node.locator(".gpu")).to_have_count(4)
    expect(node.locator(f'.seg[data-job="{jobs["alpha-train"]}"]')).to_have_count(1)
    expect(node.locator(f'.seg[data-job="{jobs["alpha-share"]}"]')).to_have_count(1)
    expect(node.locator(".seg.hidden-job")).to_have_count(3)  # beta's 2 whole GPUs and its fraction
    _settled(pg)
    _no_beta(pg, fleet, "nodes")
    _shot(pg, "nodes")

    # cost: the chart over time and the breakdown, for its own team
    pg.click("#nav-cost")
    pg.select_option("#cost-range", "1h")
    expect(pg.locator("#cost-time figcaption")).to_contain_text("per 5 min by team over the last hour")
    expect(pg.locator("#cost-time svg.chart")).to_be_visible()
    expect(pg.locator('[data-testid="cost-table"]')).to_contain_text("alpha")
    expect(pg.locator("#cost-cards")).to_contain_text("GPU utilization")
    pg.select_option("#cost-dimension", "job")
    expect(pg.locator("#cost-time figcaption")).to_contain_text("by job over the last hour")
    expect(pg.locator('[data-testid="cost-table"]')).to_contain_text(jobs["alpha-train"])
    _no_beta(pg, fleet, "cost")
    _shot(pg, "cost")

    # budgets: its team's budget with spend, limit, projection and state; not the other team's
    pg.click("#nav-budgets")
    budget = pg.locator('article.budget[data-budget="alpha-monthly"]')
    expect(budget).to_be_visible()
    expect(budget).to_contain_text("$5.00")
    expect(budget.locator('[data-testid="budget-state"]')).to_have_text(re.compile(r"on track|crossed|over"))
    expect(budget.locator("svg.gauge")).to_be_visible()
    expect(pg.locator('article.budget[data-budget="beta-monthly"]')).to_have_count(0)
    _no_beta(pg, fleet, "budgets")
    _shot(pg, "budgets")

    # advice: recommendations (none yet, said so), anomalies, ROI
    pg.click("#nav-advice")
    expect(pg.locator('[data-testid="recommendations-table"]')).to_be_visible()
    expect(pg.locator("#roi")).to_contain_text("Fixed on-demand cluster")
    _settled(pg)
    _no_beta(pg, fleet, "advice")
    _shot(pg, "advice")

    # the other team's job was asked for once, by its id in the address: a 404 (and nothing else failed)
    beta = jobs["beta-secret-train"]
    guard.check(expected_http=frozenset({(404, f"/v1/jobs/{beta}")}))


@needs_chromium
def test_admin_sees_every_team(page: tuple[Page, Guard], fleet: Fleet) -> None:
    pg, guard = page
    _login(pg, fleet.server.url, fleet.server.token)
    pg.click("#nav-jobs")
    table = pg.locator("#jobs-table")
    for name in ("alpha-train", "beta-secret-train", "beta-secret-wait"):
        expect(table.locator(f'tr[data-name="{name}"]')).to_have_count(1)
    expect(table.locator("td.job-name", has_text=HOSTILE)).to_have_count(1)  # the literal text
    assert table.locator("td.job-name img, td.job-name b").count() == 0
    assert pg.evaluate("window.__pwned") is None
    pg.click("#nav-nodes")
    for name in ("beta-secret-train", "beta-secret-share", "alpha-train"):
        expect(pg.locator(f'.seg[data-job="{fleet.jobs[name]}"]').first).to_be_visible()
    expect(pg.locator(".seg.hidden-job")).to_have_count(0)
    _shot(pg, "admin-nodes")
    pg.click("#nav-cost")
    pg.select_option("#cost-range", "1h")
    expect(pg.locator("#cost-time figcaption")).to_contain_text("by team over the last hour")
    expect(pg.locator('[data-testid="cost-table"]')).to_contain_text("beta")
    _shot(pg, "admin-cost")
    pg.click("#nav-queue")
    expect(pg.locator(f'#page-queue tr[data-job="{fleet.jobs["beta-secret-wait"]}"]')).to_be_visible()
    _shot(pg, "admin-queue")
    guard.check()


@needs_chromium
def test_a_viewer_reads_only_and_a_revoked_token_returns_to_the_login(page: tuple[Page, Guard], fleet: Fleet) -> None:
    pg, guard = page
    _login(pg, fleet.server.url, fleet.doomed)
    expect(pg.locator("#whoami")).to_contain_text("viewer")
    pg.click("#nav-jobs")
    expect(pg.locator('#jobs-table tr[data-name="alpha-train"]')).to_be_visible()
    assert pg.locator("#submit-panel").count() == 0  # a viewer neither submits ...
    assert pg.locator('button[data-action="cancel"]').count() == 0  # ... nor cancels
    _no_beta(pg, fleet, "viewer's jobs")
    with fleet.server.client() as c:
        c.revoke_token(fleet.doomed_id)
    error = pg.locator("#login-error")
    expect(error).to_be_visible(timeout=20_000)  # the next live refresh gets a 401
    expect(error).to_contain_text("sign in again")
    assert pg.evaluate("sessionStorage.length") == 0
    assert {status for status, _ in guard.http_errors} == {401}
    guard.check(expected_http=frozenset(guard.http_errors))


def _switch(pg: Page, url: str, token: str) -> None:
    """Sign out and sign in again with ``token``, then open the proposals page."""
    if pg.locator("#sign-out").count():
        pg.click("#sign-out")  # back to the login page of the same tab: the next sign-in opens this page again
        pg.fill("#token", token)
        pg.click("#login-button")
        expect(pg.locator("#whoami")).to_be_visible()
    else:
        _login(pg, url, token)
        pg.click("#nav-proposals")
    expect(pg.locator("#nav-proposals")).to_have_class("active")


def _money(x: float) -> str:
    """The console's money(): $1,234.56 (four digits under a cent), a minus sign for negatives."""
    a = abs(x) if abs(x) >= 5e-5 else 0.0
    text = f"${a:,.4f}" if 0 < a < 0.01 else f"${a:,.2f}"
    return ("\u2212" if x < 0 and a > 0 else "") + text


@needs_chromium
def test_proposals_are_approved_rejected_and_never_self_approved(page: tuple[Page, Guard], fleet: Fleet) -> None:
    """An agent (a member token of alpha) proposes through the SDK; in the console a viewer sees the
    pending proposals without a button, the agent's own approval is refused (403 self_approval)
    and shown, another member approves the job resize, an admin approves the budget change and
    rejects the quota change with a reason; the API shows the targets changed, and the page the
    measured effect next to the estimate."""
    pg, guard = page
    url = fleet.server.url
    with fleet.server.client() as admin:
        agent_tok = admin.create_token(team="alpha", role="member", name="cost-agent")
        reader = admin.create_token(team="alpha", role="viewer", name="alpha-reader")
        # every whole GPU is held (alpha-train, beta-secret-train, the shared one): this one waits
        big = admin.submit(name="alpha-big-ask", team="alpha", command=["sleep", "120"], gpus=4).id
        assert admin.get(big).state == "PENDING"
        quota_before = admin.team("alpha").quota_gpus
        beta_p = admin.propose(
            "change_budget", "beta-monthly", {"limit_usd": 8.0}, "beta-secret-rationale", {"monthly_savings_usd": 1.0}
        )
    with fleet.server.client(agent_tok.token) as agent:
        p_resize = agent.propose(
            "resize",
            big,
            {"gpus": 2},
            "4 GPUs asked, 2 enough for this batch size",
            {"monthly_savings_usd": 11688.0, "confidence": 0.7, "basis": "2 GPUs x $8/h x 730.5 h"},
            effect_window_s=2.0,
        )
        p_budget = agent.propose(
            "change_budget",
            "alpha-monthly",
            {"limit_usd": 4.0},
            "alpha spends far under its limit",
            {"monthly_savings_usd": 0.5, "confidence": 0.4, "basis": "a tighter alert"},
            effect_window_s=2.0,
        )
        p_quota = agent.propose(
            "change_quota", "alpha", {"quota_gpus": {"*": 2}}, "cap alpha at 2 GPUs", {"monthly_savings_usd": 2.0}
        )
        p_later = agent.propose(
            "change_budget", "alpha-monthly", {"limit_usd": 6.0}, "left for later", {"monthly_savings_usd": 0.25}
        )
    alpha_ids = [p.id for p in (p_resize, p_budget, p_quota, p_later)]
    pending = pg.locator("#proposals-pending")
    decided = pg.locator("#proposals-decided")

    # a viewer: every pending alpha proposal, its rationale and estimate, and no button at all
    _switch(pg, url, reader.token)
    for pid in alpha_ids:
        expect(pending.locator(f'tr[data-proposal="{pid}"]')).to_have_count(1)
    row = pending.locator(f'tr[data-proposal="{p_resize.id}"]')
    expect(row).to_contain_text("resize")
    expect(row).to_contain_text("gpus=2")
    expect(row.locator('[data-field="rationale"]')).to_contain_text("2 enough for this batch size")
    expect(row.locator('[data-field="change"]')).to_have_text("would change gpus: 4 → 2")
    expect(row.locator('[data-field="estimate"]')).to_have_text("$11,688.00/mo")
    expect(row.locator('[data-field="confidence"]')).to_have_text("70%")
    expect(row.locator('[data-field="proposed-by"]')).to_contain_text(agent_tok.id)
    assert pg.locator("#page-proposals button").count() == 0
    assert beta_p.id not in pg.content() and "beta-secret-rationale" not in pg.content()

    # the agent: a member sees Approve on its team's job action, not on budget or quota changes;
    # approving its own proposal (two clicks) is refused by the API, and the page says so
    _switch(pg, url, agent_tok.token)
    row = pending.locator(f'tr[data-proposal="{p_resize.id}"]')
    expect(row.locator('[data-field="proposed-by"]')).to_contain_text("you")
    for pid in (p_budget.id, p_quota.id, p_later.id):
        expect(pending.locator(f'tr[data-proposal="{pid}"]')).to_have_count(1)
        assert pending.locator(f'tr[data-proposal="{pid}"] button').count() == 0
    approve = row.locator('button[data-action="approve"]')
    approve.click()
    expect(approve).to_have_text("Really approve?")
    approve.click()
    expect(pg.locator("#proposals-notice")).to_contain_text(f"Approval of {p_resize.id} refused")
    expect(pg.locator("#proposals-notice")).to_contain_text("cannot be approved by the token that proposed it")
    expect(pg.locator("#proposals-notice")).to_have_class(re.compile(r"\bbad\b"))
    with fleet.server.client() as admin:
        assert admin.proposal(p_resize.id).state == "pending"
        assert admin.get(big).state == "PENDING"

    # another member of alpha approves the resize: executed, the job replaced by a 2-GPU one
    _switch(pg, url, fleet.member)
    row = pending.locator(f'tr[data-proposal="{p_resize.id}"]')
    approve = row.locator('button[data-action="approve"]')
    approve.click()
    expect(approve).to_have_text("Really approve?")
    approve.click()
    expect(pg.locator("#proposals-notice")).to_contain_text(f"Approved {p_resize.id}: executed")
    done = decided.locator(f'tr[data-proposal="{p_resize.id}"]')
    expect(done.locator(".badge")).to_have_text("executed")
    expect(done.locator('[data-field="decided-by"]')).to_contain_text("you")
    expect(pending.locator(f'tr[data-proposal="{p_resize.id}"]')).to_have_count(0)
    assert beta_p.id not in pg.content() and "beta-secret-rationale" not in pg.content()
    with fleet.server.client() as admin:
        out = admin.proposal(p_resize.id)
        assert out.state == "executed" and out.result_job_id and out.decided_by != agent_tok.id
        assert admin.get(big).state == "CANCELLED"
        replacement = admin.get(out.result_job_id)
        assert (replacement.gpus, replacement.team, replacement.name) == (2, "alpha", "alpha-big-ask")
    expect(done.locator('[data-field="result"]')).to_contain_text(out.result_job_id)

    # an admin: approves the budget change, rejects the quota change with a reason
    _switch(pg, url, fleet.server.token)
    expect(pending.locator(f'tr[data-proposal="{beta_p.id}"]')).to_have_count(1)  # every team's
    expect(pending.locator(f'tr[data-proposal="{p_quota.id}"] [data-field="proposed-by"]')).to_contain_text(
        "cost-agent"
    )
    row = pending.locator(f'tr[data-proposal="{p_budget.id}"]')
    approve = row.locator('button[data-action="approve"]')
    approve.click()
    expect(approve).to_have_text("Really approve?")
    approve.click()
    expect(pg.locator("#proposals-notice")).to_contain_text(f"Approved {p_budget.id}: executed")
    expect(decided.locator(f'tr[data-proposal="{p_budget.id}"] .badge')).to_have_text("executed")
    with fleet.server.client() as admin:
        assert admin.budget("alpha-monthly").limit_usd == 4.0

    row = pending.locator(f'tr[data-proposal="{p_quota.id}"]')
    reject = row.locator('button[data-action="reject"]')
    reason = row.locator('input[data-field="reason"]')
    expect(reason).to_be_hidden()
    reject.click()  # asks for the reason
    expect(reject).to_have_text("Really reject?")
    expect(reason).to_be_visible()
    reject.click()  # no reason given: not sent
    expect(pg.locator("#proposals-notice")).to_contain_text("needs a reason")
    reason.fill("quotas are set at the quarterly review")
    reject.click()
    expect(pg.locator("#proposals-notice")).to_contain_text(f"Rejected {p_quota.id}")
    gone = decided.locator(f'tr[data-proposal="{p_quota.id}"]')
    expect(gone.locator(".badge")).to_have_text("rejected")
    expect(gone.locator('[data-field="result"]')).to_contain_text("quotas are set at the quarterly review")
    with fleet.server.client() as admin:
        out = admin.proposal(p_quota.id)
        assert (out.state, out.reason) == ("rejected", "quotas are set at the quarterly review")
        assert admin.team("alpha").quota_gpus == quota_before  # nothing changed

    # the measured effect (2 s either side of the execution) next to the estimate, on the next refresh
    row = decided.locator(f'tr[data-proposal="{p_budget.id}"]')
    expect(row.locator('[data-field="before"]')).to_contain_text("/h", timeout=20_000)
    with fleet.server.client() as admin:
        m = admin.proposal(p_budget.id)
    assert m.measured is not None and m.estimate_error_usd is not None
    expect(row.locator('[data-field="before"]')).to_contain_text(f"{_money(m.measured.before_usd_per_hour)}/h")
    expect(row.locator('[data-field="after"]')).to_contain_text(f"{_money(m.measured.after_usd_per_hour)}/h")
    expect(row.locator('[data-field="measured"]')).to_contain_text(f"{_money(m.measured.monthly_savings_usd)}/mo")
    expect(row.locator('[data-field="error"]')).to_have_text(f"{_money(m.estimate_error_usd)}/mo")
    expect(row.locator('[data-field="estimate"]')).to_have_text("$0.50/mo")
    expect(pending.locator(f'tr[data-proposal="{p_later.id}"] button[data-action="approve"]')).to_be_visible()
    _shot(pg, "proposals")
    guard.check(expected_http=frozenset({(403, f"/v1/proposals/{p_resize.id}/approve")}))


@needs_chromium
def test_mig_slices_on_the_gpu_map(page: tuple[Page, Guard], tmp_path: Path) -> None:
    """A node in MIG mode: /v1/nodes names each slice's profile and memory slices, and the map
    draws the eight memory slices of each GPU with the slices jobs hold."""
    pg, guard = page
    srv = ServerProcess(tmp_path / "home", gpus="2xA100-80GB:mig").start()
    guard.origin = urlsplit(srv.url).netloc
    try:
        with srv.client() as c:
            big = c.submit(name="mig-big", command=["sleep", "120"], mig="3g.40gb").id
            small = c.submit(name="mig-small", command=["sleep", "120"], mig="1g.10gb").id
            _wait_state(c, big, "RUNNING")
            _wait_state(c, small, "RUNNING")
        nodes = httpx.get(srv.url + "/v1/nodes", headers={"Authorization": f"Bearer {srv.token}"}, timeout=30).json()
        shares = {s["job_id"]: s for g in nodes[0]["gpus"] for s in g["shares"]}
        assert (shares[big]["mig"], shares[small]["mig"]) == ("3g.40gb", "1g.10gb")
        assert bin(shares[big]["mig_mask"]).count("1") == 4 and bin(shares[small]["mig_mask"]).count("1") == 1
        assert shares[big]["milli"] == round(1000 * 3 / 7)

        _login(pg, srv.url, srv.token)
        pg.click("#nav-nodes")
        bars = pg.locator(".gpu-bar.mig")
        expect(bars).to_have_count(2)
        expect(pg.locator(f'.seg[data-job="{big}"]')).to_have_text("3g.40gb")  # its 4 memory slices, as one
        expect(pg.locator(f'.seg[data-job="{small}"]')).to_have_text("1g.10gb")
        expect(pg.locator("ul.holders")).to_contain_text(f"{big} (default) — MIG 3g.40gb on GPU")
        expect(pg.locator(".gpu-bar.mig .seg.free")).to_have_count(16 - 5)
        _shot(pg, "nodes-mig")
        guard.check()
    finally:
        srv.stop()  # first: a server still up would restart the jobs killed under it
        srv.kill_jobs()
