"""The layers point down: engines do no I/O and no SQL, no package imports a package above it, and
every query lives in ``gpufleet.store`` (repository functions of a ``Session``): routes, services and
engines call those instead of building statements.

Like ``test_engines_never_read_the_wall_clock`` (tests/sim/test_sim.py) these read the source, not the
running code: every ``import`` (module-level or inside a function, ``TYPE_CHECKING`` included) and
every call is found with :mod:`ast`, so a rule holds for code paths no other test exercises.

The allow-lists below name each known exception with its reason and who removes it. An entry that
no longer matches anything fails the test (``test_allow_lists_hold_no_stale_entries``), so the
lists only shrink.
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.support.paths import SRC

ROOT = SRC

# -- the layers -----------------------------------------------------------------------------------
#
# A module may import modules of its own rank or lower. Top-level modules: ``errors`` (the error
# types), ``clock`` (the Clock protocol and the simulated clock), ``config`` (YAML/pydantic
# loading helpers) are shared by every layer; ``wire`` (the HTTP schemas) is the contract between
# the server and its clients. ``io`` holds the file adapters that feed the engines (traces, the
# price catalog, simulation results).
RANKS: dict[str, int] = {
    "errors": 0,
    "clock": 0,
    "config": 0,
    "model": 0,
    "scheduling": 1,
    "cost": 2,  # cost/budgets/throttle.py runs the scheduling cycle; scheduling never imports cost
    "sim": 3,
    "loop": 3,  # the one world loop, shared by the simulator and the server
    "store": 4,
    "backends": 4,
    "notify": 4,
    "telemetry": 4,
    "io": 4,
    # the Backend protocol and its event types: what a world hands the loop (implementations in
    # backends/ stay at rank 4). A module key overrides its package's rank.
    "backends.base": 3,
    "wire": 5,
    "sdk": 5,  # a client: see SDK_MAY_IMPORT
    "control": 5,  # the server's world: the controller, its store-backed state, leader election
    "services": 5,  # what the API, the webhook and the controller ask of the store, each rule once
    "integrations": 5,  # MLflow: tools outside gpufleet the server talks to
    "server.settings": 5,  # the server's settings: data every service and the webhook read
    "server": 6,  # the composition root: wires store, backend, controller, webhook and API together
    "k8s": 5,  # Kubernetes, all of it: adoption, CR reconcilers, webhook; pure CRDs/policies/admission
    "k8s.vocabulary": 0,  # every label, annotation and resource name: data every layer may name
    "k8s.adapter": 4,  # the Kubernetes backend (a world, like backends/): never imports the loop
    "dashboards": 4,  # builds the shipped Grafana JSON from the metric names: data, no server code
    "experiments": 4,  # the inference cost experiments: measure a device, price it from the catalog
    "api": 6,
    "cli": 6,
    "agent": 6,  # the MCP tools: a client of the API (through the SDK), like the CLI
    "__main__": 6,
    "__init__": 0,
}
# The SDK is a client library: it imports nothing of the server.
SDK_MAY_IMPORT = frozenset({"sdk", "wire", "errors"})

ENGINES = ("model", "scheduling", "cost", "sim", "loop")
# No I/O in engines: these modules (and their submodules) may not be imported there.
IO_MODULES = frozenset(
    {
        "sqlalchemy",
        "subprocess",
        "socket",
        "urllib",
        "http",
        "requests",
        "httpx",
        "shutil",
        "sqlite3",
        "psycopg",
        "psycopg2",
        "os",
        "pathlib",  # parsers take text; paths are opened by gpufleet.io
        "importlib.resources",
    }
)
# ... nor these calls: the builtin ``open(``, file methods of ``pathlib.Path`` (and of anything
# else: an engine has no reason to call a method by these names). ``.open(`` is not among them:
# the ledger opens intervals; without ``pathlib`` (above) an engine has no path to open.
IO_CALLS = frozenset({"open"})
IO_METHODS = frozenset(
    {
        "read_text",
        "write_text",
        "read_bytes",
        "write_bytes",
        "mkdir",
        "unlink",
        "rmdir",
        "iterdir",
        "glob",
        "rglob",
        "touch",
    }
)
# No SQL outside store/ (engines and routes included): SQLAlchemy statement builders and session queries.
SQL_CALLS = frozenset({"select", "insert", "update", "delete", "text"})
SQL_METHODS = frozenset({"execute", "scalars", "scalar", "query", "exec_driver_sql"})

# Pairs the ranks allow but the design does not: the store persists rows and converts them to
# model objects (rank 0); it never runs engine code (the loop is a client of the store through
# control/, never the other way round).
NEVER_IMPORTS: dict[str, frozenset[str]] = {
    "store": frozenset({"loop"}),
    "backends": frozenset({"loop"}),  # a world reports to the loop through backends.base (rank 3) only
    "k8s.adapter": frozenset({"loop"}),  # the Kubernetes world, likewise
}

# -- no queries outside store/ --------------------------------------------------------------------
#
# Every query lives in gpufleet.store: outside it no module imports SQLAlchemy's statement builders
# (select, insert, update, delete, func, text, and_, or_, ... : anything of ``sqlalchemy`` but the
# names below), builds a store row (``JobEventRow(...)`` is an INSERT), looks a row up by key
# (``s.get(Team, name)``) or runs a statement (SQL_CALLS/SQL_METHODS above, as in engines and routes).
#
# Importing these is fine anywhere: they are types for hints and errors to catch, and build no query.
SQLA_TYPES: dict[str, frozenset[str]] = {
    "sqlalchemy.orm": frozenset({"Session"}),  # the first argument of every repository function
    "sqlalchemy": frozenset({"Engine", "Connection"}),  # control/leader.py holds a connection for its lock
}
SQLA_ANY = frozenset({"sqlalchemy.exc"})  # exception classes: a service catches a store failure
STORE_MODELS = frozenset(
    n.name for n in ast.parse((ROOT / "store" / "models.py").read_text(encoding="utf-8")).body
    if isinstance(n, ast.ClassDef)
)  # fmt: skip

# -- known exceptions (each one: file, rule, reason, who removes it) ------------------------------
#
# Import rule: (importing file, imported gpufleet package).
ALLOWED_IMPORTS: dict[tuple[str, str], str] = {
    # compat shim, owned by this layering work: PriceCatalog.load() delegates the file reading to
    # gpufleet.io.catalog. Remove once control/controller.py (loop rewrite), api/routes/insights.py
    # and cli/cost.py (cost/budgets rewrite) call gpufleet.io.catalog.load_catalog themselves.
    ("cost/catalog.py", "io"): "PriceCatalog.load() compat shim over gpufleet.io.catalog",
}
# I/O rule: (file, forbidden module or call). ``open``/method names stand for calls.
ALLOWED_IO: dict[tuple[str, str], str] = {
    # owned by the scheduling rewrite: load_profile(path) reads the profile YAML (via
    # gpufleet.config); it should take a mapping, with the YAML read in io/ or cli/.
    ("scheduling/profile.py", "pathlib"): "owned by the scheduling rewrite",
    # owned by the cost/budgets rewrite: load_rules(path) reads the pricing-rules YAML.
    ("cost/rules.py", "pathlib"): "owned by the cost/budgets rewrite",
    # unowned (sim/clusterspec.py): load_cluster(path) reads the cluster YAML via gpufleet.config;
    # the path branch belongs in gpufleet.io.
    ("sim/clusterspec.py", "pathlib"): "cluster YAML read in the engine; move the path branch to io/",
}
# SQL rule: (file, what): the called name (``select``, ``execute``...), ``get`` for ``s.get(Model, key)``,
# the model's name for a new row, ``sqlalchemy.<module>.<name>`` for an import.
ALLOWED_SQL: dict[tuple[str, str], str] = {}


# -- the scanner ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Hit:
    file: str  # relative to src/gpufleet
    line: int
    what: str  # the imported module or the called name
    text: str  # the source line

    def __str__(self) -> str:
        return f"src/gpufleet/{self.file}:{self.line}: {self.text.strip()}"


def _files(*packages: str) -> Iterator[tuple[str, ast.Module, list[str]]]:
    for pkg in packages:
        base = ROOT / pkg
        paths = sorted(base.rglob("*.py")) if base.is_dir() else [p for p in [ROOT / f"{pkg}.py"] if p.exists()]
        for p in paths:
            src = p.read_text(encoding="utf-8")
            yield p.relative_to(ROOT).as_posix(), ast.parse(src, filename=str(p)), src.splitlines()


def _package_of(rel: str) -> str:
    return rel.split("/", 1)[0].removesuffix(".py")


def _module_of(rel: str) -> str:
    return "gpufleet." + rel.removesuffix(".py").removesuffix("/__init__").replace("/", ".")


def _imports(rel: str, tree: ast.Module) -> Iterator[tuple[int, str]]:
    """(line, absolute module) of every import in the file, relative ones resolved."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = _module_of(rel).split(".")
                is_pkg = rel.endswith("__init__.py")
                base = parts[: len(parts) - node.level + (1 if is_pkg else 0)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            yield node.lineno, module
            if module == "gpufleet":  # ``from gpufleet import store`` imports gpufleet.store
                for alias in node.names:
                    if (ROOT / alias.name).is_dir() or (ROOT / f"{alias.name}.py").exists():
                        yield node.lineno, f"gpufleet.{alias.name}"


def _calls(tree: ast.Module) -> Iterator[tuple[int, str, bool]]:
    """(line, name, is_method) of every call."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            if isinstance(node.func, ast.Name):
                yield node.lineno, node.func.id, False
            elif isinstance(node.func, ast.Attribute):
                yield node.lineno, node.func.attr, True


def _in(module: str, names: frozenset[str]) -> str | None:
    for name in names:
        if module == name or module.startswith(name + "."):
            return name
    return None


def _layer(module: str) -> str:
    """The RANKS key of ``gpufleet.<module>``: the longest dotted prefix that has a rank."""
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        key = ".".join(parts[:n])
        if key in RANKS:
            return key
    raise AssertionError(f"gpufleet.{module} has no rank in RANKS: give it one")


def _import_violations() -> list[tuple[Hit, str]]:
    out = []
    for rel, tree, lines in _files(*{k.split(".")[0] for k in RANKS}):
        pkg = _package_of(rel)
        me = _layer(_module_of(rel).removeprefix("gpufleet."))
        for line, module in _imports(rel, tree):
            parts = module.split(".")
            if parts[0] != "gpufleet" or len(parts) < 2:
                continue
            target = parts[1]
            if target == pkg and _layer(".".join(parts[1:])) == me:
                continue  # within a package, only modules with a rank of their own (k8s.adapter) are checked
            if pkg == "sdk":
                bad = target not in SDK_MAY_IMPORT
                why = "the SDK imports nothing server-side"
            elif target in NEVER_IMPORTS.get(pkg, ()) or target in NEVER_IMPORTS.get(me, ()):
                bad, why = (
                    True,
                    f"{pkg if target in NEVER_IMPORTS.get(pkg, ()) else me} never imports {target} (NEVER_IMPORTS)",
                )
            else:
                layer = _layer(".".join(parts[1:]))
                bad = RANKS[layer] > RANKS[me]
                why = f"{me} (rank {RANKS[me]}) imports {layer} (rank {RANKS[layer]})"
            if bad:
                out.append((Hit(rel, line, target, lines[line - 1]), why))
    return out


def _io_violations() -> list[Hit]:
    out: dict[tuple[str, int, str], Hit] = {}
    for rel, tree, lines in _files(*ENGINES):
        for line, module in _imports(rel, tree):
            found = _in(module, IO_MODULES)
            if found is not None:
                out[(rel, line, found)] = Hit(rel, line, found, lines[line - 1])
        for line, name, method in _calls(tree):
            if (method and name in IO_METHODS) or (not method and name in IO_CALLS):
                out[(rel, line, name)] = Hit(rel, line, name, lines[line - 1])
    return list(out.values())


def _sqla_imports(tree: ast.Module) -> Iterator[tuple[int, str]]:
    """(line, ``sqlalchemy...`` or ``sqlalchemy.<module>.<name>``) of every SQLAlchemy import that
    is not a type in SQLA_TYPES or SQLA_ANY (``import sqlalchemy as sa`` is one: ``sa.select``)."""
    sqla = frozenset({"sqlalchemy"})
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _in(alias.name, sqla) and not _in(alias.name, SQLA_ANY):
                    yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and not node.level and _in(node.module or "", sqla):
            if _in(node.module or "", SQLA_ANY):
                continue
            for alias in node.names:
                if alias.name not in SQLA_TYPES.get(node.module or "", frozenset()):
                    yield node.lineno, f"{node.module}.{alias.name}"


def _store_calls(tree: ast.Module) -> Iterator[tuple[int, str]]:
    """(line, what) of every ``x.get(Model, ...)`` (a lookup by key) and ``Model(...)`` (a new row)."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        if isinstance(node.func, ast.Name) and node.func.id in STORE_MODELS:
            yield node.lineno, node.func.id
        elif (
            isinstance(node.func, ast.Attribute)
            and node.func.attr == "get"
            and node.args
            and isinstance(node.args[0], ast.Name)
            and node.args[0].id in STORE_MODELS
        ):
            yield node.lineno, "get"


def _sql_violations() -> list[Hit]:
    """Queries outside gpufleet.store: SQL_CALLS, SQL_METHODS, SQLAlchemy imports, key lookups, new rows."""
    out: dict[tuple[str, int, str], Hit] = {}
    packages = sorted({k.split(".")[0] for k in RANKS} - {"store"})
    for rel, tree, lines in _files(*packages):
        for line, name, method in _calls(tree):
            if (method and name in SQL_METHODS) or (not method and name in SQL_CALLS):
                out[(rel, line, name)] = Hit(rel, line, name, lines[line - 1])
        for line, what in [*_sqla_imports(tree), *_store_calls(tree)]:
            out[(rel, line, what)] = Hit(rel, line, what, lines[line - 1])
    return list(out.values())


def _report(title: str, hits: list[str]) -> str:
    return f"{title} ({len(hits)}):\n  " + "\n  ".join(hits)


# -- the rules ------------------------------------------------------------------------------------


def test_every_package_has_a_rank() -> None:
    present = {p.name.removesuffix(".py") for p in ROOT.iterdir() if p.suffix == ".py" or (p / "__init__.py").exists()}
    assert present - set(RANKS) == set(), "give each new package a rank in RANKS"
    assert _layer("backends.base") == "backends.base" and _layer("backends.local") == "backends"
    assert _layer("store.repo.jobs") == "store"
    assert _layer("k8s.adapter.nodes") == "k8s.adapter" and _layer("k8s.admission") == "k8s"
    assert _layer("server.settings") == "server.settings" and _layer("server.host") == "server"


def test_no_module_imports_a_layer_above_it() -> None:
    bad = [f"{hit}  <- {why}" for hit, why in _import_violations() if (hit.file, hit.what) not in ALLOWED_IMPORTS]
    assert not bad, _report("upward imports (a module may import its own rank or lower)", bad)


def test_the_store_never_imports_the_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """NEVER_IMPORTS is not vacuous: the ranks allow store (4) to import loop (3); the rule does not."""
    assert RANKS["store"] > RANKS["loop"] and "loop" in NEVER_IMPORTS["store"]
    line = "from gpufleet.loop.metering import share_units"
    monkeypatch.setattr(sys.modules[__name__], "_files", lambda *_: iter([("store/x.py", ast.parse(line), [line])]))
    assert [(h.file, h.what, why) for h, why in _import_violations()] == [
        ("store/x.py", "loop", "store never imports loop (NEVER_IMPORTS)")
    ]


def test_engines_do_no_io() -> None:
    bad = [f"{hit}  <- {hit.what}" for hit in _io_violations() if (hit.file, hit.what) not in ALLOWED_IO]
    assert not bad, _report(
        f"I/O in engines {ENGINES}: read files in gpufleet.io (or cli/) and pass text, bytes or rows", bad
    )


def test_no_queries_outside_store() -> None:
    """Every query lives in gpufleet.store (a repository function of the Session, in store/repo/)."""
    hits = sorted(_sql_violations(), key=lambda h: (h.file, h.line, h.what))
    bad = [f"{hit}  <- {hit.what}" for hit in hits if (hit.file, hit.what) not in ALLOWED_SQL]
    assert not bad, _report("queries outside store/: move each into a repository function in store/repo/", bad)


def test_allow_lists_hold_no_stale_entries() -> None:
    """An exception that was fixed must leave its allow-list."""
    imports = {(h.file, h.what) for h, _ in _import_violations()}
    io = {(h.file, h.what) for h in _io_violations()}
    sql = {(h.file, h.what) for h in _sql_violations()}
    stale = [
        *(f"ALLOWED_IMPORTS {k}" for k in ALLOWED_IMPORTS if k not in imports),
        *(f"ALLOWED_IO {k}" for k in ALLOWED_IO if k not in io),
        *(f"ALLOWED_SQL {k}" for k in ALLOWED_SQL if k not in sql),
    ]
    assert not stale, _report("fixed: remove these allow-list entries", stale)


def test_the_scanner_sees_violations() -> None:
    """The checks are not vacuous: a planted upward import, file read and query are found."""
    tree = ast.parse(
        "from gpufleet import store\nimport subprocess\nfrom os import path\n"
        "def f(s):\n    open('x')\n    Path('y').read_text()\n    s.execute(select(1))\n"
    )
    imports = [m for _, m in _imports("sim/x.py", tree)]
    assert imports == ["gpufleet", "gpufleet.store", "subprocess", "os"]
    assert _in("subprocess", IO_MODULES) and _in("os", IO_MODULES)
    calls = {(n, m) for _, n, m in _calls(tree)}
    assert {("open", False), ("read_text", True), ("execute", True), ("select", False)} <= calls
    rel = [m for _, m in _imports("store/repo/__init__.py", ast.parse("from .jobs import get_job\n"))]
    assert rel == ["gpufleet.store.repo.jobs"]
    queries = ast.parse(
        "import sqlalchemy as sa\nfrom sqlalchemy import func, Engine\nfrom sqlalchemy.orm import Session, aliased\n"
        "from sqlalchemy.exc import IntegrityError\n"
        "def f(s):\n    s.get(Team, 'a')\n    s.add(JobEventRow(job_id='j'))\n    {}.get('Team')\n"
    )
    assert [w for _, w in _sqla_imports(queries)] == ["sqlalchemy", "sqlalchemy.func", "sqlalchemy.orm.aliased"]
    assert sorted(w for _, w in _store_calls(queries)) == ["JobEventRow", "get"]
    assert {"Team", "JobEventRow", "Token"} <= STORE_MODELS


# -- one home for a MIG profile's name --------------------------------------------------------------
#
# A MIG profile (``1g.10gb``) is parsed in gpufleet.model.share only; elsewhere a regex that needs one
# is built from its MIG_PROFILE_PATTERN. A regex literal holding the slice syntax ``g\.`` anywhere else
# is a second home.
MIG_REGEX_HOME = "model/share.py"
MIG_REGEX_ALLOWED = {
    # the API's request schema: what a client may ask for (1-7 slices, no +me), published in the
    # OpenAPI document as the field's pattern; model.share parses every name gpufleet meets
    "wire.py",
}


def _mig_regex_literals() -> list[str]:
    found = []
    for rel, tree, _lines in _files(*{k.split(".")[0] for k in RANKS}):
        if rel == MIG_REGEX_HOME or rel in MIG_REGEX_ALLOWED:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and "g\\." in node.value:
                found.append(f"{rel}:{node.lineno}: {node.value!r}")
    return found


def test_a_mig_profile_is_parsed_in_one_place() -> None:
    found = _mig_regex_literals()
    assert not found, "MIG profile regexes outside model/share.py (use MIG_PROFILE_PATTERN):\n" + "\n".join(found)


# -- one home for GPU-share arithmetic --------------------------------------------------------------
#
# Every conversion between the forms of a GPU share (replicas ``k`` of ``R``, milli-GPU, MIG slices,
# share units of 1/7000 GPU, GPU-equivalents) is a function of gpufleet.model.share; the MIG geometry
# itself is gpufleet.model.gpu. Elsewhere no code names the share unit (a literal 7000) or the 7
# compute slices (MIG_COMPUTE_SLICES, UNITS_PER_MILLI), divides by MILLI or SHARE_UNITS or divides
# MILLI (``/``, ``//``, ``%``), builds ``Fraction(x, MILLI | SHARE_UNITS)``, divides a GPU's milli by a
# literal 1000, or floor-divides by replicas. CPU milli-cores (an operand naming ``cpu``) are no GPU share;
# a migration (store/migrations/) is frozen history and imports no code it migrates.
SHARE_HOMES = frozenset({"model/share.py", "model/gpu.py"})
SHARE_SKIPPED = ("store/migrations/",)
SHARE_CONSTANTS = frozenset({"MIG_COMPUTE_SLICES", "UNITS_PER_MILLI"})
SHARE_DIVISORS = frozenset({"MILLI", "SHARE_UNITS"})
_GPU_MILLI = re.compile(r"(^|_)milli($|_)")  # gpu_milli, total_milli, milli (not milliwatts)
# (file, rule) → why the arithmetic stays where it is
SHARE_ALLOWED: dict[tuple[str, str], str] = {
    # the placement plugins' scores, written as their published references write them, on numpy arrays
    ("scheduling/placement/fgd.py", "milli / 1000"): "FGD's score: sigmoid(Δ / 1000) of the reference",
    ("scheduling/placement/fgdwaste.py", "/ MILLI"): "FGD's tie-break: waste removed in GPUs, on arrays",
    ("scheduling/placement/packing.py", "/ MILLI"): "Packing's score: percent of each GPU used, on arrays",
}


def _names(node: ast.AST) -> Iterator[str]:
    """The identifiers, attribute names and string constants in ``node`` (what an operand is about)."""
    for n in ast.walk(node):
        if isinstance(n, ast.Name):
            yield n.id
        elif isinstance(n, ast.Attribute):
            yield n.attr
        elif isinstance(n, ast.Constant) and isinstance(n.value, str):
            yield n.value


def _is_cpu(node: ast.AST) -> bool:
    return any("cpu" in name.lower() for name in _names(node))


def _share_rule(node: ast.AST) -> str | None:
    """The rule ``node`` breaks (a short name), or None."""
    if isinstance(node, ast.Constant) and type(node.value) is int and node.value == 7000:
        return "7000"
    if isinstance(node, ast.Name) and node.id in SHARE_CONSTANTS:
        return node.id
    if isinstance(node, ast.alias) and node.name in SHARE_CONSTANTS:
        return node.name
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div | ast.FloorDiv | ast.Mod) and not _is_cpu(node):
        if isinstance(node.right, ast.Name) and node.right.id in SHARE_DIVISORS:
            return f"/ {node.right.id}"
        if isinstance(node.left, ast.Name) and node.left.id in SHARE_DIVISORS and not isinstance(node.op, ast.Mod):
            return f"{node.left.id} /"
        if (
            isinstance(node.op, ast.Div)
            and isinstance(node.right, ast.Constant)
            and node.right.value in (1000, 1000.0)
            and any(_GPU_MILLI.search(name) for name in _names(node.left))
        ):
            return "milli / 1000"
        if isinstance(node.op, ast.FloorDiv) and any("replicas" in name for name in _names(node.right)):
            return "// replicas"
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "Fraction"
        and len(node.args) == 2
        and isinstance(node.args[1], ast.Name)
        and node.args[1].id in SHARE_DIVISORS
        and not _is_cpu(node.args[0])
    ):
        return f"Fraction(, {node.args[1].id})"
    return None


def _share_arithmetic(files: Iterator[tuple[str, ast.Module, list[str]]] | None = None) -> list[Hit]:
    out: dict[tuple[str, int, str], Hit] = {}
    for rel, tree, lines in files if files is not None else _files(*{k.split(".")[0] for k in RANKS}):
        if rel in SHARE_HOMES or rel.startswith(SHARE_SKIPPED):
            continue
        for node in ast.walk(tree):
            rule = _share_rule(node)
            if rule is not None:
                line = getattr(node, "lineno", 1)
                out[(rel, line, rule)] = Hit(rel, line, rule, lines[line - 1])
    return sorted(out.values(), key=lambda h: (h.file, h.line, h.what))


def test_gpu_share_arithmetic_lives_in_model_share() -> None:
    bad = [f"{hit}  <- {hit.what}" for hit in _share_arithmetic() if (hit.file, hit.what) not in SHARE_ALLOWED]
    assert not bad, _report("GPU-share arithmetic outside model/share.py: call (or add) a function there", bad)


def test_share_allow_list_holds_no_stale_entries() -> None:
    found = {(h.file, h.what) for h in _share_arithmetic()}
    stale = [f"SHARE_ALLOWED {k}" for k in SHARE_ALLOWED if k not in found]
    assert not stale, _report("fixed: remove these allow-list entries", stale)


def test_the_share_scanner_sees_violations() -> None:
    """Each rule finds its planted case, and leaves CPU milli-cores, milliwatts, the homes and the
    migrations alone."""
    planted = (
        "from gpufleet.model.gpu import MIG_COMPUTE_SLICES\n"
        "a = units / 7000\n"
        "b = job.gpu_milli / 1000.0\n"
        "c = held / MILLI\n"
        "d = MILLI // replicas\n"
        "e = Fraction(units, SHARE_UNITS)\n"
        "f = advertised // max(1, replicas)\n"
        "g = total % MILLI\n"
        "ok = (cpu_milli / MILLI, Fraction(node.cpu_milli, MILLI), milliwatts / 1000.0, d / 7, x // 1000)\n"
    )
    tree, lines = ast.parse(planted), planted.splitlines()
    files = [(rel, tree, lines) for rel in ("sim/x.py", "model/share.py", "store/migrations/versions/0099_x.py")]
    hits = _share_arithmetic(iter(files))
    assert [(h.file, h.line, h.what) for h in hits] == [
        ("sim/x.py", 1, "MIG_COMPUTE_SLICES"),
        ("sim/x.py", 2, "7000"),
        ("sim/x.py", 3, "milli / 1000"),
        ("sim/x.py", 4, "/ MILLI"),
        ("sim/x.py", 5, "MILLI /"),
        ("sim/x.py", 6, "Fraction(, SHARE_UNITS)"),
        ("sim/x.py", 7, "// replicas"),
        ("sim/x.py", 8, "/ MILLI"),
    ]
