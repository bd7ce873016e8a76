"""What every command shares: error handling at the boundary and the console."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import ParamSpec, TypeVar

import typer
from rich.console import Console

from gpufleet.errors import GpufleetError

P = ParamSpec("P")
R = TypeVar("R")

console = Console()
err_console = Console(stderr=True)

EXIT_INPUT = 2  # bad input (file, config, argument)


def fail(message: str, code: int = EXIT_INPUT) -> typer.Exit:
    err_console.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    return typer.Exit(code)


def handle_errors(fn: Callable[P, R]) -> Callable[P, R]:
    """Turn the root exception type into one clear line on stderr and exit code 2."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except GpufleetError as e:
            raise fail(e.message if not hasattr(e, "source") else str(e)) from None
        except KeyboardInterrupt:
            err_console.print("interrupted")
            sys.exit(130)

    return wrapper
