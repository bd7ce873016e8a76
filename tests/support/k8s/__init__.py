"""A Kubernetes API substrate for tests: no kube-apiserver, no cluster, real HTTP on 127.0.0.1.

- :mod:`tests.support.k8s.apiserver` — :class:`KubeApiServer`, kmock's ``KubernetesEmulator`` with the API
  semantics a controller relies on (resourceVersions, conflicts, selectors, subresources, binding,
  eviction, graceful deletion, resumable watches, leases).
- :mod:`tests.support.k8s.kubelet` — :class:`Kubelet`, a KWOK-style stand-in that runs bound pods through
  Pending → Running → Succeeded/Failed and handles SIGTERM on graceful deletion; GPU node helpers.
- :mod:`tests.support.k8s.cluster` — :class:`Cluster`, both on a background event loop, plus a configured
  ``kubernetes.client.ApiClient`` and polling helpers.
- :mod:`tests.support.k8s.fixtures` — the pytest fixtures (``k8s_cluster``, ``k8s_kubelet``,
  ``k8s_api_client``, ``k8s_cluster_factory``).

Tests of the substrate itself: ``tests/k8s/test_k8s_substrate.py``. A backend test looks like::

    pytest_plugins = ["tests.support.k8s.fixtures"]  # not needed for modules under tests/k8s/

    def test_backend_places_a_job(k8s_cluster, k8s_api_client, k8s_kubelet):
        k8s_cluster.add_gpu_node("gpu-a", product="NVIDIA-H100-80GB-HBM3", capacity_type="spot")
        backend = KubernetesBackend(api_client=k8s_api_client)    # the code under test
        backend.submit(...)                                       # creates a pod, binds it
        core = kubernetes.client.CoreV1Api(k8s_api_client)
        k8s_cluster.wait_for(lambda: core.read_namespaced_pod("job-1", "default").status.phase == "Running")
        taint_disrupted(core, "gpu-a")                            # spot interruption notice
        k8s_cluster.wait_for(lambda: k8s_kubelet.sigterms("default", "job-1"))  # it evicted the pod
"""
