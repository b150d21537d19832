"""Live tests: a real Open WebUI (installed from PyPI into a cached venv) started once per session.

The release is ``devtools.openwebui_local.NEWEST`` unless ``OPENWEBUI_LIVE_VERSION`` names another one. A failure to
install or start Open WebUI fails the tests (it never skips them). Every test in this folder gets the ``live`` marker,
so ``pytest -m "not live"`` leaves them out.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from devtools import openwebui_local
from devtools.openwebui_local import Instance, User

LIVE_DIR = Path(__file__).resolve().parent


def live_version() -> str:
    return os.environ.get("OPENWEBUI_LIVE_VERSION") or openwebui_local.NEWEST


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test here is `live`; one marked `releases(...)` runs only against those releases. It is deselected on the
    others, never skipped: the test command fails on any skip."""
    kept: list[pytest.Item] = []
    deselected: list[pytest.Item] = []
    for item in items:
        if Path(item.path).resolve().is_relative_to(LIVE_DIR):
            item.add_marker(pytest.mark.live)
        marker = item.get_closest_marker("releases")
        (deselected if marker is not None and live_version() not in marker.args else kept).append(item)
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = kept


@pytest.fixture(scope="session")
def live_openwebui(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Instance]:
    """A running Open WebUI with an admin API key, on 127.0.0.1; stopped at the end of the session, which prints the
    end of its log when a test failed (the log goes with the session's temporary folder)."""
    version = live_version()
    started = time.monotonic()
    workdir = tmp_path_factory.mktemp(f"openwebui-{version}")
    problem = ""
    instance: Instance | None = None
    try:
        openwebui_local.install(version)
    except Exception as exc:
        problem = f"could not install Open WebUI {version}: {exc}"
    installed = time.monotonic()
    if not problem:
        try:
            instance = openwebui_local.start(version, workdir)
        except Exception as exc:
            problem = f"could not start Open WebUI {version} (log: {workdir / 'openwebui.log'}): {exc}"
    if instance is None:
        # Outside the except blocks, so the report shows the reason (with the log tail) and no chained traceback.
        pytest.fail(problem or f"could not start Open WebUI {version}", pytrace=False)
    print(
        f"\nOpen WebUI {version} at {instance.url}: install check {installed - started:.1f} s, "
        f"start {time.monotonic() - installed:.1f} s; log {instance.log_path}"
    )
    try:
        yield instance
    finally:
        openwebui_local.stop(instance)
        if request.session.testsfailed:
            _show_log_end(request.config, instance)


LOG_LINES_SHOWN = 150


def _show_log_end(config: pytest.Config, instance: Instance) -> None:
    """The last lines of Open WebUI's log, past pytest's capture (a teardown's output is otherwise not shown)."""
    try:
        lines = instance.log_path.read_text(encoding="utf-8", errors="replace").splitlines()[-LOG_LINES_SHOWN:]
    except OSError as error:
        lines = [f"(its log could not be read: {error})"]
    text = "\n".join(lines).replace(instance.api_key, "<api key>")
    capture = config.pluginmanager.getplugin("capturemanager")
    heading = f"\n---- the last {len(lines)} lines of Open WebUI {instance.version}'s log ({instance.log_path}) ----"
    if capture is None:
        print(heading, text, sep="\n")
        return
    with capture.global_and_fixture_disabled():
        print(heading, text, sep="\n")


@pytest.fixture(scope="session")
def live_user(live_openwebui: Instance) -> User:
    """A second Open WebUI user with role "user" (not admin) and its own API key (``url``, ``user_id``, ``token``,
    ``api_key``). Created on first use only, so tests that do not ask for it do not pay for it.
    ``openwebui_local.share_read`` shares an admin's base with it read-only."""
    started = time.monotonic()
    user = openwebui_local.add_user(live_openwebui, "Live Test User", f"user-{uuid.uuid4().hex[:8]}@example.com")
    print(f"\nsecond user {user.email} ({user.user_id}) with an API key in {time.monotonic() - started:.1f} s")
    return user
