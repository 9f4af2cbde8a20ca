"""`hermes mcp`: the read-only MCP server over stdio, on the official SDK."""
