"""YAML text as ``gpufleet k8s gpu-config`` prints it: the objects as a stream
(:func:`dump_objects`), the values as the chart's ``gpuStack:`` subtree (:func:`dump_values`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import yaml


class _Dumper(yaml.SafeDumper):
    """Block style; multi-line strings (the ConfigMaps' documents) as literal blocks."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def dump_objects(objects: Sequence[Mapping[str, Any]]) -> str:
    """A YAML stream, each object starting with ``---`` (keys in the objects' own order)."""
    return str(yaml.dump_all(objects, Dumper=_Dumper, sort_keys=False, explicit_start=True, width=120))


def dump_values(values: Mapping[str, Any]) -> str:
    """The ``gpuStack:`` subtree as YAML text (what the chart's values.yaml holds)."""
    return str(yaml.dump({"gpuStack": values}, Dumper=_Dumper, sort_keys=False, width=120))
