"""The tests are grouped by area: every test module sits in an area folder of ``tests/`` (no test at
the top level, none in ``tests/support/``), support code sits in ``tests/support/`` (no support module
among the tests), and no test names an absolute path of the machine it was written on (the
checkout's parent folder): paths come from :mod:`tests.support.paths`."""

from __future__ import annotations

import ast

from tests.support.paths import REPO, SHARED

TESTS = REPO / "tests"
AREAS = {"agent", "api", "cli", "cost", "k8s", "observability", "project", "scheduling", "security", "server", "sim"}


def test_every_test_module_is_in_an_area_folder() -> None:
    misplaced = []
    for p in sorted(TESTS.rglob("test_*.py")):
        rel = p.relative_to(TESTS)
        if len(rel.parts) != 2 or rel.parts[0] not in AREAS:
            misplaced.append(str(rel))
    assert not misplaced, f"test modules outside the area folders {sorted(AREAS)}: {misplaced}"


def test_area_folders_hold_only_tests_and_support_holds_none() -> None:
    areas = {d.name for d in TESTS.iterdir() if d.is_dir() and (d / "__init__.py").exists()} - {"support"}
    assert areas == AREAS, f"area folders changed: add or remove them here and in the README ({areas ^ AREAS})"
    strays = [
        str(p.relative_to(TESTS))
        for area in AREAS
        for p in (TESTS / area).glob("*.py")
        if not p.name.startswith("test_") and p.name not in {"__init__.py", "conftest.py"}
    ]
    assert not strays, f"support code among the tests (move it to tests/support/): {strays}"
    assert not list((TESTS / "support").rglob("test_*.py"))


def test_no_test_names_an_absolute_path_of_this_machine() -> None:
    # the checkout and the shared reference data where they sit on this machine (/work/main, /work/shared
    # on the build machine; elsewhere on a clean clone): a test names them only through tests.support.paths
    here = (str(REPO) + "/", str(SHARED) + "/")
    found = []
    for p in sorted(TESTS.rglob("*.py")):
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith(here):
                found.append(f"{p.relative_to(REPO)}:{node.lineno}: {node.value!r}")
    assert not found, "absolute paths (use tests.support.paths REPO/SRC/SHARED):\n" + "\n".join(found)
