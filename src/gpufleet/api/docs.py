"""The interactive API documentation, ``/docs`` (Swagger UI), served by this server alone: no
request to a CDN, so it works on a machine without internet.

FastAPI's own page loads Swagger UI from jsDelivr and its favicon from fastapi.tiangolo.com. Here
the app is created with ``docs_url=None`` and this page takes its JavaScript, CSS and favicon from
the package ``fastapi-offline`` (made for this: it vendors ``swagger-ui-dist`` 5), mounted as static
files under :data:`STATIC_URL`. Every asset URL is a path on this server (behind a proxy, prefixed
with the ASGI ``root_path``), and the validator badge (which would send the document to
validator.swagger.io) is off.

There is no ``/redoc``: ReDoc's standalone bundle fetches its logo from cdn.redoc.ly whatever it is
told, so it cannot be served offline; ``/openapi.json`` is the document for any other viewer.
"""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.staticfiles import StaticFiles
from starlette.responses import HTMLResponse

DOCS_URL = "/docs"
STATIC_URL = "/docs-static"
# (package, folder inside it) holding swagger-ui-bundle.js, swagger-ui.css and favicon.png.
ASSETS_PACKAGE = ("fastapi_offline", "static")


def install(app: FastAPI) -> None:
    """Serve ``/docs`` and its assets on ``app``, which must have been created with
    ``docs_url=None, redoc_url=None`` (FastAPI's pages load their assets from CDNs)."""
    if app.docs_url is not None or app.redoc_url is not None:
        raise ValueError("create the app with docs_url=None and redoc_url=None: gpufleet serves its own /docs")
    app.mount(STATIC_URL, StaticFiles(packages=[ASSETS_PACKAGE]), name="docs-static")

    @app.get(DOCS_URL, include_in_schema=False)
    async def swagger_ui(request: Request) -> HTMLResponse:
        root = str(request.scope.get("root_path", "")).rstrip("/")
        return get_swagger_ui_html(
            openapi_url=f"{root}{app.openapi_url}",
            title=f"{app.title} - Swagger UI",
            swagger_js_url=f"{root}{STATIC_URL}/swagger-ui-bundle.js",
            swagger_css_url=f"{root}{STATIC_URL}/swagger-ui.css",
            swagger_favicon_url=f"{root}{STATIC_URL}/favicon.png",
            oauth2_redirect_url=None,  # bearer tokens only: no OAuth2 flow to return to
            swagger_ui_parameters={"validatorUrl": None, **(app.swagger_ui_parameters or {})},
        )
