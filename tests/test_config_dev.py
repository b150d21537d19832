"""`./dev inspect` never shows the API key of .env.local: not in its output, not on the Inspector's command line.

The script runs from a copy in a temporary folder (it works relative to its own folder) with stand-ins: a `npx`
that records its arguments and, like the Inspector CLI, starts the server command it is given with a minimal
environment plus its `-e NAME=VALUE` options; and a server that only records whether the key reached it.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FAKE_KEY = "sk-dev-inspect-fake-key-5f0c1d"

FAKE_NPX = r"""#!/usr/bin/env bash
printf '%s\n' "$*" >> "$(dirname "$0")/npx-argv.log"
while [ "$1" != "--cli" ]; do shift; done; shift
extra=()
while [ "$1" = "-e" ]; do extra+=("$2"); shift 2; done
server=()
while [ $# -gt 0 ] && [[ "$1" != --* ]]; do server+=("$1"); shift; done
env -i PATH="$PATH" HOME="$HOME" "${extra[@]}" "${server[@]}" </dev/null
echo '"name": "knowledge_list"'
"""

FAKE_SERVER = f"""#!/usr/bin/env bash
if [ "${{OPENWEBUI_API_KEY:-}}" = "{FAKE_KEY}" ]; then verdict=key; else verdict=no-key; fi
echo "$verdict url=${{OPENWEBUI_URL:-}} args=$*" >> "$(dirname "$0")/../../server.log"
"""


def executable(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def test_dev_inspect_never_prints_the_api_key(tmp_path: Path) -> None:
    shutil.copy2(ROOT / "dev", tmp_path / "dev")
    executable(tmp_path / ".venv" / "bin" / "python", "#!/bin/sh\nexit 0\n")
    executable(tmp_path / ".venv" / "bin" / "openwebui-rag-mcp", FAKE_SERVER)
    executable(tmp_path / "bin" / "npx", FAKE_NPX)
    (tmp_path / ".env.local").write_text(
        f"export OPENWEBUI_URL=http://127.0.0.1:9\nexport OPENWEBUI_API_KEY={FAKE_KEY}\n", encoding="utf-8"
    )
    env = {**os.environ, "PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}"}
    env.pop("OPENWEBUI_API_KEY", None)

    result = subprocess.run(
        [str(tmp_path / "dev"), "inspect", "ваш запрос"],
        cwd=tmp_path,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert result.returncode == 0, result.stderr
    assert FAKE_KEY not in result.stdout + result.stderr
    argv = (tmp_path / "bin" / "npx-argv.log").read_text(encoding="utf-8").splitlines()
    assert len(argv) == 3, argv  # tools/list, knowledge_health, knowledge_search
    assert all(FAKE_KEY not in line for line in argv), "the key is on the Inspector's command line"
    assert "query=ваш запрос" in argv[2]
    # The server still gets the key and the URL, from .env.local.
    served = (tmp_path / "server.log").read_text(encoding="utf-8").splitlines()
    assert served == ["key url=http://127.0.0.1:9 args="] * 3
