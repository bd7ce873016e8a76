"""A running test cluster: :class:`~tests.support.k8s.apiserver.KubeApiServer` +
:class:`~tests.support.k8s.kubelet.Kubelet`.

Both run on a private asyncio event loop in a background thread, so synchronous code (the official
``kubernetes`` client, the code under test) can block on HTTP calls to it from the test thread, and
asyncio clients (``kubernetes.aio``, ``kubernetes_asyncio``) can use it from their own loop. The HTTP
server is kmock's ``Server`` on ``127.0.0.1`` with a port the OS picks (no races between workers).

From the test thread, reach the server's state only through HTTP or :meth:`Cluster.call` (which
runs a function on the cluster's loop): the server and kubelet are not thread-safe.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import threading
import time
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any, Self, TypeVar, overload

import kmock
import kubernetes.client

from tests.support.k8s.apiserver import NODES, KubeApiServer
from tests.support.k8s.kubelet import Kubelet, KubeletConfig, gpu_node
from tests.support.k8s.nodelifecycle import NodeLifecycle, NodeLifecycleConfig

__all__ = ["Cluster", "WaitTimeout"]

T = TypeVar("T")


class WaitTimeout(AssertionError):
    """:meth:`Cluster.wait_for` ran out of time."""


class Cluster:
    """An API server (and, unless ``kubelet=None`` is passed explicitly, a kubelet) on 127.0.0.1."""

    def __init__(
        self,
        *,
        kubelet: KubeletConfig | None = KubeletConfig(),  # frozen: a shared default is safe
        watch_history: int = 1000,
        schema_version: str | None = "1.29",
        node_lifecycle: NodeLifecycleConfig | None = NodeLifecycleConfig(),  # None: no node controller
    ) -> None:
        self.server = KubeApiServer(watch_history=watch_history, schema_version=schema_version)
        self.kubelet: Kubelet | None = Kubelet(self.server, kubelet) if kubelet is not None else None
        self.node_lifecycle: NodeLifecycle | None = (
            NodeLifecycle(self.server, node_lifecycle) if node_lifecycle is not None else None
        )
        self.url = ""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._failure: BaseException | None = None
        self._server_errors: list[Exception] = []

    # --- lifecycle ------------------------------------------------------------------------------

    def start(self, timeout: float = 10.0) -> Self:
        self._thread = threading.Thread(target=asyncio.run, args=(self._main(),), name="k8s-substrate", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout):
            raise RuntimeError("the Kubernetes test substrate did not start in time")
        if self._failure is not None:
            raise RuntimeError("the Kubernetes test substrate failed to start") from self._failure
        return self

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        kubelet_task: asyncio.Task[None] | None = None
        lifecycle_task: asyncio.Task[None] | None = None
        try:
            async with self.server, kmock.Server(self.server) as http:
                self.url = str(http.url).rstrip("/")
                if self.kubelet is not None:
                    kubelet_task = asyncio.create_task(self.kubelet.run(), name="kubelet")
                if self.node_lifecycle is not None:
                    lifecycle_task = asyncio.create_task(self.node_lifecycle.run(), name="node-lifecycle")
                self._ready.set()
                await self._stop.wait()
                if lifecycle_task is not None:
                    lifecycle_task.cancel()
                    await asyncio.gather(lifecycle_task, return_exceptions=True)
                    assert self.node_lifecycle is not None
                    self.node_lifecycle.aclose()
                if kubelet_task is not None:
                    kubelet_task.cancel()
                    await asyncio.gather(kubelet_task, return_exceptions=True)
                    assert self.kubelet is not None
                    await self.kubelet.aclose()
                await self.server.close_watches()  # before the HTTP server waits for open requests
                # kmock records its own API answers (404 for an unserved URL, ...) as handler errors
                # too; only anything else is a substrate bug that must fail the test.
                self._server_errors = [e for e in self.server.errors if not isinstance(e, kmock.KubernetesError)]
        except BaseException as e:
            self._failure = e
            raise
        finally:
            self._ready.set()

    def stop(self, timeout: float = 15.0) -> None:
        """Stop; raise if the kubelet or a request handler failed unexpectedly during the test."""
        if self._loop is not None and self._stop is not None and self._thread is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stop.set)
            self._thread.join(timeout)
            if self._thread.is_alive():
                raise RuntimeError("the Kubernetes test substrate did not stop in time")
        problems: list[BaseException] = [
            *self._server_errors,
            *(self.kubelet.errors if self.kubelet else []),
            *(self.node_lifecycle.errors if self.node_lifecycle else []),
        ]
        if self._failure is not None:
            problems.append(self._failure)
        if problems:
            raise BaseExceptionGroup("the Kubernetes test substrate failed (server 500s / kubelet errors)", problems)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # --- access ---------------------------------------------------------------------------------

    @property
    def host(self) -> str:
        return "127.0.0.1"

    @overload
    def call(self, fn: Callable[[], Awaitable[T]], timeout: float = 10.0) -> T: ...
    @overload
    def call(self, fn: Callable[[], T], timeout: float = 10.0) -> T: ...
    def call(self, fn: Callable[[], Any], timeout: float = 10.0) -> Any:
        """Run ``fn()`` (sync, or async and awaited) on the cluster's event loop and return its result."""
        if self._loop is None:
            raise RuntimeError("the cluster is not running")

        async def invoke() -> Any:
            result = fn()
            return await result if inspect.isawaitable(result) else result

        future: concurrent.futures.Future[Any] = asyncio.run_coroutine_threadsafe(invoke(), self._loop)
        return future.result(timeout)

    def configuration(self) -> kubernetes.client.Configuration:
        configuration = kubernetes.client.Configuration(host=self.url)
        configuration.verify_ssl = False
        return configuration

    def api_client(self) -> kubernetes.client.ApiClient:
        """A new official-client ``ApiClient`` for this cluster (close it when done)."""
        return kubernetes.client.ApiClient(self.configuration())

    def add_gpu_node(self, name: str, **options: Any) -> dict[str, Any]:
        """Create a GPU node in-process (see :func:`tests.support.k8s.kubelet.gpu_node` for the options)."""
        return self.call(lambda: self.server.create_object(NODES, None, gpu_node(name, **options)))

    def wait_for(
        self, predicate: Callable[[], T], *, timeout: float = 5.0, interval: float = 0.02, what: str = "the condition"
    ) -> T:
        """Poll ``predicate`` until it returns something truthy; return that."""
        deadline = time.monotonic() + timeout
        while True:
            result = predicate()
            if result:
                return result
            if self.kubelet is not None and self.kubelet.errors:
                raise AssertionError(f"the kubelet failed while waiting for {what}") from self.kubelet.errors[0]
            if time.monotonic() > deadline:
                raise WaitTimeout(f"timed out after {timeout}s waiting for {what}")
            time.sleep(interval)
