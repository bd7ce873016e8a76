"""gpufleet for AI agents: an MCP server (``gpufleet mcp``) whose tools answer cost questions and file
proposals through the REST API with the caller's own token.

- :mod:`gpufleet.agent.outputs`: the tools' typed inputs and answers (pydantic models: the MCP
  schemas and structured content);
- :mod:`gpufleet.agent.tools`: the tool functions over an SDK :class:`~gpufleet.sdk.Client`, with the
  arithmetic and the sentences of their answers (no MCP import: testable without it);
- :mod:`gpufleet.agent.server`: the MCP wiring (the ``mcp`` package, the optional extra ``agent``):
  which token each call uses, stdio and streamable HTTP.

Nothing here reads the store: every figure comes from the API, so the API's permission checks apply
to an agent exactly as to the person whose token it holds. There is no tool to approve or reject a
proposal: a person does that through the CLI or the API.
"""
