"""What killed runs left in this base before a run begins: uploads Open WebUI may still finish, waited for; those
recovery finds lost (`giveup`), removed."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from openwebui_rag_mcp.app import App
from openwebui_rag_mcp.errors import ToolFailure
from openwebui_rag_mcp.giveup import Waits, given_up_at, time_left
from openwebui_rag_mcp.settle import Resolution, remove_unlinked
from openwebui_rag_mcp.sync.types import Say


@dataclass
class Earlier:
    """The uploads killed runs left, as one run of this base sees them."""

    app: App
    knowledge_id: str
    say: Say

    async def await_uploads(self) -> set[str]:
        """Uploads that link themselves, left by a run killed while Open WebUI processed them, join the base when
        Open WebUI is done, and so does a file whose attach Open WebUI was running at the kill: wait for them first
        (OPENWEBUI_PROCESS_TIMEOUT, or until an upload's own writer would have given up on it where that is later), so
        that this run neither sends them again (two copies could both be linked) nor misses them, and (before 0.6.42)
        no late attach rewrites the base's list over this run's. Recovery removes one only on evidence that Open WebUI
        lost it (`giveup.given_up_at`), never because it is slow. Returns the file ids the run must remove itself: those
        lost that the base lists (0.10), which recovery keeps."""
        loop = asyncio.get_running_loop()
        settings = self.app.settings
        poll = settings.timings.earlier_uploads_poll
        deadline = given_up_at("processing", loop.time(), Waits.of(settings))
        said = False
        lost: set[str] = set()
        while True:
            try:
                resolutions = await self.app.recover_uploads()
            except Exception as error:  # the writes' own recovery says the same again; nothing is lost by going on
                self.say(f"note: the uploads a killed run left could not be looked at ({type(error).__name__})")
                return lost
            waiting, found_lost = self._busy(resolutions)
            lost |= found_lost
            self.say_removed(resolutions)
            if not waiting:
                return lost
            # Waited for until its writer would have given up on it, even past this run's own wait (a run begun just
            # after a kill); one look more past it: the journal's clock and the loop's are read a moment apart.
            now = self._journal_now()
            dues = [
                time_left("processing", r.record.waits(self._within()), since=r.record.answer_by, now=now)
                for r in waiting
                if r.record.links_itself
            ]
            deadline = max([deadline, *(loop.time() + due + poll for due in dues)])
            if loop.time() > deadline:
                self.say(
                    f"note: Open WebUI is still processing {len(waiting)} upload(s) a killed run left; going on (a "
                    "later run or `openwebui-rag-mcp recover` settles them)"
                )
                return lost
            if not said:
                self.say(f"waiting for Open WebUI to finish {len(waiting)} upload(s) a killed run left processing")
                said = True
            await asyncio.sleep(poll)

    def _busy(self, resolutions: list[Resolution]) -> tuple[list[Resolution], set[str]]:
        """What a killed run left in this base that Open WebUI is still working on, and the files of those recovery
        found lost but keeps, as the base lists them (0.10): the run replaces them (`base.read_base`'s `stuck`)."""
        busy = [r for r in resolutions if r.processing and r.record.knowledge_id == self.knowledge_id]
        lost = {r.record.file_id for r in busy if r.lost and r.record.file_id}
        return [r for r in busy if not r.lost], lost

    def say_removed(self, resolutions: list[Resolution]) -> None:
        """Recovery itself removes a killed run's upload to this base that linked itself and is in no base past its
        writer's deadline (0.11+; lost in a restart), with what it left in the base's search index: said as
        `delete_lost` says its own."""
        removed = sum(
            len(r.deleted) for r in resolutions if r.record.links_itself and r.record.knowledge_id == self.knowledge_id
        )
        if removed:
            self.say(f"removed {removed} file(s) of uploads a killed run left that Open WebUI never finished")

    def _journal_now(self) -> float:
        return self.app.inflight.now() if self.app.inflight is not None else time.time()

    def _within(self) -> float:
        """A writer's deadline for its upload's processing, for a record of an earlier version (none kept)."""
        return self.app.settings.timeout + self.app.settings.process_timeout

    async def preview(self) -> set[str]:
        """A dry run's look at what killed runs left (`await_uploads`), settling and waiting for nothing:
        says what a run would wait for or remove, and returns the files it would take for lost."""
        try:
            resolutions = await self.app.preview_uploads()
        except Exception as error:
            self.say(f"note: the uploads a killed run left could not be looked at ({type(error).__name__})")
            return set()
        waiting, lost = self._busy(resolutions)
        if waiting:
            self.say(
                f"a run now would first wait for Open WebUI to finish {len(waiting)} upload(s) a killed run left "
                "processing"
            )
        removed = sum(len(r.deleted) for r in resolutions)
        if removed:
            self.say(f"a run now would first remove {removed} file(s) killed writes with this key left in no base")
        return lost

    async def delete_lost(self, file_ids: list[str]) -> None:
        """Delete the files of uploads a killed run left that Open WebUI never finished nor linked (past their
        writer's deadline: `await_uploads`), with what of them it wrote into the base's search index
        (`remove_unlinked`); what cannot be deleted is left to recovery."""
        deleted = 0
        for file_id in file_ids:
            try:
                await remove_unlinked(self.app.client, self.knowledge_id, file_id)
            except ToolFailure as failure:
                if failure.code != "not_found":
                    self.say(
                        f"note: could not remove file {file_id}, an unfinished upload of a killed run ({failure.code})"
                    )
                continue
            deleted += 1
        if deleted:
            self.say(f"removed {deleted} file(s) of uploads a killed run left that Open WebUI never finished")
