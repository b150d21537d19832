claude mcp add openwebui-rag \
  -e OPENWEBUI_URL=https://openwebui.example.com \
  -e OPENWEBUI_API_KEY=sk-... \
  -- /home/me/openwebui-rag-mcp/.venv/bin/openwebui-rag-mcp
claude mcp list      # openwebui-rag: /home/me/openwebui-rag-mcp/.venv/bin/openwebui-rag-mcp  - ✔ Connected
