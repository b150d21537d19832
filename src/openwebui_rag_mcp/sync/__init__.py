"""`openwebui-rag-mcp sync DIR --knowledge-id ID`: keep a knowledge base in step with a folder. `command` is the
entry; `execute.Run` walks (`scan`, `base`), decides (`plan`) and does (`writer`, `earlier`). What
a run does: docs/deployment.md, "Keeping a base in step with a folder"."""
