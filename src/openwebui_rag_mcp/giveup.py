"""When an upload is given up, and who removes it: one rule (`given_up_at`) for the journal, the link watch, the
write path and `sync`."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from openwebui_rag_mcp.config import Settings

# Two hosts' clocks may disagree by this much: added to a deadline a writer on another host set.
CLOCK_SLACK_SECONDS = 120.0
# The most the end of a write waits for the journal: an attach is sent up to this long after its record says so.
UPDATE_SECONDS = 5.0
# An upload the base lists while Open WebUI never marks it indexed (0.10 links first; with
# BYPASS_EMBEDDING_AND_RETRIEVAL it never marks) is looked at this long before it is kept as it is.
ABANDONED_SECONDS = 3600.0

GiveUp = Literal["answer", "processing", "lost", "attach"]


@dataclass(frozen=True, slots=True)
class Evidence:
    """What the settler of an upload still unfinished in Open WebUI has seen of it, on its own clock."""

    # When a connection to Open WebUI was last refused: it was not running then (a restart drops its tasks).
    unreachable_at: float | None = None
    # The first of the looks that found the file, and the base's pending list, as they are now.
    unchanged_since: float | None = None


@dataclass(frozen=True, slots=True)
class Waits:
    """How long a writer waits on Open WebUI for one upload."""

    answer: float  # OPENWEBUI_TIMEOUT: an upload's or an attach's answer
    processing: float  # OPENWEBUI_PROCESS_TIMEOUT: its processing, once the upload was answered

    @classmethod
    def of(cls, settings: Settings) -> Waits:
        return cls(settings.timeout, settings.process_timeout)


def given_up_at(
    what: GiveUp,
    since: float,
    waits: Waits,
    *,
    elsewhere: bool = False,
    listed: bool = False,
    seen: Evidence | None = None,
) -> float:
    """When an upload still unfinished in Open WebUI is given up, on the clock `since` was read from (`math.inf`:
    never, on what is known now).

    The rule: the writer waits, then leaves the upload to whoever settles the journal; that settler removes it only on
    evidence that Open WebUI lost it, never because it is slow.

    - "answer": the writer gives up on the answer to its upload or attach request OPENWEBUI_TIMEOUT after it was sent;
      an attach whose answer never came is then watched as long again (`attach.outlived_attach`) before its file goes.
    - "processing": the writer (and the link watch) gives up waiting for Open WebUI to process its upload
      OPENWEBUI_PROCESS_TIMEOUT after `since`; it never deletes an upload that links itself then (Open WebUI may still
      index it into the base), but leaves its journal record to whoever settles the journal next: `sync` at its run's
      end, else the next write, start or `recover`.
    - "lost": that settler takes an upload that links itself, still "pending" or "processing", for a task Open WebUI
      lost, and removes it (`settle.remove_unlinked`), only on evidence (`seen`): Open WebUI refused a connection
      after the upload began (`since`, plus CLOCK_SLACK_SECONDS for a writer on another host), so a restart dropped
      its task; or the file and the base's pending list are the same at looks its writer's OPENWEBUI_PROCESS_TIMEOUT
      apart (Open WebUI finished nothing of the base meanwhile: after a restart nothing of it moves again). While
      Open WebUI works through the base's uploads, however slowly, the list changes and nothing is taken for lost.
      One the base already `listed` (0.10 links before it indexes) is kept as it is ABANDONED_SECONDS after its
      start; before that, on the same evidence, `sync` (which has the file to send again) replaces it.
    - "attach": a dead writer's attach Open WebUI may still run is left alone until its answer was due (`since`), plus
      UPDATE_SECONDS (the journal's write before it was sent) and the clock slack for another host."""
    slack = CLOCK_SLACK_SECONDS if elsewhere else 0.0
    if what == "answer":
        return since + waits.answer
    if what == "processing":
        return since + waits.processing
    if what == "attach":
        return since + UPDATE_SECONDS + slack
    if listed:
        return since + ABANDONED_SECONDS
    if seen is None:
        return math.inf
    if seen.unreachable_at is not None and seen.unreachable_at > since + slack:
        return seen.unreachable_at
    if seen.unchanged_since is None:
        return math.inf
    return seen.unchanged_since + waits.processing


def time_left(what: GiveUp, waits: Waits, *, since: float, now: float) -> float:
    """Seconds from `now` until `given_up_at(what, since, waits)`, on the same clock; negative once past."""
    return given_up_at(what, since, waits) - now
