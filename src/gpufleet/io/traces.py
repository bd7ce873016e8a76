"""Trace files: open them (or the packaged openb lists) and hand their text to the parsers of
:mod:`gpufleet.sim.traces`; write traces as JSONL."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

from gpufleet.errors import InputError, TraceError
from gpufleet.sim.traces.base import Trace
from gpufleet.sim.traces.jsonl import iter_jsonl, parse_jsonl
from gpufleet.sim.traces.openb import (
    DEFAULT_NODE_LIST,
    DEFAULT_POD_LIST,
    OpenbNodes,
    OpenbPods,
    parse_openb_nodes,
    parse_openb_pods,
)
from gpufleet.sim.traces.philly import PhillyOptions, parse_philly
from gpufleet.sim.traces.synthetic import SyntheticOptions, generate_synthetic

__all__ = [
    "TraceOptions",
    "dump_jsonl",
    "load_jsonl",
    "load_openb_nodes",
    "load_openb_pods",
    "load_openb_trace",
    "load_philly",
    "load_trace",
    "openb_variant",
    "packaged_pod_lists",
    "pod_list_path",
    "trace_name",
]


# -- JSONL ----------------------------------------------------------------------------------------


def load_jsonl(path: str | Path, *, name: str | None = None) -> Trace:
    """Load a gpufleet JSONL trace. The trace's name: ``name``, else the cluster line's, else the stem."""
    source = str(path)
    try:
        with open(path, encoding="utf-8") as fh:
            return parse_jsonl(fh, source=source, name=name)
    except OSError as exc:
        raise TraceError(f"cannot read trace: {exc.strerror or exc}", source=source) from None
    except UnicodeDecodeError as exc:
        raise TraceError(f"not UTF-8 text: {exc.reason}", source=source) from None


def dump_jsonl(trace: Trace, path: str | Path) -> None:
    """Write ``trace`` to ``path`` in the JSONL format (UTF-8, one object a line)."""
    with open(path, "w", encoding="utf-8") as fh:
        for text in iter_jsonl(trace):
            fh.write(text)
            fh.write("\n")


# -- Philly ---------------------------------------------------------------------------------------


def load_philly(path: str | Path, options: PhillyOptions | None = None, *, name: str = "philly") -> Trace:
    """Load a Philly CSV into a :class:`Trace` (see :func:`gpufleet.sim.traces.philly.parse_philly`)."""
    source = str(path)
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            return parse_philly(fh, options, name=name, source=source)
    except OSError as exc:
        raise TraceError(f"cannot read trace: {exc.strerror or exc}", source=source) from None
    except UnicodeDecodeError as exc:
        raise TraceError(f"not UTF-8 text: {exc.reason}", source=source) from None


# -- openb ----------------------------------------------------------------------------------------


def _data_dir() -> Traversable:
    return resources.files("gpufleet").joinpath("data", "openb")


@contextmanager
def _open(path: str | Path | None, default: str) -> Iterator[tuple[str, list[str]]]:
    """Yield (source name, lines) for a path or a packaged file name."""
    if path is None:
        ref = _data_dir().joinpath(default)
        if not ref.is_file():
            raise TraceError("packaged openb file is missing", source=default)
        yield f"gpufleet/data/openb/{default}", ref.read_text(encoding="utf-8").splitlines()
        return
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise TraceError("file not found", source=str(p)) from None
    except OSError as exc:
        raise TraceError(f"cannot read file: {exc.strerror}", source=str(p)) from None
    except UnicodeDecodeError as exc:
        raise TraceError(f"not UTF-8 text (byte {exc.start})", source=str(p)) from None
    yield str(p), text.splitlines()


def openb_variant(ref: str) -> str | None:
    """The pod list an ``openb[:VARIANT]`` trace reference names (``openb`` alone: ``default``), or
    None when ``ref`` is not one. VARIANT is a packaged name (``gpushare40``) or a pod-list CSV path.
    ``gpufleet simulate`` and ``gpufleet experiment fragmentation`` both read ``--trace`` with it."""
    kind, _, arg = ref.partition(":")
    return (arg or DEFAULT_POD_LIST) if kind == "openb" else None


def packaged_pod_lists() -> list[str]:
    """The names of the packaged openb pod lists (``default``, ``gpushare40``...)."""
    prefix = "openb_pod_list_"
    names = (f.name for f in _data_dir().iterdir() if f.name.startswith(prefix) and f.name.endswith(".csv"))
    return sorted(n.removeprefix(prefix).removesuffix(".csv") for n in names)


def pod_list_path(trace: str) -> str | Path | None:
    """Resolve a trace argument: a packaged name (``default``, ``gpushare40``, ``openb_pod_list_x``)
    gives None (the packaged file is read); anything else is a path. A bare name that is neither
    (no directory, no ``.csv``, no such file) is an error listing the packaged names."""
    if _packaged_pod_file(trace) is not None:
        return None
    path = Path(trace)
    if "/" not in trace and "\\" not in trace and path.suffix != ".csv" and not path.exists():
        raise InputError(
            f"unknown openb trace '{trace}' (packaged: {', '.join(packaged_pod_lists())}; or a pod-list CSV path)",
            field="trace",
        )
    return path


def _packaged_pod_file(trace: str) -> str | None:
    name = trace.removesuffix(".csv")
    name = name.removeprefix("openb_pod_list_")
    if "/" in trace or "\\" in trace:
        return None
    fname = f"openb_pod_list_{name}.csv"
    return fname if _data_dir().joinpath(fname).is_file() else None


def trace_name(trace: str) -> str:
    """A short display name: ``default`` for the packaged default, the file stem otherwise."""
    packaged = _packaged_pod_file(trace)
    stem = (packaged or Path(trace).name).removesuffix(".csv")
    return stem.removeprefix("openb_pod_list_")


def load_openb_nodes(path: str | Path | None = None, *, which: str = DEFAULT_NODE_LIST) -> OpenbNodes:
    """Read an openb node list (``path``, or the packaged ``openb_node_list_<which>.csv``)."""
    with _open(path, f"openb_node_list_{which}.csv") as (source, lines):
        return parse_openb_nodes(lines, source)


def load_openb_pods(path: str | Path | None = None, *, trace: str = DEFAULT_POD_LIST) -> OpenbPods:
    """Read an openb pod list (``path``, or the packaged ``openb_pod_list_<trace>.csv``)."""
    default = _packaged_pod_file(trace) or f"openb_pod_list_{trace}.csv"
    with _open(path, default) as (source, lines):
        return parse_openb_pods(lines, source)


def load_openb_trace(trace: str = DEFAULT_POD_LIST, *, team: str | None = None) -> Trace:
    """A packaged pod list (or a path) with the GPU-node list, as a :class:`Trace`."""
    path = pod_list_path(trace)
    pods = load_openb_pods(path, trace=trace)
    return pods.to_trace(trace_name(trace), nodes=load_openb_nodes(), team=team)


# -- any trace by reference -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TraceOptions:
    limit: int | None = None  # keep the first N jobs
    preemptible_fraction: float = 0.0  # philly: share of jobs marked preemptible (they checkpoint)
    seed: int = 0


def load_trace(ref: str, opts: TraceOptions | None = None) -> Trace:
    """A trace by reference: ``openb[:variant]``, ``philly:PATH``, ``synthetic[:seed]``, or a
    ``.jsonl``/``.csv`` file (Philly or openb, told apart by the header)."""
    opts = opts or TraceOptions()
    kind, _, arg = ref.partition(":")
    variant = openb_variant(ref)
    if variant is not None:
        trace = load_openb_trace(variant)
    elif kind == "synthetic":
        try:
            seed = int(arg) if arg else opts.seed
        except ValueError:
            raise InputError(f"synthetic[:SEED] takes an integer seed, got {arg!r}", field="trace") from None
        trace = generate_synthetic(SyntheticOptions(num_jobs=opts.limit or 1000, seed=seed))
    elif kind == "philly":
        trace = load_philly(
            arg, PhillyOptions(preemptible_fraction=opts.preemptible_fraction, seed=opts.seed, max_jobs=opts.limit)
        )
    else:
        path = Path(ref)
        if path.suffix == ".jsonl":
            trace = load_jsonl(path)
        elif path.suffix == ".csv":
            head = _first_line(path)
            if head.startswith("timestamp,duration,num_gpus"):
                trace = load_philly(
                    path,
                    PhillyOptions(preemptible_fraction=opts.preemptible_fraction, seed=opts.seed, max_jobs=opts.limit),
                )
            elif head.startswith("name,cpu_milli"):
                trace = load_openb_trace(str(path))
            else:
                raise InputError("unrecognised CSV header (expected a Philly or openb trace)", source=str(path), line=1)
        else:
            raise InputError(
                f"unknown trace '{ref}' (use openb[:variant], philly:PATH, synthetic[:seed], or a .jsonl/.csv file)",
                field="trace",
            )
    if opts.limit is not None and len(trace.jobs) > opts.limit:
        trace.jobs = trace.jobs[: opts.limit]
    return trace


def _first_line(path: Path) -> str:
    try:
        with path.open(encoding="utf-8") as f:
            return f.readline().strip()
    except OSError as e:
        raise InputError(f"cannot read: {e.strerror}", source=str(path)) from None
    except UnicodeDecodeError as e:
        raise InputError(f"not UTF-8 text (byte {e.start})", source=str(path)) from None
