"""The README's architecture map is the real tree: every package of ``src/gpufleet/`` (a folder with an
``__init__.py``, one level down) has a row, every row names a package that exists, at the rank
``tests/project/test_layering.py`` gives it; the top-level modules and the data folders (no code) are named
too, and every source path the section mentions exists. A package added, removed or moved without
updating the map fails here.

The map is the first table of the README's ``## Architecture`` section, ``| rank | folder | holds |``:
the folder cell names packages as ``pkg/`` and top-level modules as ``module`` (in backticks); a rank
of ``data`` marks a folder that holds no code, ``—`` one outside the ranks (the SDK).
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.project.test_layering import RANKS
from tests.support.paths import REPO

ROOT = REPO
PKG = ROOT / "src" / "gpufleet"
HEADER = ["rank", "folder", "holds"]

_TICKED = re.compile(r"`([^`]+)`")
_PATH = re.compile(r"[A-Za-z0-9_.]+(?:/[A-Za-z0-9_.]+)*(?:\.py|/)")  # a file or a folder, not batch/v1


def _readme() -> str:
    return (ROOT / "README.md").read_text(encoding="utf-8")


def _section(readme: str) -> list[str]:
    lines = readme.splitlines()
    start = lines.index("## Architecture")
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    return lines[start + 1 : end]


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _map(readme: str) -> list[tuple[str, str]]:
    """(rank, folder cell) of each row of the map."""
    lines = _section(readme)
    start = next(i for i, line in enumerate(lines) if line.startswith("|") and _cells(line) == HEADER)
    rows = []
    for line in lines[start + 2 :]:  # the header, then the |---| line
        if not line.startswith("|"):
            break
        rank, folder, _ = _cells(line)
        rows.append((rank, folder))
    assert rows, "the map has no rows"
    return rows


def _named(readme: str, kind: str) -> list[str]:
    """The packages (``code``), data folders (``data``) or top-level modules (``modules``) the map names."""
    out = []
    for rank, folder in _map(readme):
        for name in _TICKED.findall(folder):
            if kind == "modules" and not name.endswith("/"):
                out.append(name)
            elif name.endswith("/") and (kind == "data") == (rank == "data") and kind != "modules":
                out.append(name.removesuffix("/"))
    return out


def _real_folders() -> list[Path]:
    return [d for d in PKG.iterdir() if d.is_dir() and d.name != "__pycache__" and not d.name.startswith(".")]


def _diff(named: list[str], real: set[str], what: str) -> str:
    missing, stale = sorted(real - set(named)), sorted(set(named) - real)
    return f"README ## Architecture map vs src/gpufleet/ {what}: not in the map {missing}, not in the tree {stale}"


def _packages() -> set[str]:
    return {d.name for d in _real_folders() if (d / "__init__.py").is_file()}


def test_the_map_has_a_row_for_every_package() -> None:
    packages = _packages()
    named = _named(_readme(), "code")
    assert len(named) == len(set(named)), f"a package is named twice: {sorted(named)}"
    assert set(named) == packages, _diff(named, packages, "packages")


def test_the_map_names_every_data_folder() -> None:
    folders = {d.name for d in _real_folders() if not (d / "__init__.py").is_file()}
    named = _named(_readme(), "data")
    assert set(named) == folders, _diff(named, folders, "folders without an __init__.py")


def test_the_map_names_every_top_level_module() -> None:
    modules = {p.stem for p in PKG.glob("*.py") if not p.stem.startswith("_")}
    named = _named(_readme(), "modules")
    assert set(named) == modules, _diff(named, modules, "top-level modules")


def test_the_map_ranks_are_the_layering_ranks() -> None:
    wrong = []
    for rank, folder in _map(_readme()):
        if not rank.isdigit():
            continue
        for name in _TICKED.findall(folder):
            key = name.removesuffix("/")
            if RANKS.get(key) != int(rank):
                wrong.append(f"{name}: rank {rank} in the map, {RANKS.get(key)} in tests/project/test_layering.py")
    assert not wrong, wrong


def test_every_path_the_section_names_exists() -> None:
    paths = {m for line in _section(_readme()) for m in _TICKED.findall(line) if _PATH.fullmatch(m)}
    assert paths, "no paths found: has the section's format changed?"
    missing = sorted(p for p in paths if not ((PKG / p).exists() or (ROOT / p).exists()))
    assert not missing, f"README ## Architecture names paths that do not exist: {missing}"


def test_the_check_sees_a_row_dropped_or_added() -> None:
    """The parser reads the real map: without its ``k8s/`` row the map misses a package; with a row
    for a package that is not there it names one too many."""
    readme = _readme()
    (row,) = [line for line in _section(readme) if line.startswith("| 5 | `k8s/` |")]
    assert set(_named(readme.replace(row + "\n", ""), "code")) == _packages() - {"k8s"}
    extra = readme.replace(row, row + "\n| 4 | `nosuchpackage/` | nothing |")
    assert set(_named(extra, "code")) == _packages() | {"nosuchpackage"}
