"""Simulation results as files: the CSV tables and the JSON document of a :class:`SimResult`."""

from __future__ import annotations

from pathlib import Path

from gpufleet.errors import InputError
from gpufleet.sim.results import SimResult


def write_csv(result: SimResult, directory: str | Path) -> tuple[Path, Path]:
    """Write ``jobs.csv`` and ``timeseries.csv`` (creating ``directory``); empty cell = None."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    tables = result.csv_tables()
    for name, text in tables.items():
        with open(out / name, "w", newline="", encoding="utf-8") as fh:
            fh.write(text)
    return out / "jobs.csv", out / "timeseries.csv"


def write_json(result: SimResult, path: str | Path) -> Path:
    """Write the whole result (summary included) as one JSON document."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w", encoding="utf-8") as fh:
        fh.write(result.to_json_text())
    return out


def read_json(path: str | Path) -> SimResult:
    """Read what :func:`write_json` wrote; a malformed file raises :class:`InputError`."""
    source = str(path)
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as exc:
        raise InputError(f"cannot read result: {exc.strerror or exc}", source=source) from None
    except UnicodeDecodeError as exc:
        raise InputError(f"not JSON: {exc.reason}", source=source) from None
    return SimResult.from_json_text(text, source=source)


__all__ = ["read_json", "write_csv", "write_json"]
