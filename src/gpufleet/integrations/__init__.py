"""Integrations with tools outside gpufleet that the server talks to: MLflow tracking
(``mlflow_sync``: the tags and metrics gpufleet writes to a job's run, and the URIs it may reach).
"""
