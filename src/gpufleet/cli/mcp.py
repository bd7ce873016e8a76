"""``gpufleet mcp``: the MCP server for AI agents (:mod:`gpufleet.agent`), over stdio or streamable HTTP.

The ``mcp`` package (the optional extra ``agent``) is imported when the command runs, never when
``gpufleet`` starts.
"""

from enum import StrEnum
from typing import Annotated

import typer

from gpufleet.cli.common import fail, handle_errors
from gpufleet.cli.jobs import TokenOpt, UrlOpt


class Transport(StrEnum):
    stdio = "stdio"
    http = "http"


@handle_errors
def mcp(
    transport: Annotated[
        Transport, typer.Option("--transport", help="stdio (a client starts this command) or http (streamable HTTP)")
    ] = Transport.stdio,
    host: Annotated[str, typer.Option("--host", help="http: the address to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="http: the port (the endpoint is /mcp)", min=1, max=65535)] = 8471,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """Serve gpufleet's cost tools to AI agents over MCP, acting with the caller's token.

    stdio: every call uses the token given here (--token, $GPUFLEET_TOKEN, else <home>/admin.token).
    http: each request's own 'Authorization: Bearer' token; the server holds none (--token is refused)."""
    try:
        import mcp as _sdk  # noqa: F401  (only to say clearly what is missing)
    except ImportError:
        raise fail("the MCP server needs the 'mcp' package: pip install 'gpufleet[agent]'") from None
    import warnings

    from gpufleet.agent.server import AgentSettings, serve
    from gpufleet.sdk.config import InsecureTokenFileWarning, resolve_token, resolve_url

    if transport is Transport.http:
        if token:
            raise fail(
                "--token: over HTTP each request sends its own token (Authorization: Bearer); the server holds none"
            )
        settings = AgentSettings(resolve_url(url), "http")
    else:
        with warnings.catch_warnings(record=True) as caught:  # stdout is the protocol: warnings go to stderr
            warnings.simplefilter("always", InsecureTokenFileWarning)
            resolved = resolve_token(token)
        for w in caught:
            typer.echo(f"warning: {w.message}", err=True)
        if not resolved:
            raise fail("no token: pass --token or set GPUFLEET_TOKEN")
        settings = AgentSettings(resolve_url(url), "stdio", resolved)
    if transport is Transport.http:
        typer.echo(f"gpufleet MCP server on http://{host}:{port}/mcp (API {settings.url})", err=True)
    serve(settings, host=host, port=port)
