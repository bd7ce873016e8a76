"""Every Kubernetes name gpufleet reads or writes is written once, in :mod:`gpufleet.k8s.vocabulary`.

The source is read with :mod:`ast` (as ``test_layering.py`` does): a ``str`` constant anywhere under
``src/gpufleet`` (an f-string's literal parts included; docstrings are prose and left out) that holds
a Kubernetes-qualified name (``gpufleet.io/job-id``, ``nvidia.com/gpu``, ``karpenter.sh/v1``, a bare
group such as ``karpenter.k8s.aws``) outside the vocabulary is a second home for that name.

Two small allow-lists name (a file or a folder, with its reason) where a literal is not a name
gpufleet uses: ``ALLOWED`` where every literal passes (the migrations: frozen history), ``PROSE``
where a literal with a space in it (text about the names) passes, never a bare name. An entry that
no longer matches anything fails the test, so the lists only shrink.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from tests.support.paths import SRC

HOME = "k8s/vocabulary.py"

# The domains of the names (a name is ``<sub.>*<domain>/...``, or the bare group ``<sub.>*<domain>``).
DOMAINS = (
    "gpufleet.io",
    "nvidia.com",
    "karpenter.sh",
    "karpenter.k8s.aws",
    "karpenter.azure.com",
    "kubernetes.azure.com",
    "kubernetes.io",  # node., topology., app., batch., beta., failure-domain.beta., ... too
    "k8s.io",  # admission., apiextensions., coordination., scheduling., jobset.sigs., ...
    "x-k8s.io",  # kueue., jobset.
    "cloud.google.com",
    "eks.amazonaws.com",
    "amazonaws.com",
    "azure.com",
)
_DOMAIN = r"(?:[a-z0-9-]+\.)*(?:" + "|".join(re.escape(d) for d in DOMAINS) + ")"
# A name anywhere in the text, not inside a longer name or path (a URL ``https://kubernetes.io/docs``),
# or the whole text a bare group (``karpenter.sh``; ``gpufleet.io.ports`` is a module, ``docs.nvidia.com``
# in a sentence a host).
QUALIFIED = re.compile(rf"(?<![\w./-]){_DOMAIN}/|\A{_DOMAIN}\Z")

# path under src/gpufleet (a file, or a folder ending in "/") -> why its literals name names
ALLOWED: dict[str, str] = {
    # a migration is frozen: it names what stored rows hold then (0012 moves labels gpufleet no longer
    # writes), and never imports today's vocabulary, which may change after it
    "store/migrations/versions/": "migrations: the names stored rows hold, as of the migration",
}
# path -> why its prose (a literal with a space) names names
PROSE: dict[str, str] = {
    # the help text of the OpenCost node series (HELP lines): which node label each metric label copies
    "api/metrics/": "Prometheus metric label docs",
    # option help and a warning: the CLI module imports nothing of gpufleet.k8s at start-up (its test
    # in tests/k8s/test_k8s_manifests.py), so its text names the resource itself
    "cli/k8s.py": "CLI help text",
}


def _docstrings(tree: ast.Module) -> set[int]:
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def qualified_literals(rel: str, source: str) -> Iterator[tuple[int, str]]:
    """(line, literal) of every str constant of ``source`` (not a docstring) holding a qualified name."""
    tree = ast.parse(source, filename=rel)
    docs = _docstrings(tree)
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in docs
            and QUALIFIED.search(node.value)
        ):
            yield node.lineno, node.value


def _entry(table: dict[str, str], rel: str) -> str | None:
    return next((k for k in table if rel == k or (k.endswith("/") and rel.startswith(k))), None)


def _scan() -> tuple[list[str], set[str]]:
    """(literals outside the vocabulary, allow-list entries used)."""
    found: list[str] = []
    used: set[str] = set()
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if rel == HOME:
            continue
        for line, value in qualified_literals(rel, path.read_text(encoding="utf-8")):
            allowed, prose = _entry(ALLOWED, rel), _entry(PROSE, rel)
            if allowed is not None:
                used.add(allowed)
            elif prose is not None and re.search(r"\s", value):
                used.add(prose)
            else:
                found.append(f"src/gpufleet/{rel}:{line}: {value!r}")
    return found, used


def test_every_kubernetes_name_lives_in_the_vocabulary() -> None:
    found, _ = _scan()
    assert not found, (
        f"Kubernetes names outside gpufleet.k8s.vocabulary ({len(found)}): define each there once and "
        "import it (an f-string for a message)\n  " + "\n  ".join(found)
    )


def test_the_allow_list_holds_no_stale_entries() -> None:
    _, used = _scan()
    stale = sorted((set(ALLOWED) | set(PROSE)) - used)
    assert not stale, f"no longer needed: remove from ALLOWED / PROSE: {stale}"


def test_the_scanner_sees_a_planted_name() -> None:
    """Not vacuous: names in plain strings, f-strings, bare groups and API versions are found; URLs,
    module paths, docstrings and unrelated text are not."""
    source = (
        '"""A docstring naming nvidia.com/gpu."""\n'
        'A = "gpufleet.io/job-id"\n'
        'def f(x):\n    """Also nvidia.com/gpu."""\n'
        '    return {"key": "node.kubernetes.io/instance-type", "g": f"nvidia.com/{x}"}\n'
        'B = ("karpenter.k8s.aws", "jobset.x-k8s.io/v1alpha2", "admission.k8s.io/v1", "must be gpufleet.io/v1alpha1")\n'
        'C = ("https://kubernetes.io/docs/", "gpufleet.io.ports", "see docs.nvidia.com", "batch/v1", "eks")\n'
    )
    found = sorted(v for _, v in qualified_literals("x.py", source))
    assert found == sorted(
        [
            "gpufleet.io/job-id",
            "node.kubernetes.io/instance-type",
            "nvidia.com/",
            "karpenter.k8s.aws",
            "jobset.x-k8s.io/v1alpha2",
            "admission.k8s.io/v1",
            "must be gpufleet.io/v1alpha1",
        ]
    )


def test_the_vocabulary_names_each_string_once() -> None:
    """One constant per name: two constants of the vocabulary never hold the same qualified name."""
    from gpufleet.k8s import vocabulary

    seen: dict[str, str] = {}
    twice = []
    for name, value in vars(vocabulary).items():
        if name.isupper() and isinstance(value, str) and QUALIFIED.search(value):
            if value in seen:
                twice.append(f"{seen[value]} and {name}: {value!r}")
            seen.setdefault(value, name)
    assert not twice, "one constant per name:\n  " + "\n  ".join(twice)
