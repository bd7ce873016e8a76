"""uvicorn's HTTP protocols with a request-head timeout (slow-loris).

uvicorn times out an idle kept-alive connection (``timeout_keep_alive``) but not a request head
that arrives slowly: a client sending its headers a byte a second holds a connection, and its file
descriptor, for ever — and the keep-alive timer is cancelled by the first byte of the next request.
These protocols close a connection whose request head (request line and headers) is not complete
within ``header_timeout_s`` of its opening, or of the end of its previous response; a 408 is sent
first when part of a head came. Only the head is timed: a long answer (a followed log) is not cut off.

This module imports nothing but uvicorn: with ``api_workers`` > 1 uvicorn pickles its config, this
protocol included, into each worker, which must unpickle it (so import this module) before it
answers the supervisor's health check.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

_TIMEOUT_TEXT = b"the request head did not arrive in time: closed\n"
_REQUEST_TIMEOUT = (
    b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain; charset=utf-8\r\nconnection: close\r\n"
    b"content-length: %d\r\n\r\n%s" % (len(_TIMEOUT_TEXT), _TIMEOUT_TEXT)
)


class _HeaderTimeout:
    """The timer, for uvicorn's HTTP protocols (h11 and httptools): armed when a connection opens
    and when a response ends; disarmed when a request's head is complete."""

    header_timeout_s: float
    _head_timer: asyncio.TimerHandle | None
    _head_bytes: int

    def _arm_head_timer(self) -> None:
        self._cancel_head_timer()
        self._head_bytes = 0
        loop: asyncio.AbstractEventLoop = self.loop  # type: ignore[attr-defined]
        self._head_timer = loop.call_later(self.header_timeout_s, self._head_timed_out)

    def _cancel_head_timer(self) -> None:
        timer = getattr(self, "_head_timer", None)
        if timer is not None:
            timer.cancel()
        self._head_timer = None

    def _in_request(self) -> bool:
        cycle = self.cycle  # type: ignore[attr-defined]
        return cycle is not None and not cycle.response_complete

    def _head_timed_out(self) -> None:
        self._head_timer = None
        transport: asyncio.Transport = self.transport  # type: ignore[attr-defined]
        if transport.is_closing() or self._in_request():
            return  # a request is being answered (its head came in time): not ours to time
        if self._head_bytes:
            transport.write(_REQUEST_TIMEOUT)
        transport.close()


def _timed(base: type[Any]) -> type[Any]:
    class Timed(_HeaderTimeout, base):  # type: ignore[misc]
        def __init__(self, *args: Any, header_timeout_s: float = 10.0, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.header_timeout_s = header_timeout_s
            self._head_timer = None
            self._head_bytes = 0

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._arm_head_timer()

        def data_received(self, data: bytes) -> None:
            self._head_bytes += len(data)
            super().data_received(data)
            if self._head_timer is not None and self._in_request():
                self._cancel_head_timer()  # the head is complete: its request is being answered

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._arm_head_timer()  # the next request's head: timed from now

        def connection_lost(self, exc: Exception | None) -> None:
            self._cancel_head_timer()
            super().connection_lost(exc)

    return Timed


class HeaderTimeoutH11Protocol(_timed(H11Protocol)):  # type: ignore[misc]
    """uvicorn's h11 protocol with a request-head timeout."""


HeaderTimeoutHttpToolsProtocol: type[Any] | None
try:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
except ImportError:  # httptools is optional: uvicorn then uses h11
    HeaderTimeoutHttpToolsProtocol = None
else:

    class _HttpToolsTimed(_timed(HttpToolsProtocol)):  # type: ignore[misc]
        """uvicorn's httptools protocol with a request-head timeout."""

    HeaderTimeoutHttpToolsProtocol = _HttpToolsTimed


def header_timeout_protocol(header_timeout_s: float, impl: str = "auto") -> functools.partial[Any]:
    """uvicorn's ``http`` setting for a request-head timeout: the protocol uvicorn's ``auto`` would
    pick (httptools when installed, else h11), or ``impl`` (``h11``, ``httptools``). A partial of a
    module-level class: it pickles into ``api_workers`` processes."""
    protocol: Callable[..., Any] | None = HeaderTimeoutHttpToolsProtocol
    if impl == "httptools" or (impl == "auto" and protocol is not None):
        if protocol is None:
            raise ValueError("httptools is not installed")
    elif impl in ("auto", "h11"):
        protocol = HeaderTimeoutH11Protocol
    else:
        raise ValueError(f"unknown HTTP protocol '{impl}' (h11, httptools or auto)")
    return functools.partial(protocol, header_timeout_s=header_timeout_s)
