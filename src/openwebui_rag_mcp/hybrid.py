"""knowledge_search's hybrid-search controls, held to what the release does with them before a search and to what ran
after it.

Open WebUI runs hybrid search (BM25 keywords with vectors, then its reranker) only while its admin setting
ENABLE_RAG_HYBRID_SEARCH is on; no request can switch it on, and what a request can switch off or weigh differs by
release (compat.py). A search cannot ask which mode will run, but its answer shows which did: hybrid search copies
each fragment's relevance into the fragment's metadata as `score`. So a control is refused before the search where
the release alone decides, and after it where only the answer can tell; never silently ignored.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from openwebui_rag_mcp.app import check_range
from openwebui_rag_mcp.compat import BM25_WEIGHT, BM25_WEIGHT_ZERO, VECTOR_ONLY_ON_REQUEST, Release
from openwebui_rag_mcp.errors import ToolFailure, invalid_argument
from openwebui_rag_mcp.models import Chunk

K_RERANKER_MAX = 200
_SETTING = "its admin setting ENABLE_RAG_HYBRID_SEARCH (Admin Settings > Documents)"


def _version(parts: tuple[int, int, int]) -> str:
    return ".".join(map(str, parts))


@dataclass(frozen=True, slots=True)
class Controls:
    """What one search asks of Open WebUI's hybrid search; all None is Open WebUI's own settings."""

    k_reranker: int | None = None
    hybrid: bool | None = None
    bm25_weight: float | None = None

    @property
    def needs_hybrid(self) -> bool:
        """Whether the answer means nothing unless hybrid search ran (`k_reranker` alone is only a hint, as before)."""
        return self.hybrid is True or self.bm25_weight is not None

    @property
    def given(self) -> bool:
        return self.hybrid is not None or self.bm25_weight is not None

    def fields(self) -> dict[str, Any]:
        """The fields of a `query/collection` request."""
        body: dict[str, Any] = {}
        if self.k_reranker is not None:
            body["k_reranker"] = self.k_reranker
        if self.hybrid is not None:
            body["hybrid"] = self.hybrid
        if self.bm25_weight is not None:
            body["hybrid_bm25_weight"] = self.bm25_weight
        return body


def controls(k_reranker: int | None, hybrid: bool | None, bm25_weight: float | None) -> Controls:
    """The controls as given, checked for what needs no release."""
    if k_reranker is not None:
        check_range(k_reranker, "k_reranker", 1, K_RERANKER_MAX)
    if bm25_weight is not None:
        if not math.isfinite(bm25_weight) or not 0.0 <= bm25_weight <= 1.0:
            raise invalid_argument(
                f"bm25_weight must be between 0 (vectors only) and 1 (keywords only), got {bm25_weight:g}"
            )
        if hybrid is False:
            raise invalid_argument(
                "bm25_weight weighs keywords against vectors in hybrid search; give it without hybrid false"
            )
    return Controls(k_reranker=k_reranker, hybrid=hybrid, bm25_weight=bm25_weight)


def check_release(controls: Controls, release: Release) -> None:
    """Refuse, before searching, what this release would silently read otherwise."""
    weight = controls.bm25_weight
    if weight is None:
        return
    if release.parts < BM25_WEIGHT:
        raise ToolFailure(
            "unsupported",
            f"Open WebUI {release.version} takes no BM25 weight per search ({_version(BM25_WEIGHT)} and later do); "
            "search without bm25_weight. Nothing was searched",
        )
    # A version that cannot be read is not taken to honour a 0: a fork that reads it as "the setting" would run
    # hybrid search either way, so the answer could not show it.
    if weight == 0 and (not release.known or release.parts < BM25_WEIGHT_ZERO):
        raise ToolFailure(
            "unsupported",
            f"Open WebUI {release.version} reads a BM25 weight of 0 as 'use the admin setting' "
            f"({_version(BM25_WEIGHT_ZERO)} and later take it as vectors only); give a small weight such as 0.05. "
            "Nothing was searched",
        )


def ran_hybrid(chunks: Sequence[Chunk]) -> bool | None:
    """Whether hybrid search produced these fragments; None when there are none to tell by. Hybrid search sets
    `score` on every fragment; an upload's own `score` key (copied in by 0.11+) can match a distance only by chance."""
    if not chunks:
        return None
    return all(chunk.score is not None and chunk.score == chunk.distance for chunk in chunks)


def confirm(controls: Controls, chunks: Sequence[Chunk], release: Release) -> None:
    """Refuse an answer from the other mode than the one the search asked for."""
    if not controls.given:
        return
    ran = ran_hybrid(chunks)
    if ran is None:
        return
    if controls.needs_hybrid and not ran:
        raise ToolFailure(
            "unsupported",
            f"hybrid search is off in this Open WebUI: only {_SETTING} switches it on, a search cannot; "
            "search without hybrid and bm25_weight",
        )
    if controls.hybrid is False and ran:
        first, last = VECTOR_ONLY_ON_REQUEST
        if release.parts < first:
            why = f"Open WebUI {release.version} ignores hybrid false ({_version(first)} and later take it)"
        elif release.parts >= last:
            why = f"from {_version(last)} on, Open WebUI runs hybrid search whenever {_SETTING} is on"
        else:
            why = f"Open WebUI {release.version} should have taken it, as releases {_version(first)} to 0.8.10 do"
        raise ToolFailure(
            "unsupported",
            f"this Open WebUI ran hybrid search although the search asked for vectors only: {why}; search without "
            "hybrid",
        )
