INSPECT="npx @modelcontextprotocol/inspector@2.12.0 --cli -e OPENWEBUI_URL=$OPENWEBUI_URL -e OPENWEBUI_API_KEY=$OPENWEBUI_API_KEY /home/me/openwebui-rag-mcp/.venv/bin/openwebui-rag-mcp"
$INSPECT --method tools/list --strict
$INSPECT --method tools/call --tool-name knowledge_health
$INSPECT --method tools/call --tool-name knowledge_search --tool-arg query='on-call hand-over' --tool-arg top_k=3
$INSPECT --method tools/call --tool-name knowledge_search --tool-args-json '{"query": "релиз", "knowledge_ids": ["<knowledge_id>"]}'
$INSPECT --method tools/call --tool-name knowledge_get_file --tool-arg file_id=00000000-0000-0000-0000-000000000000   # exit code 5
