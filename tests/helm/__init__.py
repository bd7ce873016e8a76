"""Helpers for the Helm chart's tests (``tests/test_helm_chart.py``): running the real ``helm`` binary
(:mod:`tests.helm.chart`) and what the Kubernetes backend calls, as RBAC (:mod:`tests.helm.rbac`)."""
