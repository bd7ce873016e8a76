"""``/docs`` works without internet: a real ``gpufleet up`` on 127.0.0.1, its page opened in
Debian's headless Chromium (driven by Playwright, never a browser Playwright downloads), every
request that leaves the server blocked and recorded.

Checks: the HTML names no asset outside the server and each asset it names is served; Swagger UI
renders the operations list (known paths such as ``/v1/jobs`` among them) with no request to
another host and none failed; a screenshot of it is a real PNG of the rendered page, not a blank
one; ``/redoc`` (a CDN page in FastAPI's default) is not served.

Skipped only where ``/usr/bin/chromium`` is missing (``make test`` installs it: ``system-deps``).
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from playwright.sync_api import Page, Route, sync_playwright

from tests.support.serverproc import ServerProcess

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
# Operations every build of the API has; each must be listed on the page.
KNOWN_PATHS = ("/v1/jobs", "/v1/jobs/{job_id}", "/v1/queue", "/v1/nodes", "/v1/teams", "/v1/whoami")
TIMEOUT_MS = 60_000  # a loaded CI machine (2 cores, the suite beside it) starts Chromium slowly

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not CHROMIUM.exists(),
        reason="no /usr/bin/chromium (Debian: apt-get install chromium; `make test` installs it)",
    ),
]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    srv = ServerProcess(tmp_path_factory.mktemp("docs") / "home", gpus="1xA100-80GB").start()
    try:
        yield srv
    finally:
        srv.stop()


class Guard:
    """A Chromium page that lets through only requests to the server (``data:``/``blob:`` URLs stay
    in the page) and records every other one it blocks."""

    def __init__(self, server_url: str) -> None:
        self.origin = urlsplit(server_url).netloc
        self.blocked: list[str] = []
        self.failed: list[str] = []

    def allowed(self, url: str) -> bool:
        parts = urlsplit(url)
        return parts.scheme in ("data", "blob") or (parts.scheme == "http" and parts.netloc == self.origin)


@pytest.fixture
def page(server: ServerProcess) -> Iterator[tuple[Page, Guard]]:
    guard = Guard(server.url)

    def route(r: Route) -> None:
        if guard.allowed(r.request.url):
            r.continue_()
        else:
            guard.blocked.append(r.request.url)
            r.abort("blockedbyclient")

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, timeout=TIMEOUT_MS)
        try:
            context = browser.new_context(viewport={"width": 1280, "height": 1000}, service_workers="block")
            context.route("**/*", route)
            pg = context.new_page()
            pg.set_default_timeout(TIMEOUT_MS)
            pg.on("requestfailed", lambda req: guard.failed.append(f"{req.url}: {req.failure}"))
            yield pg, guard
        finally:
            browser.close()


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return int(width), int(height)


def test_docs_html_names_no_outside_asset(server: ServerProcess) -> None:
    r = httpx.get(server.url + "/docs", timeout=30)
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/html")
    outside = [u for u in re.findall(r"""https?://[^\s"'<>)]+""", r.text) if not u.startswith(server.url)]
    assert outside == [], f"/docs loads assets from outside the server: {outside}"
    for asset in re.findall(r"""(?:src|href)=["']([^"']+)["']""", r.text):
        assert asset.startswith("/docs-static/"), asset
        got = httpx.get(server.url + asset, timeout=30)
        assert got.status_code == 200 and len(got.content) > 1000, (asset, got.status_code)


def test_swagger_ui_lists_operations_offline(page: tuple[Page, Guard], server: ServerProcess, tmp_path: Path) -> None:
    pg, guard = page
    response = pg.goto(server.url + "/docs", wait_until="load")
    assert response is not None and response.status == 200
    pg.wait_for_selector(".opblock .opblock-summary-path", state="visible")
    pg.wait_for_load_state("networkidle")

    paths = {p.strip().replace("\u200b", "") for p in pg.locator(".opblock .opblock-summary-path").all_inner_texts()}
    missing = [p for p in KNOWN_PATHS if p not in paths]
    assert not missing, f"operations not listed: {missing} (listed: {sorted(paths)})"
    assert pg.locator(".opblock").count() >= 20  # the whole API, not a few stray blocks
    assert pg.locator(".opblock-tag").count() >= 3  # grouped by tag (jobs, queue, nodes, ...)
    assert "gpufleet" in pg.locator(".information-container .title").inner_text()
    assert pg.locator(".errors-wrapper").count() == 0  # the document parsed without errors

    shot = tmp_path / "docs.png"
    pg.screenshot(path=str(shot))
    data = shot.read_bytes()
    assert _png_size(data) == (1280, 1000)
    # a blank page of this size compresses to a few KB; a rendered operations list is far larger
    assert len(data) > 30_000, f"{shot} is only {len(data)} bytes: is the page blank?"
    print(f"screenshot of /docs: {shot}")

    assert guard.blocked == [], f"/docs requested outside the server: {guard.blocked}"
    assert guard.failed == [], f"/docs had failed requests: {guard.failed}"


def test_no_page_loads_assets_from_a_cdn(server: ServerProcess) -> None:
    """FastAPI's default ``/redoc`` loads ReDoc from jsDelivr (and ReDoc's bundle its logo from
    cdn.redoc.ly): it is not served."""
    assert httpx.get(server.url + "/redoc", timeout=30).status_code == 404
