"""When an upload is given up, and who removes it: one rule (`given_up_at`) for the journal, the link watch, the
write path and `sync`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from openwebui_rag_mcp.config import Settings

# Two hosts' clocks may disagree by this much: added to a deadline a writer on another host set.
CLOCK_SLACK_SECONDS = 120.0
# The most the end of a write waits for the journal: an attach is sent up to this long after its record says so.
UPDATE_SECONDS = 5.0
# An upload the base lists while Open WebUI never marks it indexed (0.10 links first; with
# BYPASS_EMBEDDING_AND_RETRIEVAL it never marks) is looked at this long before it is kept as it is; so is the record of
# an earlier version that kept no deadline of its own.
ABANDONED_SECONDS = 3600.0

GiveUp = Literal["answer", "processing", "lost", "attach"]


@dataclass(frozen=True, slots=True)
class Waits:
    """How long a writer waits on Open WebUI for one upload."""

    answer: float  # OPENWEBUI_TIMEOUT: an upload's or an attach's answer
    processing: float  # OPENWEBUI_PROCESS_TIMEOUT: its processing, once the upload was answered

    @classmethod
    def of(cls, settings: Settings) -> Waits:
        return cls(settings.timeout, settings.process_timeout)


def given_up_at(what: GiveUp, since: float, waits: Waits, *, elsewhere: bool = False, listed: bool = False) -> float:
    """When an upload still unfinished in Open WebUI is given up, on the clock `since` was read from.

    The rule: the writer waits, and only then whoever settles the journal takes the upload for lost and removes it.

    - "answer": the writer gives up on the answer to its upload or attach request OPENWEBUI_TIMEOUT after it was sent;
      an attach whose answer never came is then watched as long again (`attach.outlived_attach`) before its file goes.
    - "processing": the writer (and the link watch) gives up waiting for Open WebUI to process its upload
      OPENWEBUI_PROCESS_TIMEOUT after `since`; it never deletes an upload that links itself then (Open WebUI may still
      index it into the base), but leaves its journal record to whoever settles the journal next.
    - "lost": that settler takes an upload that links itself, still unfinished, for a task Open WebUI lost in a restart
      once its writer would have given up on it: its start (`since`), the upload's answer and its processing, plus
      CLOCK_SLACK_SECONDS for a writer on another host. It then removes it (`settle.remove_unlinked`). One the base
      already `listed` waits ABANDONED_SECONDS from its start, and is then kept.
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
    return since + waits.answer + waits.processing + slack
