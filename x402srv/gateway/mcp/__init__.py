"""The MCP gateway (``[[mcp]]``): an MCP server's tools sold without touching its code.

``messages`` (JSON-RPC in and the answers x402srv writes), ``decide`` (what one
``tools/call`` gets), ``proxy`` (the upstream and its streamed answer), ``install``
(the Sanic routes). docs/mcp.md is the seller's and buyer's page.
"""
