"""Tests of the MCP surface, one module per module of src/openwebui_rag_mcp/server/."""
