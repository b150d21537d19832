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
    """A running Open WebUI with an admin API key, on 127.0.0.1; stopped at the end of the session. A test that fails
    has what Open WebUI logged meanwhile added to its report (the log goes with the session's temporary folder)."""
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
    request.config.stash[RUNNING] = instance
    try:
        yield instance
    finally:
        del request.config.stash[RUNNING]
        openwebui_local.stop(instance)


RUNNING = pytest.StashKey[Instance]()
LOG_START = pytest.StashKey[int]()  # where Open WebUI's log stood when the test began (0: not started yet)
LOG_LINES_SHOWN = 150


def _log_size(config: pytest.Config) -> int:
    instance = config.stash.get(RUNNING, None)
    try:
        return instance.log_path.stat().st_size if instance is not None else 0
    except OSError:
        return 0


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    item.stash[LOG_START] = _log_size(item.config)
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A failed test's report ends with the last lines Open WebUI logged while it ran."""
    report = yield
    instance = item.config.stash.get(RUNNING, None)
    if isinstance(report, pytest.TestReport) and report.failed and instance is not None:
        try:
            with instance.log_path.open("rb") as log:
                log.seek(item.stash.get(LOG_START, 0))
                lines = log.read().decode("utf-8", errors="replace").splitlines()[-LOG_LINES_SHOWN:]
        except OSError as error:
            lines = [f"(its log could not be read: {error})"]
        text = "\n".join(lines).replace(instance.api_key, "<api key>")
        report.sections.append((f"Open WebUI {instance.version}'s log while the test ran ({instance.log_path})", text))
    return report


@pytest.fixture(scope="session")
def live_user(live_openwebui: Instance) -> User:
    """A second Open WebUI user with role "user" (not admin) and its own API key (``url``, ``user_id``, ``token``,
    ``api_key``). Created on first use only, so tests that do not ask for it do not pay for it.
    ``openwebui_local.share_read`` shares an admin's base with it read-only."""
    started = time.monotonic()
    user = openwebui_local.add_user(live_openwebui, "Live Test User", f"user-{uuid.uuid4().hex[:8]}@example.com")
    print(f"\nsecond user {user.email} ({user.user_id}) with an API key in {time.monotonic() - started:.1f} s")
    return user
