"""The one error type tools report, and its small set of codes.

    ToolFailure(code, message, http_status, retryable, stage, file_id, outcome)

The Open WebUI client raises it for every transport, HTTP and shape failure; tools raise it for bad input.
The server turns it into an MCP result with `isError: true` and the structured body `ErrorBody`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

ErrorCode = Literal[
    "invalid_argument",  # the caller's input is wrong; nothing was sent upstream
    "auth",  # Open WebUI rejected the API key
    "forbidden",  # the key is valid but lacks access to this object
    "not_found",  # the knowledge base or file does not exist (or is invisible to the key)
    "duplicate_content",  # the base already holds a document with identical text
    "conflict",  # Open WebUI refused the change because of the object's state
    "too_large",  # Open WebUI or this server refused a body over a size limit
    "rate_limited",  # 429 from Open WebUI or a proxy in front of it
    "timeout",  # no answer within OPENWEBUI_TIMEOUT
    "upstream_unavailable",  # Open WebUI could not be reached
    "upstream_error",  # Open WebUI answered with an error we cannot classify more precisely
    "unexpected_response",  # a 2xx answer that is not the JSON the contract promises
    "unsupported",  # this Open WebUI release cannot do this safely
    "internal_error",  # a bug in this server; the details are in its log on stderr
]

Stage = Literal["create", "fetch", "upload", "process", "attach", "update", "reindex", "unlink", "rename", "delete"]
Outcome = Literal["not_applied", "partial_or_unknown"]


@dataclass(eq=False)
class ToolFailure(Exception):
    """A failure an agent can read and act on. Messages never carry the API key."""

    code: ErrorCode
    message: str
    http_status: int | None = None
    retryable: bool = False
    stage: Stage | None = None
    file_id: str | None = None
    outcome: Outcome | None = None
    existing_file_id: str | None = None
    # Seconds Open WebUI (or a proxy) asked us to wait before trying again (Retry-After), when it said.
    retry_after: float | None = None
    # False when the request certainly never reached Open WebUI (no connection): a write then did not happen.
    request_sent: bool = True
    # An attach whose answer never came and of which Open WebUI showed no sign in OPENWEBUI_TIMEOUT more (the file not
    # marked, the base not listing it); its upload was removed again. `sync` sends such a file once more.
    attach_unseen: bool = False

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"

    def explained(self, more: str) -> ToolFailure:
        """The same failure with more to say."""
        return replace(self, message=self.message + more)

    def at(self, stage: Stage, *, file_id: str | None = None, outcome: Outcome | None = None) -> ToolFailure:
        """The same failure, placed in a write sequence."""
        placed = replace(self, stage=stage, file_id=file_id or self.file_id, outcome=outcome or self.outcome)
        return placed.for_write()

    def for_write(self) -> ToolFailure:
        """`retryable` means "safe to repeat exactly as it was": never when a write may have been applied."""
        outcome = self.outcome or write_outcome(self)
        if outcome == "not_applied" or not self.retryable:
            return replace(self, outcome=outcome)
        return replace(
            self,
            outcome=outcome,
            retryable=False,
            message=self.message + _CHECK_FIRST,
        )


_CHECK_FIRST = (
    " Open WebUI may have applied this write: check with knowledge_files (and knowledge_get_file) before trying "
    "again, or the write may happen twice."
)


def invalid_argument(message: str) -> ToolFailure:
    return ToolFailure("invalid_argument", message, request_sent=False)


# What a gateway in front of Open WebUI answers when Open WebUI did not (in time): behind it the request may still
# run. 520 to 524 are Cloudflare's (524: the origin is still working).
GATEWAY_STATUSES = frozenset({502, 503, 504, 520, 521, 522, 523, 524})


def unanswered(failure: ToolFailure) -> bool:
    """Whether the request left and Open WebUI's own answer never came: a timeout, a broken connection, a gateway's
    502, 503, 504 or 520 to 524. Open WebUI may then still be running it (it goes on with a request whose caller
    went away)."""
    if not failure.request_sent:
        return False
    if failure.http_status is not None:
        return failure.http_status in GATEWAY_STATUSES
    return failure.code in ("timeout", "upstream_unavailable")


def write_outcome(failure: ToolFailure) -> Outcome:
    """Whether a failed write request may have changed anything in Open WebUI.

    A refusal (4xx) or a request that never left is certain; a timeout, a broken connection, a 5xx or an
    unreadable answer is not: Open WebUI may have applied the request before failing to answer.
    """
    refused = failure.http_status is not None and failure.http_status < 500
    return "not_applied" if refused or not failure.request_sent else "partial_or_unknown"
