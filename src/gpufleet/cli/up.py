"""``gpufleet up``: start the API server and the controller (the main job)."""

import logging
from pathlib import Path
from typing import Annotated

import typer

from gpufleet.cli.common import console, handle_errors


@handle_errors
def up(
    config: Annotated[Path | None, typer.Option("--config", "-c", help="settings YAML file")] = None,
    db: Annotated[
        str | None,
        typer.Option(
            help="store URL without a password, e.g. postgresql+psycopg://user@host/db (a password: $GPUFLEET_DB, "
            "--db-file or ~/.pgpass; the command line is readable by every account)"
        ),
    ] = None,
    db_file: Annotated[
        Path | None, typer.Option(help="a file only this account can read (chmod 600) holding the store URL")
    ] = None,
    host: Annotated[str | None, typer.Option(help="address to listen on (default 127.0.0.1)")] = None,
    port: Annotated[int | None, typer.Option(help="port to listen on (default 8470)")] = None,
    gpus: Annotated[
        str | None, typer.Option(help="declare GPUs instead of discovering them with NVML, e.g. 8xA100-80GB")
    ] = None,
    home: Annotated[Path | None, typer.Option(help="state directory (default: GPUFLEET_HOME or user data dir)")] = None,
    node_name: Annotated[str | None, typer.Option(help="this server's node name (default: the host name)")] = None,
    backend: Annotated[
        str | None,
        typer.Option(
            help="local (this machine's GPUs, the default) or kubernetes (a cluster: the settings' kubernetes: part)"
        ),
    ] = None,
    log_level: Annotated[str | None, typer.Option(help="critical|error|warning|info|debug")] = None,
    workers: Annotated[
        int | None, typer.Option(help="API worker processes (default 1: API and scheduler share one process)")
    ] = None,
    jobs_as_server: Annotated[
        bool | None,
        typer.Option(
            "--jobs-as-server/--jobs-as-owners",
            help="single-user use: run jobs that have no Unix account as this server's own user (they can read "
            "its store and token). Default: jobs run only as their owners' accounts (needs root)",
        ),
    ] = None,
) -> None:
    """Start the API server and the scheduler on this machine (SQLite + local GPUs by default)."""
    from gpufleet.io.ports import check_port
    from gpufleet.server.host import build_server
    from gpufleet.server.settings import load_settings
    from gpufleet.store.db import refuse_url_on_command_line

    settings = load_settings(
        config,
        db=refuse_url_on_command_line(db),
        db_file=db_file,
        host=host,
        port=port,
        gpus=gpus,
        home=home,
        node_name=node_name,
        backend=backend,
        log_level=log_level,
        api_workers=workers,
        jobs_as_server=jobs_as_server,
    )
    logging.basicConfig(level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("alembic").setLevel(max(logging.WARNING, logging.getLogger().level))
    check_port(settings.host, settings.port)  # before anything starts or is written
    if settings.webhook.enabled:  # the admission webhook's own HTTPS port, likewise
        check_port(settings.webhook.host or settings.host, settings.webhook.port)
    server = build_server(settings)
    nodes = server.controller.backend.inventory()
    gpu_desc = ", ".join(f"{n.name}: {n.gpu_count}x{n.gpu_model or 'no GPU'}" for n in nodes) or "none"
    console.print(f"[bold]gpufleet[/] serving on [cyan]{settings.url}[/]  (API docs: {settings.url}/docs)")
    console.print(f"  store   {server.db.masked_url}")
    console.print(f"  GPUs    {gpu_desc}")
    console.print(f"  jobs    {server.policy.describe()}")
    if settings.webhook.enabled:
        w = settings.webhook
        where = f"{w.host or settings.host}:{w.port}"
        console.print(f"  webhook https://{where}/validate (admission; failurePolicy {w.failure_policy})")
    if server.admin_token_path is not None:
        console.print(f"  token   {server.admin_token_path} (admin; the CLI finds it)")
    console.print("  try     gpufleet submit --gpus 1 -- python -c 'print(42)'")
    server.serve()
