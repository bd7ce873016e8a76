"""The root exception type and its families.

Every error gpufleet raises on purpose derives from :class:`GpufleetError`. Interfaces (CLI, API)
convert it to one clear line / a problem document; anything else is a bug.
"""

from __future__ import annotations


class GpufleetError(Exception):
    """Root of all gpufleet errors. ``code`` is a stable machine-readable identifier."""

    code = "gpufleet_error"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InputError(GpufleetError):
    """Bad input from a person or a file. Names the place (file, line, field) in its message."""

    code = "invalid_input"

    def __init__(
        self,
        message: str,
        *,
        source: str | None = None,
        line: int | None = None,
        field: str | None = None,
    ) -> None:
        self.source = source
        self.line = line
        self.field = field
        where = []
        if source is not None:
            where.append(str(source) if line is None else f"{source}:{line}")
        elif line is not None:
            where.append(f"line {line}")
        if field is not None:
            where.append(f"field '{field}'")
        prefix = ", ".join(where)
        super().__init__(f"{prefix}: {message}" if prefix else message)


class TraceError(InputError):
    """A malformed row or header in a trace file."""

    code = "invalid_trace"


class ConfigError(InputError):
    """A malformed configuration file or value."""

    code = "invalid_config"


class CatalogError(InputError):
    """A price catalog that fails validation."""

    code = "invalid_catalog"


class RegistryError(GpufleetError):
    """A policy name that is unknown or registered twice."""

    code = "unknown_policy"


class TransitionError(GpufleetError):
    """An illegal job state transition (a bug in the caller, never silently ignored)."""

    code = "illegal_transition"


class SchedulingError(GpufleetError):
    """An internal inconsistency found by the scheduler (e.g. a binding that over-allocates)."""

    code = "scheduling_error"


class NotFoundError(GpufleetError):
    """A job, team, token or other object that does not exist (or that the caller may not see)."""

    code = "not_found"


class ConflictError(GpufleetError):
    """The request conflicts with stored state (a job already ended, a name already taken)."""

    code = "conflict"


class AuthError(GpufleetError):
    """No credentials, or credentials that are not valid."""

    code = "unauthenticated"


class PermissionDeniedError(GpufleetError):
    """Valid credentials whose role or team does not allow the action."""

    code = "forbidden"


class StoreError(GpufleetError):
    """The store cannot be reached or is at a schema version this code does not know."""

    code = "store_unavailable"


class BackendError(GpufleetError):
    """A backend could not do what it was asked (launch, stop, inventory)."""

    code = "backend_error"
