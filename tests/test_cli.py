"""The command line: how `openwebui-rag-mcp` reads its arguments, before any request is made."""

from __future__ import annotations

from pathlib import Path

import pytest

from openwebui_rag_mcp.__main__ import EXIT_CONFIG, main


@pytest.mark.parametrize(
    "arguments",
    [
        ["sync", "{folder}", "--knowledge-id", "kb-1"],
        ["sync", "--knowledge-id", "kb-1", "{folder}"],  # options before the folder, as people write them too
        ["--knowledge-id", "kb-1", "sync", "--dry-run", "{folder}"],
    ],
)
def test_sync_takes_its_folder_wherever_the_options_stand(
    arguments: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("OPENWEBUI_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("OPENWEBUI_API_KEY", "sk-test")
    missing = tmp_path / "no-such-folder"
    with pytest.raises(SystemExit) as exited:
        main([str(missing) if argument == "{folder}" else argument for argument in arguments])
    assert exited.value.code == EXIT_CONFIG
    # The folder reached the check of the folder itself: the arguments were understood.
    assert capsys.readouterr().err.strip().endswith(f"{missing} is not a folder")


def test_sync_without_a_folder_says_what_it_needs(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("OPENWEBUI_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("OPENWEBUI_API_KEY", "sk-test")
    with pytest.raises(SystemExit) as exited:
        main(["sync", "--knowledge-id", "kb-1"])
    assert exited.value.code == 2
    assert "sync needs a folder and --knowledge-id" in capsys.readouterr().err
