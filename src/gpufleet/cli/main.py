"""The ``gpufleet`` command. Commands are thin: parse, call one function, render.

Start-up is kept light (``gpufleet --help`` is well under a second): the command modules import only
Typer, Rich and :mod:`gpufleet.errors` at the top; the SDK, the simulator, the cost engine, the
store and the server are imported in the bodies of the commands that use them. A test checks that
importing this module loads none of them.

Shell completion: ``gpufleet --install-completion`` (bash, zsh, fish, PowerShell), or
``gpufleet --show-completion`` to print the script and install it by hand.
"""

from typing import Annotated

import typer
from rich.markup import escape

from gpufleet import __version__
from gpufleet.cli import admin, insights, jobs, optimize
from gpufleet.cli.budget import budget_app
from gpufleet.cli.common import console, fail, handle_errors
from gpufleet.cli.cost import cost_app
from gpufleet.cli.db import db_app
from gpufleet.cli.experiment import experiment_app
from gpufleet.cli.k8s import k8s_app
from gpufleet.cli.mcp import mcp
from gpufleet.cli.proposals import proposals_app
from gpufleet.cli.render import EXIT_CODES_EPILOG, WIDE_HELP, Col, make_table, print_table
from gpufleet.cli.simulate import simulate
from gpufleet.cli.up import up

app = typer.Typer(
    name="gpufleet",
    help="Cost-aware GPU scheduler and cost manager.",
    epilog=EXIT_CODES_EPILOG,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=True,  # --install-completion / --show-completion
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


def version() -> None:
    """Print the version."""
    console.print(__version__)


@handle_errors
def prices(
    gpu: Annotated[
        str | None, typer.Option(help="only this GPU: a model (A100-80GB), a family (A100) or an offering (g5)")
    ] = None,
    path: Annotated[str | None, typer.Option(help="a price catalog CSV (default: the bundled one)")] = None,
    wide: Annotated[bool, typer.Option("--wide", help=WIDE_HELP)] = False,
) -> None:
    """Show the GPU price catalog with its provenance."""
    from gpufleet.io.catalog import load_catalog

    cat = load_catalog(path)
    entries = [e for e in cat.entries if gpu is None or _gpu_matches(gpu, e.gpu, e.offering)]
    if not entries:
        models = ", ".join(sorted({e.gpu for e in cat.entries}))
        raise fail(escape(f"--gpu: no entry of the catalog is a '{gpu}' (its GPU models: {models})"))
    cols = [
        Col("PROVIDER", hide=1),
        Col("REGION", cut="end", min_width=9),
        Col("OFFERING", cut="middle", min_width=10),
        Col("GPU"),
        *(Col(h, justify="right") for h in ("GPUS", "$/H", "SPOT $/H", "$/GPU-H")),
    ]
    rows = []
    for e in entries:
        spot = "–" if not e.has_spot else f"{e.spot_usd_per_hour_min:.4f}–{e.spot_usd_per_hour_max:.4f}"
        rows.append(
            [
                escape(e.provider),
                escape(e.region),
                escape(e.offering),
                escape(e.gpu),
                str(e.gpu_count),
                f"{e.on_demand_usd_per_hour:.4f}",
                spot,
                f"{e.on_demand_usd_per_hour / e.gpu_count:.4f}",
            ]
        )
    title = ["GPU prices", str(cat.provenance.path), f"sha256 {cat.provenance.sha256[:12]}"]
    print_table(make_table(cols, rows, title=title, wide=wide), wide=wide)
    for w in cat.warnings:
        console.print(f"[yellow]warning:[/] {escape(str(w))}")


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


# -- every command, registered here and only here --------------------------------------------------------
# ``gpufleet --help`` lists the commands, then the groups, each in the order registered here. A
# command's help is its function's docstring; a group's is its Typer's ``help``.

app.command("up")(up)
app.command("simulate")(simulate)
app.command("submit", context_settings={"allow_interspersed_args": False})(jobs.submit)  # `--` ends our options
app.command("ls")(jobs.ls)
app.command("show")(jobs.show)
app.command("logs")(jobs.logs)
app.command("cancel")(jobs.cancel)
app.command("wait")(jobs.wait)
app.command("queue")(jobs.queue)
app.command("nodes")(jobs.nodes)
app.command("usage")(admin.usage)
app.command("whoami")(admin.whoami)
app.command("optimize")(optimize.optimize)
app.command("whatif")(optimize.whatif)
app.command("roi")(optimize.roi_command)
app.command("forecast")(insights.forecast)
app.command("anomalies")(insights.anomalies)
app.command("mcp")(mcp)  # the MCP server for agents (imports the mcp package when it runs)
app.command("version")(version)
app.command("prices")(prices)

app.add_typer(db_app, name="db")
app.add_typer(experiment_app, name="experiment")
app.add_typer(k8s_app, name="k8s")
app.add_typer(admin.team_app, name="team")
app.add_typer(admin.token_app, name="token")
app.add_typer(cost_app, name="cost")  # gpufleet cost [...] and cost update-prices
app.add_typer(budget_app, name="budget")
app.add_typer(proposals_app, name="proposals")  # an agent's proposed actions: ls, show, approve, reject


if __name__ == "__main__":
    app()
