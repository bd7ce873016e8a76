"""Helpers for the Helm chart's tests (``tests/k8s/test_helm_chart.py``): running the real ``helm`` binary
(:mod:`tests.support.helm.chart`) and what the Kubernetes backend calls, as RBAC (:mod:`tests.support.helm.rbac`)."""
