"""Telemetry adapters: where measured GPU usage comes from (NVML on a local server)."""
