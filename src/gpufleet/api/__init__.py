"""The REST API (``/v1``): FastAPI app, authentication, problem documents and metrics.

Build it with :func:`gpufleet.api.app.create_app` and an :class:`gpufleet.api.context.ApiContext`.
"""
