"""Exact search: the lines of a base's documents that contain a phrase or identifier, with line numbers.

Semantic search ranks an exact identifier (`ERR-4711`, a function name, a part number) badly; this finds it. Open
WebUI's own content search narrows the documents to read where the release has it and where it provably keeps every
match (`content_filter`); the text of each candidate is then read and scanned line by line, so the answer is exact
on every release. Both the documents read and the matches returned are capped, and the answer says when a cap was
reached.
"""

from __future__ import annotations

import asyncio

from openwebui_rag_mcp import citations, normalize
from openwebui_rag_mcp.app import App, check_range
from openwebui_rag_mcp.errors import invalid_argument
from openwebui_rag_mcp.models import ExactMatch, ExactMatches

PHRASE_MAX_CHARS = 500
FILES_MAX = 500
# Documents read per call: enough for most bases; the answer says when a base had more candidates.
FILES_READ = 200
MATCHES_MAX = 500
LINE_MAX_CHARS = 400
_READERS = 4

# What Open WebUI's content filter may be asked. From 0.10.0 it is `filename ILIKE '%q%' OR substr(data->>'content', 1,
# RAG_FILE_CONTENT_SEARCH_MAX_CHARS) ILIKE '%q%'` (models/knowledge.py; 0.9.6 has no substr), which differs from our
# matching: on PostgreSQL a backslash escapes the next character, `%` and `_` are wildcards, case is folded with the
# database's lower() (per character, by locale: Turkish folds I to dotless i), on SQLite with ASCII-only lower();
# earlier builds searched the JSON text, where `"` is `\"`. Printable ASCII without those four characters is compared
# the same way by every engine, as long as no non-ASCII character of the text can fold into it: that happens only
# without case, and only to the letters below ("ß" -> "ss", "ﬁ" -> "fi", KELVIN SIGN -> "k", "İ" -> "i̇", ...). So a run
# of safe characters of the phrase is found by the filter in every document that holds the phrase; the longest such run
# is what we send, and with none every document is read. The default window of the filter, 64 Mi characters, is more
# than the client reads of one document (MAX_RESPONSE_BYTES).
_PRINTABLE_ASCII = frozenset(chr(point) for point in range(0x20, 0x7F))
_ESCAPED = frozenset('\\%_"')  # LIKE's escape and wildcards, and the quote JSON text escapes
FOLDED_INTO = frozenset("afhijklnstwy")  # ASCII characters some non-ASCII character casefolds into


async def find_exact(
    app: App, knowledge_id: str, phrase: str, *, case_sensitive: bool, max_files: int, max_matches: int
) -> ExactMatches:
    app.check_base(knowledge_id)
    if not phrase.strip():
        raise invalid_argument("phrase must not be empty")
    if len(phrase) > PHRASE_MAX_CHARS or "\n" in phrase:
        raise invalid_argument(f"phrase must be one line of at most {PHRASE_MAX_CHARS} characters")
    check_range(max_files, "max_files", 1, FILES_MAX)
    check_range(max_matches, "max_matches", 1, MATCHES_MAX)

    narrowed_by = content_filter(phrase, case_sensitive)
    candidates = normalize.file_records(await app.client.files_containing(knowledge_id, narrowed_by))
    chosen = candidates[:max_files]
    needle = phrase if case_sensitive else phrase.casefold()
    gate = asyncio.Semaphore(_READERS)

    async def read(record: normalize.FileRecord) -> list[ExactMatch]:
        async with gate:
            document = normalize.file_text(await app.client.file(record.file_id), offset=0, max_chars=10**9)
        found: list[ExactMatch] = []
        # Lines end at "\n" only (as knowledge_get_file's line numbers do), not at form feeds and other breaks.
        for number, raw in enumerate(document.text.split("\n"), start=1):
            line = raw.removesuffix("\r")
            if needle in (line if case_sensitive else line.casefold()):
                shown, cut = normalize.cut(line, LINE_MAX_CHARS)
                found.append(
                    ExactMatch(
                        file_id=record.file_id,
                        title=document.title,
                        line=number,
                        text=shown,
                        truncated=cut,
                        link=citations.link(app.link_base(), record.file_id),
                    )
                )
                if len(found) > max_matches:  # one more than asked for tells that the cap was reached
                    break
        return found

    per_file = await asyncio.gather(*(read(record) for record in chosen))
    matches = [match for found in per_file for match in found]
    return ExactMatches(
        knowledge_id=knowledge_id,
        phrase=phrase,
        matches=matches[:max_matches],
        count=min(len(matches), max_matches),
        files_scanned=len(chosen),
        files_capped=len(candidates) > len(chosen),
        matches_capped=len(matches) > max_matches,
    )


def content_filter(phrase: str, case_sensitive: bool) -> str | None:
    """The longest part of `phrase` that Open WebUI's content filter finds wherever the phrase matches (see
    `FOLDED_INTO`), or None when no part is safe and every document must be read."""
    safe = _PRINTABLE_ASCII - _ESCAPED
    if not case_sensitive:
        safe -= FOLDED_INTO | {letter.upper() for letter in FOLDED_INTO}
    runs = "".join(char if char in safe else "\n" for char in phrase).split("\n")
    longest = max(runs, key=len)
    return longest if longest.strip() else None
