"""Loading validated configuration: YAML files or mappings into Pydantic models, with errors that
name the file, line and field (:class:`ConfigError`)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from gpufleet.errors import ConfigError

M = TypeVar("M", bound=BaseModel)


def format_validation_error(err: ValidationError, source: str) -> ConfigError:
    """The first problem of a Pydantic error as one clear line naming the field path."""
    first = err.errors()[0]
    loc = ".".join(str(p) for p in first["loc"]) or "(root)"
    more = f" (and {len(err.errors()) - 1} more problem(s))" if len(err.errors()) > 1 else ""
    return ConfigError(first["msg"] + more, source=source, field=loc)


def read_yaml(path: Path, source: str | None = None) -> Any:
    """A YAML file's document (``{}`` when empty), or a :class:`ConfigError` naming the file and line."""
    return read_yaml_text(path, source)[0]


def read_yaml_text(path: Path, source: str | None = None) -> tuple[Any, str]:
    """A YAML file's document and its text (to find a field's line in later errors)."""
    source = source or str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"cannot read: {e.strerror}", source=source) from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"not UTF-8 text (byte {e.start})", source=source) from None
    try:
        loaded = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        raise ConfigError(
            f"not valid YAML: {getattr(e, 'problem', e)}",
            source=source,
            line=None if mark is None else mark.line + 1,
        ) from None
    return (loaded if loaded is not None else {}), text


def load_model(model: type[M], data: Mapping[str, Any] | str | Path, *, source: str, section: str, what: str) -> M:
    """``model`` from a mapping or a YAML file. A file may hold the settings at its top level or
    under ``section:``. ``what`` describes the expected mapping in the error for anything else."""
    if isinstance(data, str | Path):
        source = str(data)
        data = read_yaml(Path(data))
        if isinstance(data, dict) and isinstance(data.get(section), dict):
            data = data[section]
    if not isinstance(data, Mapping):
        raise ConfigError(f"{what} must be a mapping", source=source)
    try:
        return model.model_validate(dict(data))
    except ValidationError as e:
        raise format_validation_error(e, source) from None
