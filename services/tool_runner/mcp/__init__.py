"""MCP servers as tools: ``.mcp.json``, the connections of this replica, names, specs and results."""
