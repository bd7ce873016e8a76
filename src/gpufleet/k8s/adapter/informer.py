"""Informers: one cache per kind, filled by one list and kept current by a watch — client-go's
reflector and indexer, as far as gpufleet needs them.

An :class:`Informer` runs on its own daemon thread:

1. **List** once (pages of :data:`PAGE_SIZE`, the first page's ``resourceVersion`` is where the
   watch starts: later pages may be newer, and their changes come again on the watch, idempotently);
   the cache is *replaced* (objects no longer listed are gone, as client-go's ``Replace`` does).
2. **Watch** from that resourceVersion with bookmarks (``allowWatchBookmarks``: the server moves the
   resourceVersion on while nothing matches, so a rewatch does not fall out of the history) and a
   server-side ``timeoutSeconds``; a watch that ends is started again from the last resourceVersion
   seen, without a list.
3. **410 Gone / Expired** (the history compacted past our resourceVersion): list again.
4. **Any other failure** (5xx, 429, a timeout, a connection refused) is transient: the cache is
   kept, the informer backs off (0.5 s doubling to 30 s, with jitter) and tries again from where it
   was. It never drops what it knows because the API server was briefly unwell.

The loop reads the cache (:meth:`Informer.items`, :meth:`Informer.by_index`); the API server is
called only to write. A ``transform`` turns each object into what the reader needs (client-go's
``SetTransform``): gpufleet keeps :class:`~gpufleet.k8s.adapter.pods.PodFacts` for pods, not their
full JSON, so 20,000 pods stay small. An object the transform cannot read (it raises
:class:`~gpufleet.errors.GpufleetError`) is logged and left out; it never stops the informer.

Changes are counted (:attr:`Informer.version`) and the index keys they touch are remembered until
:meth:`Informer.drain_changed`, so a reader can look only at what moved since it last looked.
``on_change`` is called (from the informer's thread) after each applied batch: the loop wakes up.
"""

from __future__ import annotations

import contextlib
import json
import logging
import random
import socket
import threading
import time
from collections.abc import Callable, Hashable, Iterable
from typing import Any, Generic, TypeVar

from gpufleet.errors import BackendError, GpufleetError
from gpufleet.k8s.adapter.api import let_go

log = logging.getLogger(__name__)

T = TypeVar("T")

PAGE_SIZE = 500
WATCH_TIMEOUT_S = 300  # the server ends a watch after this (client-go: 5–10 min, randomized)
CONNECT_TIMEOUT_S = 5.0
BACKOFF_MIN_S = 0.5
BACKOFF_MAX_S = 30.0

Key = tuple[str, str]  # (namespace or "", name)


class Expired(BackendError):
    """The watch's resourceVersion is older than the server's history (410): list again."""


def object_key(obj: dict[str, Any]) -> Key:
    meta = obj.get("metadata") or {}
    return (str(meta.get("namespace") or ""), str(meta.get("name") or ""))


def _rv(obj: dict[str, Any]) -> str | None:
    rv = (obj.get("metadata") or {}).get("resourceVersion")
    return str(rv) if rv not in (None, "") else None


def _socket_of(resp: Any) -> socket.socket | None:
    """The socket an urllib3 response reads from: its connection's, or (when http.client let go of
    the connection, an answer that ends with the connection) the one behind its file object."""
    sock = getattr(getattr(resp, "_connection", None), "sock", None)
    if isinstance(sock, socket.socket):
        return sock
    raw = getattr(getattr(getattr(resp, "_fp", None), "fp", None), "raw", None)
    sock = getattr(raw, "_sock", None)
    return sock if isinstance(sock, socket.socket) else None


class Informer(Generic[T]):
    """A cache of one kind of object (optionally narrowed by selectors), kept current by a watch.

    ``list_call`` is the official client's list function for the kind (``CoreV1Api.list_node``,
    ``CoreV1Api.list_pod_for_all_namespaces``): it is called with ``watch=True`` for the watch.
    ``transform(obj) -> T | None`` (None: not kept); ``index(T) -> key | None`` groups items for
    :meth:`by_index` (gpufleet's pods by job id)."""

    def __init__(
        self,
        what: str,
        list_call: Callable[..., Any],
        transform: Callable[[dict[str, Any]], T | None],
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        index: Callable[[T], Hashable | None] | None = None,
        on_change: Callable[[], None] | None = None,
        watch_timeout_s: int = WATCH_TIMEOUT_S,
        read_timeout_s: float = 10.0,
    ) -> None:
        self.what = what
        self._list_call = list_call
        self._transform = transform
        self._selectors = {
            k: v for k, v in (("label_selector", label_selector), ("field_selector", field_selector)) if v
        }
        self._index_of = index
        self.on_change = on_change
        self.watch_timeout_s = watch_timeout_s
        self.read_timeout_s = read_timeout_s
        self._lock = threading.Lock()
        self._items: dict[Key, T] = {}
        self._rvs: dict[Key, str] = {}  # each cached object's resourceVersion (what the cache has seen of it)
        self._index: dict[Hashable, set[Key]] = {}
        self._changed: set[Hashable] = set()
        self._synced = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._response: Any = None  # the open watch (closed by stop() to end a blocked read)
        self.resource_version: str | None = None
        self.version = 0  # applied changes (a reader compares it with what it last saw)
        self.lists = 0  # full lists made (one at the start, one per 410)
        self.watches = 0  # watch requests made
        self.last_error: str | None = None

    # -- running -----------------------------------------------------------------------------------
    def start(self) -> Informer[T]:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=f"informer {self.what}", daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        resp = self._response
        if resp is not None:
            # shut the socket down (close() would wait for the lock the reading thread holds): the
            # read blocked on the watch returns at once
            sock = _socket_of(resp)
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def synced(self) -> bool:
        """The first list has been applied (before that, the cache says nothing)."""
        return self._synced.is_set()

    def wait_synced(self, timeout: float) -> bool:
        self.start()
        return self._synced.wait(timeout)

    def _run(self) -> None:
        backoff = 0.0
        while not self._stop.is_set():
            try:
                if self.resource_version is None:
                    self._list()
                self._watch()
                backoff = 0.0
            except Expired as e:
                log.info("%s: %s; listing again", self.what, e)
                self.resource_version = None
            except Exception as e:  # every failure is transient: the cache is kept
                if self._stop.is_set():
                    return
                message = str(e) or type(e).__name__
                if message != self.last_error:
                    log.warning("%s: %s (retrying with back-off; the cache is kept)", self.what, message)
                self.last_error = message
                backoff = min(max(backoff * 2, BACKOFF_MIN_S), BACKOFF_MAX_S)
                self._stop.wait(backoff * random.uniform(0.8, 1.2))

    # -- list ------------------------------------------------------------------------------------
    def _call(self, **kwargs: Any) -> Any:
        from kubernetes.client.exceptions import ApiException

        try:
            return self._list_call(_preload_content=False, **self._selectors, **kwargs)
        except ApiException as e:
            if e.status == 410:
                raise Expired(f"{e.status} {e.reason}") from None
            raise BackendError(f"{self.what}: Kubernetes API {e.status} {e.reason}: {(e.body or '')[:200]}") from None

    def _list(self) -> None:
        items: dict[Key, T] = {}
        rvs: dict[Key, str] = {}
        rv: str | None = None
        token: str | None = None
        while True:
            kwargs: dict[str, Any] = {"limit": PAGE_SIZE, "_request_timeout": (CONNECT_TIMEOUT_S, 60.0)}
            if token:
                kwargs["_continue"] = token
            resp = self._call(**kwargs)
            try:
                page = json.loads(resp.data)
            except (ValueError, TypeError) as e:
                raise BackendError(f"{self.what}: the list is not JSON: {e}") from None
            meta = page.get("metadata") or {}
            if rv is None:
                rv = str(meta.get("resourceVersion") or "") or None
            for obj in page.get("items") or []:
                if isinstance(obj, dict):
                    got = self._read(obj)
                    if got is not None:
                        items[object_key(obj)] = got
                        rvs[object_key(obj)] = _rv(obj) or ""
            token = meta.get("continue") or None
            if not token:
                break
        self.lists += 1
        with self._lock:
            old = self._items
            self._items = items
            self._rvs = rvs
            self._index = {}
            for key, item in items.items():
                self._add_index(key, item)
            if self._index_of is not None:
                for item in (*old.values(), *items.values()):
                    ik = self._index_of(item)
                    if ik is not None:
                        self._changed.add(ik)
            self.version += 1
        self.resource_version = rv
        self.last_error = None
        self._synced.set()
        self._notify()

    # -- watch -----------------------------------------------------------------------------------
    def _watch(self) -> None:
        self.watches += 1
        resp = self._call(
            watch=True,
            resource_version=self.resource_version,
            allow_watch_bookmarks=True,
            timeout_seconds=self.watch_timeout_s,
            # the read deadline bounds the silence between two events: the server sends a bookmark
            # (or ends the watch) well within timeoutSeconds; a partition ends the read
            _request_timeout=(CONNECT_TIMEOUT_S, self.watch_timeout_s + self.read_timeout_s),
        )
        self._response = resp
        ended = False  # read to the end of the server's answer
        try:
            if self._stop.is_set():  # stop() came while the watch was being opened (it saw no response)
                return
            buffered = b""
            # amt=None: each chunk of the chunked answer as it arrives (a fixed size would wait for it)
            for chunk in resp.stream(amt=None, decode_content=True):
                if self._stop.is_set():
                    return
                buffered += chunk if isinstance(chunk, bytes) else str(chunk).encode()
                if b"\n" not in buffered:
                    continue
                *lines, buffered = buffered.split(b"\n")
                self._apply(lines)
            ended = True
            if buffered.strip():
                self._apply([buffered])
        finally:
            self._response = None
            let_go(resp, read_to_end=ended)

    def _apply(self, lines: Iterable[bytes]) -> None:
        changed = False
        for line in lines:
            if not line.strip():
                continue
            try:
                event = json.loads(line)
            except ValueError:
                log.warning("%s: a watch event that is not JSON: %.120r", self.what, line)
                continue
            kind = event.get("type")
            obj = event.get("object") or {}
            if kind == "ERROR":
                code = obj.get("code")
                if code == 410:
                    raise Expired(str(obj.get("message") or "resourceVersion too old"))
                raise BackendError(f"{self.what}: watch error {code}: {obj.get('message')}")
            rv = _rv(obj)
            if kind == "BOOKMARK":
                if rv:
                    self.resource_version = rv
                continue
            key = object_key(obj)
            with self._lock:
                old = self._items.pop(key, None)
                self._rvs.pop(key, None)
                if old is not None:
                    self._drop_index(key, old)
                if kind in ("ADDED", "MODIFIED"):
                    got = self._read(obj)
                    if got is not None:
                        self._items[key] = got
                        self._rvs[key] = rv or ""
                        self._add_index(key, got)
                self.version += 1
            if rv:
                self.resource_version = rv
            changed = True
        if changed:
            self._notify()

    # -- the cache -------------------------------------------------------------------------------
    def _read(self, obj: dict[str, Any]) -> T | None:
        try:
            return self._transform(obj)
        except GpufleetError as e:  # one bad object must not stop the informer
            log.warning("%s: ignoring %s/%s: %s", self.what, *object_key(obj), e)
            return None

    def _add_index(self, key: Key, item: T) -> None:
        if self._index_of is None:
            return
        ik = self._index_of(item)
        if ik is not None:
            self._index.setdefault(ik, set()).add(key)
            self._changed.add(ik)

    def _drop_index(self, key: Key, item: T) -> None:
        if self._index_of is None:
            return
        ik = self._index_of(item)
        if ik is not None:
            keys = self._index.get(ik)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self._index[ik]
            self._changed.add(ik)

    def _notify(self) -> None:
        if self.on_change is not None:
            try:
                self.on_change()
            except Exception:  # a reader's hook must not stop the informer
                log.exception("%s: on_change failed", self.what)

    def items(self) -> list[T]:
        with self._lock:
            return list(self._items.values())

    def get(self, namespace: str, name: str) -> T | None:
        with self._lock:
            return self._items.get((namespace, name))

    def by_index(self, key: Hashable) -> list[T]:
        with self._lock:
            return [self._items[k] for k in self._index.get(key, ()) if k in self._items]

    def resource_versions(self) -> dict[Key, str]:
        """Each cached object's resourceVersion: compared with the server's, whether the cache is current."""
        with self._lock:
            return dict(self._rvs)

    def drain_changed(self) -> set[Hashable]:
        """Index keys whose items changed since the last call (and forget them)."""
        with self._lock:
            out, self._changed = self._changed, set()
        return out

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)


def wait_filled(informers: Iterable[Informer[Any]], timeout: float, what: str) -> None:
    """Start ``informers`` and wait until each has listed once; a cache that cannot fill in
    ``timeout`` is a :class:`BackendError` (the caller retries; nothing is decided on an empty cache)."""
    end = time.monotonic() + timeout
    for inf in informers:
        if not inf.wait_synced(max(0.0, end - time.monotonic())):
            why = f": {inf.last_error}" if inf.last_error else ""
            raise BackendError(f"{what}: the {inf.what} cache is not filled yet{why}")


__all__ = ["Expired", "Informer", "object_key", "wait_filled"]
