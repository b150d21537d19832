"""The performance benchmark: the MCP server next to direct HTTP calls to Open WebUI, in the same run.

Run it from the repository root: ``.venv/bin/python -m bench.run`` (see ``bench/run.py`` for the options).
"""
