"""Fixtures for tests against the Kubernetes substrate (:mod:`tests.support.k8s`), as a pytest plugin.

Tests under ``tests/k8s/`` get them through ``tests/k8s/conftest.py``; a test module elsewhere
requires the plugin (pytest allows ``pytest_plugins`` in test modules)::

    pytest_plugins = ["tests.support.k8s.fixtures"]

- ``k8s_cluster`` — a started :class:`~tests.support.k8s.cluster.Cluster` (API server + kubelet with the
  default :class:`~tests.support.k8s.kubelet.KubeletConfig`), stopped after the test; the teardown fails
  the test if the kubelet crashed or a request hit a server-side bug (a 500).
- ``k8s_cluster_factory`` — ``make(kubelet=KubeletConfig(...), watch_history=..., ...)`` for
  clusters with other settings (every one made is stopped after the test).
- ``k8s_kubelet`` — the running :class:`~tests.support.k8s.kubelet.Kubelet` of ``k8s_cluster``.
- ``k8s_api_client`` — a ``kubernetes.client.ApiClient`` configured for ``k8s_cluster``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import kubernetes.client
import pytest

from tests.support.k8s.cluster import Cluster
from tests.support.k8s.kubelet import Kubelet

__all__ = ["k8s_api_client", "k8s_cluster", "k8s_cluster_factory", "k8s_kubelet"]


@pytest.fixture
def k8s_cluster_factory() -> Iterator[Callable[..., Cluster]]:
    clusters: list[Cluster] = []

    def make(**options: Any) -> Cluster:
        cluster = Cluster(**options).start()
        clusters.append(cluster)
        return cluster

    yield make
    failures: list[BaseException] = []
    for cluster in reversed(clusters):  # kmock's servers must exit in reverse order of entry
        try:
            cluster.stop()
        except BaseException as e:
            failures.append(e)
    if failures:
        raise failures[0]


@pytest.fixture
def k8s_cluster(k8s_cluster_factory: Callable[..., Cluster]) -> Cluster:
    return k8s_cluster_factory()


@pytest.fixture
def k8s_kubelet(k8s_cluster: Cluster) -> Kubelet:
    assert k8s_cluster.kubelet is not None
    return k8s_cluster.kubelet


@pytest.fixture
def k8s_api_client(k8s_cluster: Cluster) -> Iterator[kubernetes.client.ApiClient]:
    client = k8s_cluster.api_client()
    try:
        yield client
    finally:
        client.close()  # type: ignore[no-untyped-call]  # untyped in kubernetes 37
