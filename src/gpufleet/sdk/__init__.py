"""The gpufleet Python SDK: typed clients of the REST API.

>>> from gpufleet.sdk import Client
>>> with Client() as c:                                  # doctest: +SKIP
...     job = c.submit(command=["python", "train.py"], gpus=1)
...     c.wait(job.id)

URL and token come from the arguments, else ``$GPUFLEET_URL`` / ``$GPUFLEET_TOKEN``, else the local
server's home (see :mod:`gpufleet.sdk.config`).
"""

from gpufleet.sdk.client import AsyncClient, Client
from gpufleet.sdk.errors import (
    ApiError,
    ApiUnavailable,
    BudgetExceeded,
    Conflict,
    Forbidden,
    InvalidRequest,
    NotFound,
    ResponseError,
    ServerUnavailable,
    Unauthorized,
    WaitTimeout,
)

__all__ = [
    "ApiError",
    "ApiUnavailable",
    "AsyncClient",
    "BudgetExceeded",
    "Client",
    "Conflict",
    "Forbidden",
    "InvalidRequest",
    "NotFound",
    "ResponseError",
    "ServerUnavailable",
    "Unauthorized",
    "WaitTimeout",
]
