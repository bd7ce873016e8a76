"""Tests of the Kubernetes package (src/gpufleet/k8s/) and the Helm chart, on the substrate in tests/support/k8s/."""
