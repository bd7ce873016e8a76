"""One way to call the Kubernetes API: the official client's call, its JSON as plain dicts (what
the translation modules read), and every failure as a :class:`~gpufleet.errors.BackendError`
saying what was being done."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from gpufleet.errors import BackendError


def call_json(what: str, call: Callable[..., Any], *args: Any, **kwargs: Any) -> dict[str, Any]:
    """``call(*args, **kwargs)`` with ``_preload_content=False``; its answer parsed as JSON."""
    from kubernetes.client.exceptions import ApiException

    try:
        resp = call(*args, _preload_content=False, **kwargs)
    except ApiException as e:
        raise BackendError(f"{what}: Kubernetes API {e.status} {e.reason}: {(e.body or '')[:300]}") from None
    except Exception as e:  # connection refused, TLS, timeouts
        raise BackendError(f"{what}: Kubernetes API unreachable: {e}") from None
    try:
        data = json.loads(resp.data)
    except (ValueError, TypeError) as e:
        raise BackendError(f"{what}: the API's answer is not JSON: {e}") from None
    return data if isinstance(data, dict) else {}
