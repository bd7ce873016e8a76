"""Integrations with tools outside gpufleet that the server talks to: MLflow tracking
(``mlflow_sync``: the tags and metrics gpufleet writes to a job's run; ``mlflow_uris``: the tracking
URIs it may send the server's credentials to).
"""
