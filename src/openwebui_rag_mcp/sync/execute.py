"""One run, in three steps: walk (the folder and what the base holds), decide (`plan.plan`), do (say the plan, or
carry it out with `Writer`). It decides nothing itself."""

from __future__ import annotations

import asyncio
import functools
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import anyio

from openwebui_rag_mcp.app import App
from openwebui_rag_mcp.errors import ToolFailure
from openwebui_rag_mcp.sync.base import glance, read_base
from openwebui_rag_mcp.sync.earlier import Earlier
from openwebui_rag_mcp.sync.folders import with_parents
from openwebui_rag_mcp.sync.plan import plan
from openwebui_rag_mcp.sync.scan import scan
from openwebui_rag_mcp.sync.types import (
    CONCURRENCY,
    OK,
    REFUSED,
    SOME_FAILED,
    UNUSABLE,
    LocalFile,
    Plan,
    Problem,
    RemoteFile,
    Say,
    Step,
)
from openwebui_rag_mcp.sync.writer import Writer

# An upload that links itself (0.9.6+) gives its turn to the next once Open WebUI has answered it, and waits for its
# indexing beside up to this many times `concurrency` files in all: Open WebUI always has the next file to process
# (issue 18: it is the busy process). An upload Open WebUI then loses in a restart is one a later run takes for lost
# once past its writer's deadline (`Earlier.await_uploads`).
QUEUED_PER_UPLOAD = 4


@dataclass
class Run:
    """One run of the command: the folder, the base, and how to write to it."""

    app: App
    folder: Path
    knowledge_id: str
    source: str | None
    say: Say
    tty: bool
    concurrency: int = CONCURRENCY
    writer: Writer = field(init=False)
    earlier: Earlier = field(init=False)

    def __post_init__(self) -> None:
        self.writer = Writer(self.app, self.knowledge_id, self.source, self.say)
        self.earlier = Earlier(self.app, self.knowledge_id, self.say)

    async def sync(self, *, dry_run: bool, delete: bool, max_delete: int | None) -> int:
        say, app, knowledge_id = self.say, self.app, self.knowledge_id
        lost = await (self.earlier.preview() if dry_run else self.earlier.await_uploads())
        max_bytes = app.settings.upload_max_bytes
        try:
            # The folder is read (in a thread) while Open WebUI answers: for a base on a release with folders as its
            # mirror, read again in the rare case that the base goes on with names instead.
            release = await app.client.release()
            scanning = asyncio.ensure_future(asyncio.to_thread(scan, self.folder, max_bytes, mirrored=release.folders))
            at_a_glance = release.folders and not release.folder_paths and not lost
            base = await glance(app, knowledge_id, scanning) if at_a_glance else None
            if base is None:
                base = await read_base(app, knowledge_id, self.source, lost)
            local, skipped = await scanning
            if base.mirrored != release.folders:
                local, skipped = await asyncio.to_thread(scan, self.folder, max_bytes, mirrored=base.mirrored)
            todo = plan(local, base.ours, skipped, others=base.others, delete=delete, max_delete=max_delete)
        except ToolFailure as failure:
            say(f"cannot read knowledge base {knowledge_id}: {failure.message}")
            return UNUSABLE
        self.writer.mirrored = base.mirrored
        if base.kept_names:
            say(
                f"knowledge base {knowledge_id} holds files this folder's earlier runs named after their path and "
                "content; it goes on naming them that way"
            )
        to_create: list[str] = []
        if base.mirrored and any(file.folder for file in todo.uploads):
            try:
                to_create = await self.writer.folders.read(app, knowledge_id, local)
            except ToolFailure as failure:
                if not dry_run:
                    say(f"cannot read the folders of knowledge base {knowledge_id}: {failure.message}")
                    return UNUSABLE
                say(f"folders to make: unknown ({failure.message})")
        say(
            f"{self.folder}: {len(local)} file(s); knowledge base {knowledge_id}: {len(todo.add)} to add, "
            f"{len(todo.replace)} to replace, {len(todo.renamed)} renamed, {len(todo.unchanged)} unchanged, "
            f"{len(todo.gone)} gone from the folder" + ("" if delete else " (kept; --delete removes them)")
        )
        others = [
            f"{count} document(s) {what}"
            for count, what in (
                (base.from_other_folders, "synced from other folders"),
                (base.from_earlier_versions, "from an earlier version of this command (or named like its files)"),
            )
            if count
        ]
        if others:
            say(
                f"knowledge base {knowledge_id} also holds {' and '.join(others)}: this folder's runs never replace, "
                "rename or remove them"
            )
        if base.stuck:
            say(
                f"{len(base.stuck)} document(s) of this folder that Open WebUI listed but never indexed (an upload a "
                "restart cut short) are removed first, and sent again where their file is still in the folder"
            )
        failed = [f"{reason.shown}: {reason.why}" for reason in todo.skipped if reason.fails]
        for reason in todo.skipped:
            say(f"skipped   {reason.shown}: {reason.why}")
        if todo.refusal is not None:
            say(f"refused: {todo.refusal}; nothing was changed")
            return REFUSED
        # Uploads a killed run left that Open WebUI never finished and never linked (0.11+ link once indexed): files
        # in no base, which recovery would otherwise leave for an hour.
        unlisted = sorted(lost - base.listed)
        if dry_run:
            if unlisted:
                self.say(
                    f"would remove {len(unlisted)} file(s) of uploads a killed run left that Open WebUI never finished"
                )
            self._say_plan(todo, base.stuck + todo.removals, to_create)
            return SOME_FAILED if failed else OK
        await self.earlier.delete_lost(unlisted)
        return await self._apply(todo, failed, first=base.stuck)

    def _say_plan(self, todo: Plan, removals: list[RemoteFile], to_create: list[str]) -> None:
        needed = {path for file in todo.uploads for path in with_parents(file.folder)}
        for path in to_create:
            if path in needed:
                self.say(f"would create   folder {path}")
        for file in todo.add:
            self.say(f"would add      {file.relative}")
        for file, _ in todo.replace:
            self.say(f"would replace  {file.relative}")
        for file, _ in todo.renamed:
            self.say(f"would rename   {file.relative}")
        for entry in removals:
            self.say(f"would remove   {entry.key} ({entry.file_id})")
        self.say("dry run: nothing was changed")

    async def _apply(self, todo: Plan, failed: list[str], first: list[RemoteFile]) -> int:
        """Renames, additions and replacements, their uploads `concurrency` at a time (an upload that links itself
        then waits for Open WebUI beside at most `QUEUED_PER_UPLOAD` times as many, each holding its file's bytes;
        attaches take turns under the base's lock), before 0.6.42 the new files' attaches read back, then the removals:
        a document goes only once every upload that could replace it has ended. One line per file as each ends.
        `first`: documents never indexed into the base, removed before anything is uploaded (Open WebUI removes a
        document's vectors by its text's hash too, so removed after a new copy, one would take the copy's with it)."""
        writer = self.writer
        # A file whose stuck document could not be removed is not sent: its new copy's vectors would go with that
        # document's removal later.
        blocked: dict[str, Problem] = {}

        async def remove_first(entry: RemoteFile) -> Problem | None:
            if problem := await writer.remove(entry):
                blocked[entry.key] = Problem(problem.code, f"its unfinished earlier upload was not removed: {problem}")
            return problem

        def unless_blocked(file: LocalFile, step: Step) -> Step:
            return functools.partial(_refused, blocked[file.identity]) if file.identity in blocked else step

        steps: list[tuple[str, LocalFile, Step]] = [
            ("rename", file, functools.partial(writer.rename, file, moved)) for file, moved in todo.renamed
        ]
        steps += [("add", file, functools.partial(writer.replace, file, [])) for file in todo.add]
        steps += [("replace", file, functools.partial(writer.replace, file, old)) for file, old in todo.replace]
        actions = {file.relative: action for action, file, _ in steps}
        total = len(first) + len(steps) + len(todo.removals)
        done = 0
        succeeded: dict[str, int] = {"rename": 0, "add": 0, "replace": 0, "remove": 0}  # what happened, not the plan
        writer.sending = asyncio.Semaphore(self.concurrency)
        # Before 0.9.6 a write holds its turn to the end: no more files are read ahead than can be sent.
        linking = (await self.app.client.release()).links_on_upload
        queued = asyncio.Semaphore(self.concurrency * (QUEUED_PER_UPLOAD if linking else 1))
        removing = asyncio.Semaphore(self.concurrency)
        ended_well: set[str] = set()

        async def run(
            action: str, name: str, step: Callable[[], Awaitable[Problem | None]], turns: asyncio.Semaphore = queued
        ) -> None:
            nonlocal done
            async with turns:
                problem = await step()
            done += 1
            _report(self.say, self.tty, done, total, f"{action:<8} {name}", problem)
            if problem:
                failed.append(f"{name}: {problem}")
            else:
                succeeded[action] += 1
                ended_well.add(name)

        async with anyio.create_task_group() as group:
            for entry in first:
                group.start_soon(run, "remove", entry.key, functools.partial(remove_first, entry), removing)
        async with anyio.create_task_group() as group:
            for action, file, step in steps:
                group.start_soon(run, action, file.relative, unless_blocked(file, step))
        for name in await writer.await_late():  # named failed when it was given up on; Open WebUI linked it since
            ended = next((entry for entry in failed if entry.startswith(f"{name}: ")), None)
            done_as = actions.get(name)
            if ended is not None and done_as is not None:
                failed.remove(ended)
                succeeded[done_as] += 1
                ended_well.add(name)
                self.say(f"{done_as:<8} {name}: ok (Open WebUI finished it after OPENWEBUI_PROCESS_TIMEOUT)")
        for name, problem in await writer.confirm_attaches():
            if name in ended_well:
                succeeded["add"] -= 1
                failed.append(f"{name}: {problem}")
        async with anyio.create_task_group() as group:
            for entry in todo.removals:
                group.start_soon(run, "remove", entry.key, functools.partial(writer.remove, entry), removing)
        self.say(
            f"done: {succeeded['add']} added, {succeeded['replace']} replaced, {succeeded['rename']} renamed, "
            f"{succeeded['remove']} removed, {len(todo.unchanged)} unchanged, {len(failed)} failed"
        )
        return SOME_FAILED if failed else OK


def _report(say: Say, tty: bool, done: int, total: int, what: str, problem: Problem | None) -> None:
    if tty:
        width = 24
        filled = width * done // max(total, 1)
        sys.stderr.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total}")
        sys.stderr.flush()
        if done == total:
            sys.stderr.write("\n")
    say(f"{what}: {f'FAILED - {problem}' if problem else 'ok'}")


async def _refused(problem: Problem) -> Problem:
    return problem
