"""The Kubernetes backend: gpufleet's scheduler driving a cluster through its API.

The translation modules (``nodes``, ``pods``, ``objects``, ``dcgm``) are pure: plain dicts as the
API returns them (``ApiClient.sanitize_for_serialization`` / JSON) in, gpufleet's model out, and
back again; they do no I/O and need no Kubernetes client.
"""
