"""Support code for the tests (no tests here): servers, stores, accounts, builders, the Kubernetes
substrate (``k8s/``) and the Helm helpers (``helm/``)."""
