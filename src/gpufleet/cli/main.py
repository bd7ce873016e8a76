"""The ``gpufleet`` command. Commands are thin: parse, call one function, render."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from gpufleet import __version__
from gpufleet.cli import cost, jobs
from gpufleet.cli.common import console, fail, handle_errors
from gpufleet.cli.db import db_app
from gpufleet.cli.experiment import experiment_app
from gpufleet.cli.simulate import simulate
from gpufleet.cli.up import up

app = typer.Typer(
    name="gpufleet",
    help="Cost-aware GPU scheduler and cost manager.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
def _version(value: bool) -> None:
    if value:
        console.print(__version__)
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """Cost-aware GPU scheduler and cost manager."""


app.command("up")(up)
app.add_typer(db_app, name="db", help="The store's schema: apply migrations, show the current one.")
app.command("simulate")(simulate)
app.add_typer(experiment_app, name="experiment", help="Reproducible experiments (e.g. FGD fragmentation).")
jobs.register(app)  # API client commands: submit, ls, show, logs, cancel, wait, queue, nodes, team, token, ...
cost.register(app)  # gpufleet cost [...] and cost update-prices
app.add_typer(__import__("gpufleet.cli.budget", fromlist=["budget_app"]).budget_app, name="budget")
__import__("gpufleet.cli.optimize", fromlist=["register"]).register(app)  # optimize, whatif, roi


@app.command()
def version() -> None:
    """Print the version."""
    console.print(__version__)


@app.command()
@handle_errors
def prices(
    gpu: Annotated[
        str | None, typer.Option(help="only this GPU: a model (A100-80GB), a family (A100) or an offering (g5)")
    ] = None,
    path: Annotated[str | None, typer.Option(help="a price catalog CSV (default: the bundled one)")] = None,
) -> None:
    """Show the GPU price catalog with its provenance."""
    from gpufleet.io.catalog import load_catalog

    cat = load_catalog(path)
    entries = [e for e in cat.entries if gpu is None or _gpu_matches(gpu, e.gpu, e.offering)]
    if not entries:
        models = ", ".join(sorted({e.gpu for e in cat.entries}))
        raise fail(f"--gpu: no entry of the catalog is a '{gpu}' (its GPU models: {models})")
    table = Table(title=f"GPU prices — {cat.provenance.path} (sha256 {cat.provenance.sha256[:12]})")
    for col in ("provider", "region", "offering", "gpu", "gpus", "on-demand $/h", "spot $/h", "$/GPU-h"):
        table.add_column(col)
    for e in entries:
        spot = "–" if not e.has_spot else f"{e.spot_usd_per_hour_min:.4f}–{e.spot_usd_per_hour_max:.4f}"
        table.add_row(e.provider, e.region, e.offering, e.gpu, str(e.gpu_count), f"{e.on_demand_usd_per_hour:.4f}",
                      spot, f"{e.on_demand_usd_per_hour / e.gpu_count:.4f}")
    console.print(table)
    for w in cat.warnings:
        console.print(f"[yellow]warning:[/] {w}")


def _gpu_matches(query: str, model: str, offering: str) -> bool:
    """Does ``--gpu query`` name this entry: its model (any spelling the GPU table knows), its
    family (``A100`` for ``A100-40GB`` and ``A100-80GB``) or the start of its offering (``g5``)?"""
    from gpufleet.model.gpu import canonical_gpu_name

    q = query.strip().lower()
    return bool(q) and (
        model == canonical_gpu_name(query)
        or model.lower() == q
        or model.lower().split("-")[0] == q
        or offering.lower().startswith(q)
    )


if __name__ == "__main__":
    app()
