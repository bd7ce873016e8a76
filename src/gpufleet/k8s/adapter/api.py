"""One way to call the Kubernetes API: the official client's call, its JSON as plain dicts (what
the translation modules read), and every failure as a :class:`~gpufleet.errors.BackendError`
saying what was being done.

Every call has a deadline (:func:`with_deadline`): the official client waits for ever by default, so a
silent API server (a partition: the connection open, nothing coming back) would hang the leader's
step. A call that names its own ``_request_timeout`` (a followed log) keeps it."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from gpufleet.errors import BackendError

# (connect, read) seconds for a call that names no deadline of its own
DEFAULT_TIMEOUT_S: tuple[float, float] = (5.0, 10.0)


def with_deadline(api_client: Any, connect_s: float | None = None, read_s: float | None = None) -> Any:
    """Give every request of ``api_client`` a deadline unless the call names one (idempotent: a
    second call changes the deadline). Returns the client."""
    rest = api_client.rest_client
    original = getattr(rest, "gpufleet_request", None) or rest.request
    deadline = (
        connect_s if connect_s is not None else DEFAULT_TIMEOUT_S[0],
        read_s if read_s is not None else DEFAULT_TIMEOUT_S[1],
    )

    def request(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get("_request_timeout") is None:
            kwargs["_request_timeout"] = deadline
        return original(*args, **kwargs)

    rest.gpufleet_request = original
    rest.gpufleet_deadline = deadline
    rest.request = request
    # one attempt per call: urllib3 retries a read timeout 3 times by default, so a silent server
    # would cost 4 deadlines; the loop retries at its next step instead
    from urllib3.util.retry import Retry

    once = Retry(total=0, redirect=False)
    pools = rest.pool_manager
    pools.connection_pool_kw["retries"] = once
    for key in list(pools.pools.keys()):
        pool = pools.pools.get(key)
        if pool is not None:
            pool.retries = once
    return api_client


def let_go(resp: Any, read_to_end: bool) -> None:
    """Hand a streamed answer's connection back to the client's pool — only when it was read to its
    end. A watch or a followed log the server still streams on would otherwise be the connection the
    next request is sent on: that request would read the stream's next chunk as its answer (or wait
    for the stream's end). One not read to its end is closed instead."""
    if not read_to_end:
        resp.close()
    resp.release_conn()


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
