"""The live harness's start of Open WebUI (devtools/openwebui_local.py): a port found free and taken before Open WebUI
could bind it (two releases start side by side in `devtools.check`) is chosen again; any other failure to start is
reported at once, with the log."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from devtools import openwebui_local as owui

TAKEN = "ERROR:    [Errno 98] error while attempting to bind on address ('127.0.0.1', {port}): address already in use\n"


class FakeOpenWebUI:
    """Stands in for the processes: the first `fail` spawns die with `message` in the log, the rest keep running."""

    def __init__(self, fail: int, message: str, foreign: bool = False) -> None:
        self.fail, self.message = fail, message
        self.foreign = foreign  # while a failing one still starts, another release answers on its port
        self.ports: list[int] = []
        self.procs: list[subprocess.Popen[bytes]] = []

    def spawn(
        self, executable: Path, port: int, workdir: Path, env: dict[str, str], log_path: Path, *, append: bool = False
    ) -> subprocess.Popen[bytes]:
        self.ports.append(port)
        dies = len(self.ports) <= self.fail
        log_path.write_text(self.message.format(port=port) if dies else "started\n", encoding="utf-8")
        # a session of its own, like the real one: stop() and the harness's clean-up signal its process group
        seconds = (0.5 if self.foreign else 0) if dies else 60
        proc = subprocess.Popen([sys.executable, "-c", f"import time; time.sleep({seconds})"], start_new_session=True)
        if dies and not self.foreign:
            proc.wait()
        self.procs.append(proc)
        return proc

    def ready(self, url: str, proc: subprocess.Popen[bytes], log_path: Path, timeout: float) -> str:
        if self.foreign and len(self.ports) <= self.fail:
            return "0.1.2"
        if proc.poll() is not None:
            raise RuntimeError(f"Open WebUI exited while starting; last log lines:\n{owui.tail(log_path)}")
        return "9.9.9"


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[FakeOpenWebUI]:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "open-webui").touch()
    embedding = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    monkeypatch.setattr(owui, "venv_dir", lambda version: venv)
    monkeypatch.setattr(owui, "_start_embedding_server", lambda workdir: (embedding, 1, workdir / "embed.log"))
    monkeypatch.setattr(owui, "_create_admin", lambda url, email, password: "jwt")
    monkeypatch.setattr(owui, "_create_api_key", lambda url, token: "sk-test")
    fake = FakeOpenWebUI(0, "")
    yield fake
    for proc in [embedding, *fake.procs]:
        proc.kill()
        proc.wait()


def _use(monkeypatch: pytest.MonkeyPatch, fake: FakeOpenWebUI) -> None:
    monkeypatch.setattr(owui, "_spawn_openwebui", fake.spawn)
    monkeypatch.setattr(owui, "_wait_until_ready", fake.ready)


def test_a_port_taken_before_open_webui_binds_it_is_chosen_again(
    fake: FakeOpenWebUI, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake.fail, fake.message = 2, TAKEN
    ports = iter([40001, 40002, 40003])
    monkeypatch.setattr(owui, "free_port", lambda: next(ports))
    _use(monkeypatch, fake)

    instance = owui.start("9.9.9", tmp_path / "work")
    try:
        assert fake.ports == [40001, 40002, 40003]
        assert instance.url == "http://127.0.0.1:40003"
        assert instance.openwebui_proc is fake.procs[-1]
        assert instance.openwebui_proc.poll() is None
    finally:
        owui.stop(instance)


def test_a_port_taken_every_time_fails_after_the_last_attempt(
    fake: FakeOpenWebUI, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake.fail, fake.message = owui.PORT_ATTEMPTS, TAKEN
    _use(monkeypatch, fake)

    with pytest.raises(RuntimeError, match="address already in use"):
        owui.start("9.9.9", tmp_path / "work")
    assert len(fake.ports) == owui.PORT_ATTEMPTS


def test_other_failures_and_a_port_given_are_not_tried_again(
    fake: FakeOpenWebUI, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake.fail, fake.message = 1, "sqlite3.OperationalError: no such table: config\n"
    _use(monkeypatch, fake)
    with pytest.raises(RuntimeError, match="no such table"):
        owui.start("9.9.9", tmp_path / "one")
    assert len(fake.ports) == 1

    fake.ports, fake.fail, fake.message = [], 1, TAKEN
    with pytest.raises(RuntimeError, match="address already in use"):
        owui.start("9.9.9", tmp_path / "two", port=40010)
    assert fake.ports == [40010]


def test_a_port_another_release_answers_on_is_chosen_again(
    fake: FakeOpenWebUI, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake.fail, fake.message, fake.foreign = 1, TAKEN, True
    ports = iter([40021, 40022])
    monkeypatch.setattr(owui, "free_port", lambda: next(ports))
    _use(monkeypatch, fake)

    instance = owui.start("9.9.9", tmp_path / "work")
    try:
        assert fake.ports == [40021, 40022]
        assert instance.url == "http://127.0.0.1:40022"
    finally:
        owui.stop(instance)
