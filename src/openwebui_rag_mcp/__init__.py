"""openwebui-rag-mcp: an MCP server over Open WebUI's knowledge bases."""

__version__ = "0.1.0"
