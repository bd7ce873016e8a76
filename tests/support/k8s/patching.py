"""The three PATCH flavours of the Kubernetes API, applied to plain JSON dicts.

- JSON merge patch (RFC 7386, ``application/merge-patch+json``): maps merge recursively, ``null``
  deletes a key, lists are replaced whole.
- Strategic merge patch (``application/strategic-merge-patch+json``, built-in kinds only): like a
  merge patch, but lists that Kubernetes declares with a patch merge key are merged element by
  element (``status.conditions`` by ``type``, ``containers`` / ``volumes`` / ``env`` by ``name``,
  ``ownerReferences`` by ``uid``, ...), ``metadata.finalizers`` merges as a set, and the directives
  ``$patch: replace|delete``, ``$deleteFromPrimitiveList/<field>`` and ``$setElementOrder/<field>``
  (ignored: order is kept) are understood. The merge keys are looked up by field name, not by full
  path: right for the pod, node, job and lease fields this substrate serves.
- JSON patch (RFC 6902, ``application/json-patch+json``): delegated to ``jsonpatch`` (kmock's own
  dependency).

Errors raise :class:`PatchError`; the API server answers them with 422 or 400.
"""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch

__all__ = ["MERGE_KEYS", "PatchError", "apply_json_patch", "apply_merge_patch", "apply_strategic_merge_patch"]

# Field name -> patch merge key, from the +patchMergeKey markers of k8s.io/api (the ones our kinds use).
MERGE_KEYS: dict[str, str] = {
    "conditions": "type",
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "volumes": "name",
    "env": "name",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "ports": "containerPort",
    "imagePullSecrets": "name",
    "ownerReferences": "uid",
    "hostAliases": "ip",
    "resourceClaims": "name",
    "schedulingGates": "name",
    "readinessGates": "conditionType",
}
# Lists of scalars with patchStrategy=merge: the patch adds to them instead of replacing them.
PRIMITIVE_MERGE_LISTS = frozenset({"finalizers"})


class PatchError(ValueError):
    """A patch that cannot be applied (the API server answers 422 Unprocessable Entity)."""


def apply_merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result: dict[str, Any] = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = apply_merge_patch(result.get(key), value)
    return result


def _strip_directives(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            k: _strip_directives(v)
            for k, v in value.items()
            if not (
                k == "$patch" or k == "$retainKeys" or k.startswith(("$setElementOrder/", "$deleteFromPrimitiveList/"))
            )
        }
    if isinstance(value, list):
        return [_strip_directives(item) for item in value if not (isinstance(item, dict) and "$patch" in item)]
    return value


def apply_strategic_merge_patch(target: Any, patch: Any) -> Any:
    """A strategic merge patch of ``target`` (not modified) by ``patch``; returns the result."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    directive = patch.get("$patch")
    if directive == "replace":
        return _strip_directives(patch)
    if directive not in (None, "merge"):
        raise PatchError(f"unknown or misplaced patch directive $patch: {directive!r}")
    result: dict[str, Any] = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key in ("$patch", "$retainKeys") or key.startswith("$setElementOrder/"):
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            field = key.split("/", 1)[1]
            if not isinstance(value, list):
                raise PatchError(f"{key} must be a list")
            result[field] = [item for item in result.get(field) or [] if item not in value]
            continue
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict):
            if value.get("$patch") == "delete":
                result.pop(key, None)
            else:
                result[key] = apply_strategic_merge_patch(result.get(key), value)
        elif isinstance(value, list):
            result[key] = _merge_list(key, result.get(key), value)
        else:
            result[key] = value
    return result


def _merge_list(field: str, original: Any, patch: list[Any]) -> list[Any]:
    if any(isinstance(item, dict) and item.get("$patch") == "replace" for item in patch):
        return [_strip_directives(item) for item in patch if not (isinstance(item, dict) and "$patch" in item)]
    current: list[Any] = copy.deepcopy(original) if isinstance(original, list) else []
    if field in PRIMITIVE_MERGE_LISTS:
        return current + [item for item in patch if item not in current]
    merge_key = MERGE_KEYS.get(field)
    if merge_key is None:
        return _strip_directives(patch)  # type: ignore[no-any-return]
    for item in patch:
        if not isinstance(item, dict) or merge_key not in item:
            raise PatchError(
                f"{field}: every element of a strategic merge patch list needs the merge key {merge_key!r}"
            )
        index = next(
            (i for i, old in enumerate(current) if isinstance(old, dict) and old.get(merge_key) == item[merge_key]),
            None,
        )
        if item.get("$patch") == "delete":
            if index is not None:
                del current[index]
        elif index is None:
            current.append(_strip_directives(item))
        else:
            current[index] = apply_strategic_merge_patch(current[index], item)
    return current


def apply_json_patch(target: Any, operations: Any) -> Any:
    """RFC 6902; a failed ``test`` or a bad path raises :class:`PatchError`."""
    if not isinstance(operations, list):
        raise PatchError("a JSON patch must be a list of operations")
    try:
        return jsonpatch.apply_patch(copy.deepcopy(target), operations)
    except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException, KeyError, TypeError, IndexError) as e:
        raise PatchError(f"the JSON patch could not be applied: {e}") from e
