"""The smallest useful server on the same SDK, for reference: one tool, stdio. ``python bench/minimal_server.py``.

Its cold start shows what the SDK itself costs between "imported" and "answered initialize and tools/list".
"""

from mcp.server.mcpserver import MCPServer

server = MCPServer("minimal")


@server.tool()
async def echo(text: str) -> str:
    """Return the text."""
    return text


if __name__ == "__main__":
    server.run("stdio")
