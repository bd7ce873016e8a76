"""``python -m gpufleet``: the same as the ``gpufleet`` command."""

from gpufleet.cli.main import app

app()
