"""Which documents of a base qualify for a filter: equality on the metadata given at upload (`knowledge_add`'s
`metadata`, `sync`'s `path`) and a time window on when a document was added or last changed.

Open WebUI's retrieval cannot filter by either, so `knowledge_search` decides from the base's own document list
(which checks access on every release) which documents qualify and searches only their collections; `knowledge_files`
lists only them. Pure functions, no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from openwebui_rag_mcp import normalize
from openwebui_rag_mcp.errors import invalid_argument

WHERE_MAX_KEYS = 20
KEY_MAX_CHARS = 100
VALUE_MAX_CHARS = 1_000


@dataclass(frozen=True, slots=True)
class Filter:
    """Documents whose upload metadata holds every `where` pair, changed within [`after`, `before`)."""

    where: tuple[tuple[str, str | int | float | bool], ...]
    after: datetime | None
    before: datetime | None

    def matches(self, raw: Mapping[str, Any]) -> bool:
        """Whether a document of a base's list (any release's shape) qualifies."""
        uploaded = normalize.upload_metadata_of(raw)
        for key, wanted in self.where:
            if key not in uploaded or not _same(uploaded[key], wanted):
                return False
        if self.after is None and self.before is None:
            return True
        changed = _moment(raw.get("updated_at")) or _moment(raw.get("created_at"))
        if changed is None:  # a document without a time is never inside a window
            return False
        return (self.after is None or changed >= self.after) and (self.before is None or changed < self.before)

    def describe(self) -> str:
        parts = [f"{key}={json.dumps(value, ensure_ascii=False)}" for key, value in self.where]
        if self.after is not None:
            parts.append(f"changed at or after {self.after.isoformat()}")
        if self.before is not None:
            parts.append(f"changed before {self.before.isoformat()}")
        return ", ".join(parts)


def _same(stored: object, wanted: object) -> bool:
    # JSON equality: true is not 1, and 1 is 1.0.
    if isinstance(stored, bool) or isinstance(wanted, bool):
        return type(stored) is type(wanted) and stored == wanted
    return stored == wanted


def _moment(value: object) -> datetime | None:
    shown = normalize.iso_time(value)
    if not shown:
        return None
    try:
        moment = datetime.fromisoformat(shown)
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _instant(value: str, name: str) -> datetime:
    text = value.strip()
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise invalid_argument(
            f"{name} must be a date or time in ISO 8601, like 2026-11-30 or 2026-11-30T14:00:00Z; got {value!r}"
        ) from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)  # no zone given: UTC


def make_filter(
    where: Mapping[str, Any] | None, changed_after: str | None, changed_before: str | None
) -> Filter | None:
    """The filter the arguments describe, or None when they describe none; bad arguments are `invalid_argument`."""
    pairs: list[tuple[str, str | int | float | bool]] = []
    if where is not None:
        if not isinstance(where, Mapping) or not where:
            raise invalid_argument('where must be an object of metadata keys and values, like {"author": "ops"}')
        if len(where) > WHERE_MAX_KEYS:
            raise invalid_argument(f"where has {len(where)} keys; the limit is {WHERE_MAX_KEYS}")
        for key, value in where.items():
            if not isinstance(key, str) or not key.strip() or len(key) > KEY_MAX_CHARS:
                raise invalid_argument(f"where keys must be names of at most {KEY_MAX_CHARS} characters")
            if not isinstance(value, str | int | float | bool) or (
                isinstance(value, str) and len(value) > VALUE_MAX_CHARS
            ):
                raise invalid_argument(
                    f"where[{key!r}] must be a string (at most {VALUE_MAX_CHARS} characters), a number or true/false: "
                    "documents qualify when their upload metadata holds exactly that value"
                )
            pairs.append((key, value))
    after = _instant(changed_after, "changed_after") if changed_after is not None else None
    before = _instant(changed_before, "changed_before") if changed_before is not None else None
    if after is not None and before is not None and after >= before:
        raise invalid_argument("changed_after must be earlier than changed_before")
    if not pairs and after is None and before is None:
        return None
    return Filter(tuple(sorted(pairs)), after, before)  # sorted: the same filter, whatever the order of its keys
