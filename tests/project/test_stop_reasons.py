"""Issue 21: a stop reason is typed (:class:`gpufleet.model.job.StopReason`), never a string prefix.

The loop decides on a stop's :class:`~gpufleet.model.job.StopKind`; the text ``"<kind>: <detail>"``
exists only where the store keeps it (``runs.stop_requested``, read back with
:meth:`StopReason.parse`). In the worlds' code (loop, control, sim, backends, the Kubernetes adapter)
no reason or stop is read with ``startswith`` and no ``"budget: "``/``"preempt: "``/``"cancel: "``
prefix is written out.
"""

from __future__ import annotations

import ast

import pytest

from gpufleet.model.job import StopKind, StopReason
from tests.support.paths import SRC

WORLDS = ("loop", "control", "sim", "backends", "k8s/adapter")
PREFIXES = tuple(f"{k.value}: " for k in StopKind if k is not StopKind.OTHER)
WORDS = ("reason", "stop")  # a receiver of .startswith( whose expression names one of these


def _hits() -> list[str]:
    out = []
    for pkg in WORLDS:
        for path in sorted((SRC / pkg).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            rel = path.relative_to(SRC).as_posix()
            for node in ast.walk(tree):
                if (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "startswith"
                    and any(w in ast.unparse(node.func.value).lower() for w in WORDS)
                ):
                    out.append(f"{rel}:{node.lineno}: {ast.unparse(node)}")
                if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith(PREFIXES):
                    out.append(f"{rel}:{node.lineno}: {node.value!r}")
    return out


def test_no_reason_is_read_by_its_prefix() -> None:
    hits = _hits()
    assert not hits, "stop reasons as string prefixes (use StopReason / StopKind):\n" + "\n".join(hits)


def test_the_guard_sees_a_prefix() -> None:
    tree = ast.parse('if stopping.startswith("budget"):\n    why = f"preempt: {x}"\n')
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
    consts = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
    assert any("stop" in ast.unparse(c.func) for c in calls)
    assert any(c.startswith(PREFIXES) for c in consts)


@pytest.mark.parametrize("kind", [StopKind.CANCEL, StopKind.PREEMPT, StopKind.BUDGET])
def test_a_stop_is_stored_as_today_and_read_back_typed(kind: StopKind) -> None:
    stop = StopReason(kind, "why: with a colon")
    assert stop.text == f"{kind.value}: why: with a colon"  # the stored text (runs.stop_requested) as before
    assert StopReason.parse(stop.text) == stop


def test_a_stored_stop_of_no_known_kind() -> None:
    assert StopReason.parse("preempted by j-x") == StopReason(StopKind.OTHER, "preempted by j-x")
    assert StopReason.parse("drained: node gone") == StopReason(StopKind.OTHER, "node gone")
