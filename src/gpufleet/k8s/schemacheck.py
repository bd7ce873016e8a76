"""A small JSON Schema checker for the schemas gpufleet writes itself (``gpufleet/k8s/schemas/``).

``jsonschema`` is not a runtime dependency of gpufleet, and the checks need an error that names the
file and the field (``devicePlugin.configs[ts-4].sharing.timeSlicing.resources[0].replicas``), so
:func:`check` implements the part of JSON Schema those schemas use, with the standard's meaning:
``$ref`` (local ``#/...`` pointers), ``type``, ``enum``, ``const``, ``properties``, ``required``,
``additionalProperties``, ``propertyNames``, ``items``, ``minItems``/``maxItems``,
``minProperties``/``maxProperties``, ``minimum``/``maximum``, ``minLength``/``maxLength``,
``pattern`` (searched, as the standard says; gpufleet's patterns are anchored), ``anyOf``,
``oneOf``, ``allOf`` and ``not``. Annotations (``title``, ``description``, ``default``, ``$schema``,
``$id``, ``$defs``) are ignored; any other keyword raises :class:`ValueError` so a schema never
silently says more than is checked. ``tests/k8s/test_k8s_gpustack.py`` checks that it agrees with the
``jsonschema`` package on NVIDIA's samples and on broken documents.

Pure: schemas and documents are plain data.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpufleet.errors import InputError

_ANNOTATIONS = frozenset({"title", "description", "default", "$schema", "$id", "$defs", "definitions", "$comment"})
_KEYWORDS = frozenset(
    {
        "$ref",
        "type",
        "enum",
        "const",
        "properties",
        "required",
        "additionalProperties",
        "propertyNames",
        "items",
        "minItems",
        "maxItems",
        "minProperties",
        "maxProperties",
        "minimum",
        "maximum",
        "minLength",
        "maxLength",
        "pattern",
        "anyOf",
        "oneOf",
        "allOf",
        "not",
    }
)
_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True, slots=True)
class Problem:
    """Where a document breaks its schema (``path``, as gpufleet names fields) and how."""

    path: str
    message: str
    depth: int  # how deep in the document: the most specific of several problems wins


def field_path(base: str, key: str | int) -> str:
    """``base.key``, ``base[key]`` for keys that are not plain names, ``base[3]`` for list items."""
    if isinstance(key, int):
        return f"{base}[{key}]"
    if _PLAIN_KEY.fullmatch(key):
        return f"{base}.{key}" if base else key
    return f"{base}[{key}]"


def check(schema: Mapping[str, Any], document: Any, *, source: str, field: str = "") -> None:
    """Raise :class:`InputError` naming ``source`` and the field when ``document`` breaks ``schema``."""
    problem = problems(schema, document, field=field)
    if problem is not None:
        raise InputError(problem.message, source=source, field=problem.path or None)


def problems(schema: Mapping[str, Any], document: Any, *, field: str = "") -> Problem | None:
    """The first (most specific) problem of ``document`` against ``schema``, or None."""
    return _check(schema, document, field, 0, schema)


def _type_ok(kind: str, value: Any) -> bool:
    if kind == "object":
        return isinstance(value, Mapping)
    if kind == "array":
        return isinstance(value, list)
    if kind == "string":
        return isinstance(value, str)
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "null":
        return value is None
    if isinstance(value, bool):
        return False
    if kind == "integer":
        return isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    if kind == "number":
        return isinstance(value, (int, float))
    raise ValueError(f"unknown JSON Schema type {kind!r}")


def _same(a: Any, b: Any) -> bool:
    """JSON equality: ``true`` is not ``1``."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    return type(a) is type(b) and bool(a == b)


def _resolve(root: Mapping[str, Any], ref: str) -> Mapping[str, Any]:
    if not ref.startswith("#/"):
        raise ValueError(f"only local $ref is supported, got {ref!r}")
    node: Any = root
    for part in ref[2:].split("/"):
        node = node[part.replace("~1", "/").replace("~0", "~")]
    if not isinstance(node, Mapping):
        raise ValueError(f"$ref {ref!r} does not name a schema")
    return node


def _show(value: Any) -> str:
    text = repr(value) if not isinstance(value, str) else f"'{value}'"
    return text if len(text) <= 60 else text[:57] + "..."


def _summary(schema: Mapping[str, Any], root: Mapping[str, Any]) -> str:
    """A few words for what a schema accepts (for 'expected one of' messages)."""
    if "$ref" in schema:
        return _summary(_resolve(root, schema["$ref"]), root)
    if "const" in schema:
        return _show(schema["const"])
    if "enum" in schema:
        return " | ".join(_show(v) for v in schema["enum"])
    kind = schema.get("type")
    if kind == "integer" and "minimum" in schema:
        return f"an integer >= {schema['minimum']}"
    if kind == "array":
        return "a list"
    if kind == "object":
        return "a mapping"
    if isinstance(kind, str):
        return f"a {kind}"
    branches = schema.get("anyOf") or schema.get("oneOf")
    if branches:
        return " or ".join(_summary(b, root) for b in branches)
    return "a value of another form"


def _check(schema: Mapping[str, Any], value: Any, path: str, depth: int, root: Mapping[str, Any]) -> Problem | None:
    unknown = set(schema) - _KEYWORDS - _ANNOTATIONS
    if unknown:
        raise ValueError(f"JSON Schema keyword(s) not supported here: {', '.join(sorted(unknown))}")

    def bad(message: str) -> Problem:
        return Problem(path, message, depth)

    if "$ref" in schema:
        found = _check(_resolve(root, schema["$ref"]), value, path, depth, root)
        if found is not None:
            return found
    kind = schema.get("type")
    if kind is not None:
        kinds = [kind] if isinstance(kind, str) else list(kind)
        if not any(_type_ok(k, value) for k in kinds):
            return bad(f"expected {' or '.join(kinds)}, got {_show(value)}")
    if "const" in schema and not _same(value, schema["const"]):
        return bad(f"must be {_show(schema['const'])}, got {_show(value)}")
    if "enum" in schema and not any(_same(value, v) for v in schema["enum"]):
        return bad(f"must be one of {', '.join(_show(v) for v in schema['enum'])}; got {_show(value)}")

    if isinstance(value, str):
        if "minLength" in schema and len(value) < schema["minLength"]:
            return bad(f"must be at least {schema['minLength']} character(s) long")
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            return bad(f"must be at most {schema['maxLength']} characters long, got {len(value)}")
        if "pattern" in schema and re.search(schema["pattern"], value) is None:
            return bad(f"{_show(value)} does not have the expected form ({schema['pattern']})")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            return bad(f"must be >= {schema['minimum']}, got {_show(value)}")
        if "maximum" in schema and value > schema["maximum"]:
            return bad(f"must be <= {schema['maximum']}, got {_show(value)}")

    if isinstance(value, Mapping):
        found = _check_object(schema, value, path, depth, root)
        if found is not None:
            return found
    if isinstance(value, list):
        if "minItems" in schema and len(value) < schema["minItems"]:
            return bad(f"needs at least {schema['minItems']} item(s), got {len(value)}")
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            return bad(f"takes at most {schema['maxItems']} item(s), got {len(value)}")
        items = schema.get("items")
        if isinstance(items, Mapping):
            for i, item in enumerate(value):
                found = _check(items, item, field_path(path, i), depth + 1, root)
                if found is not None:
                    return found

    for sub in schema.get("allOf") or []:
        found = _check(sub, value, path, depth, root)
        if found is not None:
            return found
    for key in ("anyOf", "oneOf"):
        branches = schema.get(key)
        if not branches:
            continue
        results = [_check(b, value, path, depth, root) for b in branches]
        passed = sum(r is None for r in results)
        if key == "oneOf" and passed > 1:
            return bad("matches more than one of the allowed forms")
        if passed == 0:
            deepest = max((r for r in results if r is not None), key=lambda r: r.depth)
            if deepest.depth > depth:
                return deepest
            return bad(f"expected {' or '.join(_summary(b, root) for b in branches)}; got {_show(value)}")
    if "not" in schema and _check(schema["not"], value, path, depth, root) is None:
        return bad(f"is not allowed: {_show(value)}")
    return None


def _check_object(
    schema: Mapping[str, Any], value: Mapping[Any, Any], path: str, depth: int, root: Mapping[str, Any]
) -> Problem | None:
    for key in schema.get("required") or []:
        if key not in value:
            return Problem(field_path(path, key), "missing", depth + 1)
    if "minProperties" in schema and len(value) < schema["minProperties"]:
        return Problem(path, f"needs at least {schema['minProperties']} entr(y/ies)", depth)
    if "maxProperties" in schema and len(value) > schema["maxProperties"]:
        return Problem(path, f"takes at most {schema['maxProperties']} entr(y/ies), got {len(value)}", depth)
    props: Mapping[str, Any] = schema.get("properties") or {}
    extra = schema.get("additionalProperties", True)
    names = schema.get("propertyNames")
    for key, item in value.items():
        if not isinstance(key, str):
            return Problem(path, f"keys must be strings, got {_show(key)}", depth)
        where = field_path(path, key)
        if isinstance(names, Mapping):
            found = _check(names, key, where, depth + 1, root)
            if found is not None:
                return Problem(where, f"not a valid name: {found.message}", depth + 1)
        if key in props:
            found = _check(props[key], item, where, depth + 1, root)
        elif extra is False:
            known = ", ".join(sorted(props)) or "none"
            return Problem(where, f"unknown key (known: {known})", depth + 1)
        elif isinstance(extra, Mapping):
            found = _check(extra, item, where, depth + 1, root)
        else:
            found = None
        if found is not None:
            return found
    return None


def inline_refs(schema: Mapping[str, Any]) -> dict[str, Any]:
    """``schema`` with every local ``$ref`` replaced by what it names and without ``$schema``,
    ``$id`` and ``$defs``: a self-contained subschema to embed in another document (a Helm chart's
    values.schema.json). Refuses recursive schemas."""

    def walk(node: Any, seen: tuple[str, ...]) -> Any:
        if isinstance(node, list):
            return [walk(n, seen) for n in node]
        if not isinstance(node, Mapping):
            return node
        if "$ref" in node:
            ref = str(node["$ref"])
            if ref in seen:
                raise ValueError(f"recursive $ref {ref!r}")
            target = walk(_resolve(schema, ref), (*seen, ref))
            rest = {k: walk(v, seen) for k, v in node.items() if k != "$ref"}
            return {**target, **rest} if rest else target
        return {k: walk(v, seen) for k, v in node.items() if k not in ("$schema", "$id", "$defs", "definitions")}

    out: dict[str, Any] = walk(schema, ())
    return out


__all__ = ["Problem", "check", "field_path", "inline_refs", "problems"]
