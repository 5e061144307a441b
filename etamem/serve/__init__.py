"""Serving one memory to many clients: the HTTP API (`app`), what keeps one client from
stalling the others (`guard`), the MCP tools (`mcp_server`) and the `/metrics` counters."""
