"""The vocabulary of `sync`: files of the folder, documents of the base, what a run skips, the plan, a file's problem,
the exit codes."""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from openwebui_rag_mcp.errors import ToolFailure

OK, SOME_FAILED, REFUSED, UNUSABLE = 0, 1, 3, 5
# Uploads at once (each holds its file's bytes until its write ends), processed side by side; attaches take turns.
CONCURRENCY = 4
CONCURRENCY_MAX = 16

Say = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class LocalFile:
    relative: str  # with "/" separators
    key: str  # the name part that identifies the file in the base
    digest: str  # the whole SHA-256 of its bytes when mirrored, else its first 12 hex digits
    extension: str
    size: int
    mirrored: bool = False  # the base mirrors the folder (0.9.6+): the file keeps its own name and folder
    sha256: str = ""  # the whole SHA-256 of its bytes
    root: str = ""  # the real path of the synced folder, which every read starts from (localfiles.read_under)

    @property
    def path(self) -> Path:
        return Path(self.root, self.relative)

    @property
    def names(self) -> tuple[str, str]:
        """Both ways a document can name this file: its path (mirrored), its name made safe (named)."""
        return self.relative, self.key + self.extension

    @property
    def identity(self) -> str:
        """What names this file in the base: its path when mirrored, else its name made safe."""
        return self.relative if self.mirrored else self.key + self.extension

    @property
    def folder(self) -> str:
        return self.relative.rpartition("/")[0]


@dataclass(frozen=True, slots=True)
class RemoteFile:
    """A document of the base this command manages for this folder."""

    file_id: str
    key: str  # what names its file: the path when mirrored, else the name made safe
    digest: str


@dataclass(frozen=True, slots=True)
class Other:
    """A document of the base this command does not manage for this folder: never replaced, renamed or removed. A
    file at one of its names with its bytes counts as held by it."""

    label: str  # how the lines name it
    names: tuple[tuple[str, str], ...]  # (name, digest: the whole SHA-256 or its first 12 hex digits)


@dataclass(frozen=True, slots=True)
class Skipped:
    """A file (or a folder) this run does not sync. It is still in the folder, so its documents stay as they are:
    never counted as gone, never taken by the rename rule (`plan.covers`)."""

    relative: str  # "" for the synced folder itself
    why: str
    fails: bool = True  # makes the exit code 1: someone could act (too large, a link, unreadable, its name)
    folder: bool = False  # a folder that could not be read: everything under it is present

    @property
    def shown(self) -> str:
        """The path, printable even when the name is not UTF-8."""
        return os.fsencode(self.relative or ".").decode("utf-8", "replace")


@dataclass
class Plan:
    add: list[LocalFile] = field(default_factory=list)
    replace: list[tuple[LocalFile, list[RemoteFile]]] = field(default_factory=list)
    unchanged: list[LocalFile] = field(default_factory=list)
    renamed: list[tuple[LocalFile, RemoteFile]] = field(default_factory=list)  # same content under a new name
    stale: list[RemoteFile] = field(default_factory=list)  # older versions of files that are up to date
    gone: list[RemoteFile] = field(default_factory=list)  # files no longer in the folder
    skipped: list[Skipped] = field(default_factory=list)
    removals: list[RemoteFile] = field(default_factory=list)  # what the run removes: `stale`, and `gone` with --delete
    refusal: str | None = None  # why --delete may not remove `gone`: then the run changes nothing

    @property
    def uploads(self) -> list[LocalFile]:
        return self.add + [file for file, _ in self.replace] + [file for file, _ in self.renamed]


@dataclass(frozen=True, slots=True)
class Problem:
    """Why one file was not synced, as said on its line."""

    code: str
    message: str
    existing_file_id: str | None = None

    @classmethod
    def of(cls, failure: ToolFailure, context: str = "") -> Problem:
        return cls(failure.code, context + failure.message, failure.existing_file_id)

    def __str__(self) -> str:
        return self.message if self.code == "changed" else f"{self.code}: {self.message}"


Step = Callable[[], Awaitable["Problem | None"]]


def why(error: OSError) -> str:
    return error.strerror or type(error).__name__
