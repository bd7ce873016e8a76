"""The web console, ``/ui``: plain ES modules, CSS and an SVG icon shipped in the package
(``gpufleet/ui/static``), served as static files by this server — no CDN, no build step.

The console calls the same REST API as the CLI with the same bearer tokens: the token is typed into
its login page and kept in the tab's ``sessionStorage``; every call sends ``Authorization: Bearer``
and a 401 returns to the login page. No cookie is ever set, so there is no ambient credential for a
cross-site request to ride on (no CSRF surface). Every response under ``/ui`` carries a strict
Content-Security-Policy (scripts, styles, images and calls from this origin only; no inline script,
no ``eval``, no framing) and ``X-Content-Type-Options: nosniff``.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException
from starlette.responses import PlainTextResponse, Response
from starlette.types import Scope

UI_URL = "/ui"
STATIC_DIR = Path(__file__).resolve().parent.parent / "ui" / "static"

CONTENT_SECURITY_POLICY = "; ".join(
    (
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "connect-src 'self'",
        "font-src 'self'",
        "object-src 'none'",
        "base-uri 'none'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    )
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-cache",  # revalidate (ETag) so an upgraded server serves its own console
}


class ConsoleFiles(StaticFiles):
    """Static files with the console's security headers on every answer, a miss included."""

    async def get_response(self, path: str, scope: Scope) -> Response:
        try:
            response = await super().get_response(path, scope)
        except HTTPException as e:
            response = PlainTextResponse(str(e.detail), status_code=e.status_code, headers=e.headers)
        response.headers.update(SECURITY_HEADERS)
        return response


def install(app: FastAPI) -> None:
    """Serve the console at ``/ui/`` (``/ui`` redirects there) on ``app``."""
    if not (STATIC_DIR / "index.html").is_file():
        raise RuntimeError(f"the console's files are missing from the package ({STATIC_DIR})")
    app.mount(UI_URL, ConsoleFiles(directory=STATIC_DIR, html=True), name="ui")
