"""What every command shares: error handling at the boundary and the consoles.

Light on purpose: every ``gpufleet`` call imports this module, so it imports only Typer, Rich's
console and :mod:`gpufleet.errors` (the exit codes and their mapping live in :mod:`.render`).
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

import typer
from rich.console import Console

from gpufleet.errors import GpufleetError

P = ParamSpec("P")
R = TypeVar("R")

console = Console()
err_console = Console(stderr=True)


def _flags_take_no_value() -> None:
    """Typer 0.2x prints ``<bool>`` in the type column of a flag (``--json <bool>``), as if it took a
    value. A flag (``--json``, ``--wait``, ``--help``) shows no type; every other option keeps its."""
    from typer.core import TyperOption

    shown = getattr(TyperOption, "display_type_rich", None)
    if shown is None:  # a Typer that renders flags without a type
        return

    def display_type_rich(self: TyperOption, ctx: Any) -> str | None:
        return None if self.is_flag and self.metavar is None else shown(self, ctx)

    TyperOption.display_type_rich = display_type_rich  # type: ignore[method-assign]


_flags_take_no_value()

EXIT_INPUT = 2  # bad input (file, config, argument); every code is listed in gpufleet.cli.render
EXIT_INTERRUPTED = 130  # Ctrl-C (128 + SIGINT), as shells report it


def fail(message: str, code: int = EXIT_INPUT) -> typer.Exit:
    err_console.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    return typer.Exit(code)


def handle_errors(fn: Callable[P, R]) -> Callable[P, R]:
    """Every command's error boundary (the one decorator for local and API commands alike): a gpufleet
    error becomes one clear line on stderr and the exit code of its family (2 bad input, 3 not found,
    5 unavailable...: :func:`gpufleet.cli.render.exit_code_for`); Ctrl-C exits 130."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except GpufleetError as e:
            from gpufleet.cli.render import report_error

            raise typer.Exit(report_error(e)) from None
        except KeyboardInterrupt:
            err_console.print("interrupted")
            sys.exit(EXIT_INTERRUPTED)

    return wrapper
