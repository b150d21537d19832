"""Developer tools for openwebui-rag-mcp: a fake embedding server and a local Open WebUI harness."""
