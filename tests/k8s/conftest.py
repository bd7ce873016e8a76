"""The Kubernetes substrate fixtures for the tests in ``tests/k8s/`` (defined in
:mod:`tests.support.k8s.fixtures`):

- ``k8s_cluster`` — a running API server + kubelet on 127.0.0.1 (a free port), stopped afterwards;
- ``k8s_cluster_factory`` — ``make(kubelet=KubeletConfig(...), watch_history=..., ...)``;
- ``k8s_kubelet`` — the cluster's kubelet stand-in;
- ``k8s_api_client`` — a ``kubernetes.client.ApiClient`` pointing at the cluster;
- ``make_world`` — a KubernetesBackend on a two-node cluster with the Job controller
  (:mod:`tests.support.k8s.backendworld`).

Test modules outside this directory use ``pytest_plugins = ["tests.support.k8s.fixtures"]`` instead.
"""

from tests.support.k8s.backendworld import make_world
from tests.support.k8s.fixtures import k8s_api_client, k8s_cluster, k8s_cluster_factory, k8s_kubelet

__all__ = ["k8s_api_client", "k8s_cluster", "k8s_cluster_factory", "k8s_kubelet", "make_world"]
