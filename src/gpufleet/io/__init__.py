"""File adapters for the engines: read the files (and packaged data) that the engines' parsers
take as text, and write what they produce. The engines (``model``, ``scheduling``, ``cost``,
``sim``, ``loop``) do no I/O themselves (``tests/project/test_layering.py``).

- :mod:`gpufleet.io.traces`: trace files (JSONL, Philly, openb, the packaged openb lists).
- :mod:`gpufleet.io.catalog`: the price catalog (the packaged one, a path or a stream).
- :mod:`gpufleet.io.results`: simulation results as CSV and JSON files.
- :mod:`gpufleet.io.fragmentation`: the fragmentation experiment's clusters and published curves.
- :mod:`gpufleet.io.ports`: a listening address checked before a server starts.
- :mod:`gpufleet.io.http_timeout`: uvicorn's HTTP protocol with a deadline for a request's head
  (slow-loris), shared by the API server, the admission webhook and the MCP server.
"""
