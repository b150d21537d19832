"""Reading a local file under the allowed directories (localfiles.py): the file is opened once, no link is followed
at any component, a FIFO never blocks, what was opened is checked (a regular file, under the root, the size it
claims), and the read runs off the event loop. Racer threads swap links and FIFOs in while files are read."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import anyio
import pytest

from openwebui_rag_mcp import localfiles
from openwebui_rag_mcp.config import Settings
from openwebui_rag_mcp.errors import ToolFailure
from openwebui_rag_mcp.localfiles import FileSource, Refusal, read_source, read_under
from tests.conftest import make_settings

pytestmark = pytest.mark.anyio

PUBLIC = b"# public notes\n"
SECRET = b"the secret: 4711\n"
HANG_S = 10.0  # a hang guard, not a speed check: far more than any read here needs
RACE_READS = 3000  # the unsafe reader lost this race about once per 1,000 reads; about a second here


@pytest.fixture
def allowed(tmp_path: Path) -> Path:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "report.md").write_bytes(PUBLIC)
    return folder


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    """A file outside the allowed directory, named like the one inside it."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "report.md").write_bytes(SECRET)
    return outside / "report.md"


def settings_for(allowed: Path, **env: str) -> Settings:
    return make_settings(OPENWEBUI_UPLOAD_DIRS=str(allowed), **env)


async def read(settings: Settings, path: Path | str) -> bytes:
    _, content = await read_source(settings, FileSource(path=str(path), content_base64=None, filename=None))
    return content


async def refusal(settings: Settings, path: Path | str) -> ToolFailure:
    with pytest.raises(ToolFailure) as caught:
        await read(settings, path)
    failure = caught.value
    assert (failure.stage, failure.outcome, failure.request_sent) == ("upload", "not_applied", False)
    assert SECRET.decode() not in failure.message
    return failure


def refused_under(root: Path | str, relative: str, limit: int = 1024) -> Refusal:
    with pytest.raises(Refusal) as caught:
        read_under(root, relative, limit)
    return caught.value


# -- links ----------------------------------------------------------------------------------------------------------


async def test_a_link_in_the_folder_to_a_file_outside_is_refused(allowed: Path, secret: Path) -> None:
    (allowed / "innocent.md").symlink_to(secret)
    assert (await refusal(settings_for(allowed), allowed / "innocent.md")).code == "forbidden"


async def test_a_link_in_a_parent_folder_to_a_folder_outside_is_refused(allowed: Path, secret: Path) -> None:
    (allowed / "sub").symlink_to(secret.parent, target_is_directory=True)
    assert (await refusal(settings_for(allowed), allowed / "sub" / "report.md")).code == "forbidden"


def test_read_under_follows_no_link_even_one_that_stays_inside(allowed: Path) -> None:
    (allowed / "folder").mkdir()
    (allowed / "folder" / "note.md").write_bytes(PUBLIC)
    (allowed / "alias.md").symlink_to(allowed / "report.md")
    (allowed / "alias").symlink_to(allowed / "folder", target_is_directory=True)
    assert read_under(allowed, "folder/note.md", 1024) == PUBLIC
    assert refused_under(allowed, "alias.md").code == "forbidden"
    assert refused_under(allowed, "alias/note.md").code == "forbidden"


def test_read_under_wants_the_real_path_of_its_root(allowed: Path, tmp_path: Path) -> None:
    (tmp_path / "alias").symlink_to(allowed, target_is_directory=True)
    assert read_under(allowed, "report.md", 1024) == PUBLIC
    assert refused_under(tmp_path / "alias", "report.md").code == "forbidden"


def test_a_hard_link_is_read_as_the_file_it_is(allowed: Path, tmp_path: Path) -> None:
    """Documented choice: a hard link cannot be swapped like a symlink; it is the file itself."""
    (tmp_path / "mine.md").write_bytes(PUBLIC)
    os.link(tmp_path / "mine.md", allowed / "linked.md")
    assert read_under(allowed, "linked.md", 1024) == PUBLIC


@pytest.mark.parametrize("relative", ["../outside/report.md", "folder/../../outside/report.md", "/etc/passwd", ""])
def test_read_under_takes_only_a_plain_relative_path(allowed: Path, secret: Path, relative: str) -> None:
    (allowed / "folder").mkdir()
    assert refused_under(allowed, relative).code == "invalid_argument"


def test_read_under_refuses_what_is_not_a_small_regular_file(allowed: Path) -> None:
    (allowed / "folder").mkdir()
    os.mkfifo(allowed / "pipe")
    (allowed / "empty.md").write_bytes(b"")
    (allowed / "big.md").write_bytes(b"x" * 2048)
    assert refused_under(allowed, "folder").code == "invalid_argument"
    assert "not a regular file" in refused_under(allowed, "pipe").reason
    assert refused_under(allowed, "missing.md").code == "not_found"
    assert "empty" in refused_under(allowed, "empty.md").reason
    assert refused_under(allowed, "big.md").code == "too_large"


def test_a_pseudo_file_whose_size_is_not_its_content_is_refused() -> None:
    """/proc/self/environ (the API key included) says it holds 0 bytes, then yields the environment."""
    assert os.path.exists("/proc/self/environ")
    refused = refused_under(f"/proc/{os.getpid()}", "environ", limit=1 << 20)  # /proc/self is a link
    assert refused.code == "invalid_argument"
    assert "size" in refused.reason


# -- races ----------------------------------------------------------------------------------------------------------


@contextmanager
def racing(*moves: Callable[[], None]) -> Iterator[None]:
    """A thread that makes `moves` one after the other, round and round, while the body runs."""
    stop = threading.Event()

    def run() -> None:
        while not stop.is_set():
            for move in moves:
                move()

    racer = threading.Thread(target=run, daemon=True)
    racer.start()
    try:
        yield
    finally:
        stop.set()
        racer.join()


async def read_while_racing(settings: Settings, path: Path) -> list[bytes | str]:
    """What each of RACE_READS reads gave: the bytes, or the code of the refusal."""
    results: list[bytes | str] = []
    for _ in range(RACE_READS):
        try:
            results.append(await read(settings, path))
        except ToolFailure as failure:
            results.append(failure.code)
    return results


async def test_a_link_swapped_in_for_the_file_never_yields_the_secret(allowed: Path, secret: Path) -> None:
    target, staged = allowed / "report.md", allowed / ".staged"

    def put_file() -> None:
        staged.write_bytes(PUBLIC)
        os.replace(staged, target)

    def put_link() -> None:
        staged.symlink_to(secret)
        os.replace(staged, target)

    with racing(put_link, put_file):
        results = await read_while_racing(settings_for(allowed), target)
    assert SECRET not in results
    assert set(results) <= {PUBLIC, "forbidden", "not_found", "invalid_argument"}


async def test_a_link_swapped_in_for_a_parent_folder_never_yields_the_secret(allowed: Path, secret: Path) -> None:
    folder, staged = allowed / "sub", allowed / ".staged"
    folder.mkdir()
    (folder / "report.md").write_bytes(PUBLIC)

    def put_link() -> None:
        os.rename(folder, staged)
        folder.symlink_to(secret.parent, target_is_directory=True)

    def put_folder() -> None:
        folder.unlink()
        os.rename(staged, folder)

    with racing(put_link, put_folder):
        results = await read_while_racing(settings_for(allowed), folder / "report.md")
    assert SECRET not in results
    assert set(results) <= {PUBLIC, "forbidden", "not_found", "invalid_argument"}


@contextmanager
def fifo_hang_guard(fifo: Path) -> Iterator[list[bool]]:
    """If the body still runs after HANG_S, something is stuck opening `fifo` (a reader waits for a writer there):
    open it for writing now and then, which lets such a reader go on, and say so in the list yielded."""
    done, released = threading.Event(), [False]

    def guard() -> None:
        if done.wait(HANG_S):
            return
        released[0] = True
        while not done.wait(0.05):
            with contextlib.suppress(OSError):  # no reader waiting at this moment
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))

    watcher = threading.Thread(target=guard, daemon=True)
    watcher.start()
    try:
        yield released
    finally:
        done.set()
        watcher.join()


async def test_a_fifo_in_the_folder_is_refused_without_blocking(allowed: Path) -> None:
    os.mkfifo(allowed / "pipe")
    with fifo_hang_guard(allowed / "pipe") as released:
        failure = await refusal(settings_for(allowed), allowed / "pipe")
    assert (failure.code, "not a regular file" in failure.message, released) == ("invalid_argument", True, [False])


async def test_a_fifo_swapped_in_for_the_file_never_blocks(allowed: Path, tmp_path: Path) -> None:
    target, staged, fifo = allowed / "report.md", allowed / ".staged", tmp_path / "fifo"
    os.mkfifo(fifo)  # one FIFO, linked in and out, so the hang guard can always reach it

    def put_file() -> None:
        staged.write_bytes(PUBLIC)
        os.replace(staged, target)

    def put_fifo() -> None:
        os.link(fifo, staged)
        os.replace(staged, target)

    with fifo_hang_guard(fifo) as released, racing(put_fifo, put_file):
        results = await read_while_racing(settings_for(allowed), target)
    assert released == [False], "a read blocked on the FIFO until the guard wrote to it"
    assert set(results) <= {PUBLIC, "not_found", "invalid_argument"}


# -- off the event loop ---------------------------------------------------------------------------------------------


async def test_the_file_is_read_off_the_event_loop(allowed: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """While the file is read, other tasks run: a read that waits for one of them finishes."""
    reading, other_task_ran = threading.Event(), threading.Event()
    read_for_real = localfiles.read_under

    def read_waiting_for_the_loop(root: Path | str, relative: str, limit: int) -> bytes:
        reading.set()
        if not other_task_ran.wait(HANG_S):
            raise AssertionError("no other task ran while the file was read: the read blocked the event loop")
        return read_for_real(root, relative, limit)

    monkeypatch.setattr(localfiles, "read_under", read_waiting_for_the_loop)

    async def other_task() -> None:
        await anyio.to_thread.run_sync(reading.wait, HANG_S)
        other_task_ran.set()  # on the event loop

    with anyio.fail_after(HANG_S * 2):
        async with anyio.create_task_group() as group:
            group.start_soon(other_task)
            content = await read(settings_for(allowed), allowed / "report.md")
    assert content == PUBLIC
