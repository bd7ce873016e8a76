"""Offline checks of custom resources against real CRDs (vendored in ``tests/support/k8s/crds/``, their
upstream repository, commit and licence in its ``PROVENANCE.md``): the CRD's ``openAPIV3Schema`` as
JSON Schema, and its CEL ``x-kubernetes-validations`` rules.

A reusable copy of the helpers in ``tests/k8s/test_k8s_translate.py`` (``crd_schema``, ``check_cel``,
``validate_crd``, ``validate_builtin``), for tests that check objects gpufleet renders:

- :func:`crd_schema` — the v1 schema with the Kubernetes extensions mapped: ``nullable`` → a null
  type too, ``x-kubernetes-int-or-string`` → integer or string, objects with properties reject unknown
  fields unless ``x-kubernetes-preserve-unknown-fields`` (as the API server prunes or refuses them);
- :func:`check_cel` — every CEL rule that does not compare with the old object (``oldSelf``: only an
  update has one), evaluated with ``cel-python``; returns how many ran;
- :func:`validate_crd` — the schema, then the object's ``metadata`` as the API server checks
  ObjectMeta (as a ConfigMap's, with ``kubernetes-validate``);
- :func:`validate_builtin` — a built-in object (ConfigMap, ...) with ``kubernetes-validate --strict``.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any

import celpy  # type: ignore[import-untyped]
import jsonschema
import kubernetes_validate  # type: ignore[import-untyped]
import yaml
from celpy import celtypes

CRDS = Path(__file__).resolve().parent / "crds"  # upstream CRDs, vendored: see crds/PROVENANCE.md
K8S_VERSIONS = ("1.29", "1.33")


@functools.cache
def _crd(path: Path) -> dict[str, Any]:
    crd: dict[str, Any] = yaml.safe_load(path.read_text())
    return crd


def _version(path: Path, version: str) -> dict[str, Any]:
    (found,) = [v for v in _crd(path)["spec"]["versions"] if v["name"] == version]
    return found  # type: ignore[no-any-return]


def crd_schema(path: Path, version: str = "v1") -> dict[str, Any]:
    """The openAPIV3Schema of a CRD's ``version`` as JSON Schema (see the module docstring)."""

    def convert(node: Any) -> Any:
        if isinstance(node, list):
            return [convert(n) for n in node]
        if not isinstance(node, dict):
            return node
        out = {k: convert(v) for k, v in node.items() if not k.startswith("x-kubernetes-") and k != "nullable"}
        if node.get("x-kubernetes-int-or-string") and "anyOf" not in out:
            out.pop("type", None)
            out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
        if node.get("nullable") and "type" in out:
            out["type"] = [out["type"], "null"]
        if (
            out.get("type") == "object"
            and "properties" in out
            and "additionalProperties" not in out
            and not node.get("x-kubernetes-preserve-unknown-fields")
        ):
            out["additionalProperties"] = False
        return out

    return convert(_version(path, version)["schema"]["openAPIV3Schema"])  # type: ignore[no-any-return]


def check_cel(path: Path, obj: dict[str, Any], version: str = "v1") -> int:
    """Evaluate the CRD's CEL rules that do not use ``oldSelf``; an AssertionError names the failing
    rule's place and message. Returns how many rules ran."""
    env = celpy.Environment()

    def find(s: Any, pattern: Any) -> Any:
        m = re.search(str(pattern), str(s))
        return celtypes.StringType(m.group(0) if m else "")

    ran = 0

    def walk(schema: dict[str, Any], data: Any, where: str) -> None:
        nonlocal ran
        for rule in schema.get("x-kubernetes-validations", []):
            if "oldSelf" in rule["rule"]:
                continue
            program = env.program(env.compile(rule["rule"]), functions={"find": find})
            assert program.evaluate({"self": celpy.json_to_cel(data)}), f"{where}: {rule['message']}"
            ran += 1
        if isinstance(data, dict):
            for k, v in data.items():
                sub = schema.get("properties", {}).get(k) or schema.get("additionalProperties")
                if isinstance(sub, dict):
                    walk(sub, v, f"{where}.{k}")
        elif isinstance(data, list) and isinstance(schema.get("items"), dict):
            for i, item in enumerate(data):
                walk(schema["items"], item, f"{where}[{i}]")

    walk(_version(path, version)["schema"]["openAPIV3Schema"], obj, "")
    return ran


def validate_builtin(obj: dict[str, Any]) -> None:
    """A built-in Kubernetes object, strictly (unknown fields refused), for 1.29 and 1.33."""
    for version in K8S_VERSIONS:
        kubernetes_validate.validate(obj, version, strict=True)


def validate_crd(path: Path, obj: dict[str, Any], version: str = "v1") -> None:
    """A custom resource against its CRD's schema, and its ObjectMeta as the API server checks it."""
    jsonschema.Draft202012Validator(crd_schema(path, version)).validate(obj)
    validate_builtin({"apiVersion": "v1", "kind": "ConfigMap", "metadata": obj["metadata"]})


__all__ = ["CRDS", "check_cel", "crd_schema", "validate_builtin", "validate_crd"]
