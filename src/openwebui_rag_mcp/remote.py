"""`knowledge_add_file` sources whose bytes are already on Open WebUI's side: a web page its own web loader fetches
(`url`), and a file it already holds (`file_id`, a chat upload), so a large file never travels through the model.

Both keep the guarantees of the other write tools (one base's write lock, a stage and an outcome on failure, nothing
orphaned, duplicates named). A fetched page becomes an ordinary text document, uploaded and attached like
`knowledge_add`'s. An attached file is the caller's own: it is never deleted here, whatever fails. A page's address
must be public, and every address its name resolves to here too, before Open WebUI is asked anything: its own check
has let private addresses through (redirects, IPv6 forms) and resolves the name again.
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
import socket
import urllib.parse
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import anyio

from openwebui_rag_mcp import normalize, writes
from openwebui_rag_mcp.app import App, check_id, check_writes_allowed
from openwebui_rag_mcp.attach import outlived_attach
from openwebui_rag_mcp.errors import ToolFailure, invalid_argument, unanswered, write_outcome
from openwebui_rag_mcp.localfiles import FileSource
from openwebui_rag_mcp.models import FileAdded
from openwebui_rag_mcp.steps import (
    Progress,
    check_writable,
    failed_at,
    holder_of,
    listed_in,
    no_progress,
    read_release,
    still_held,
    tell,
)
from openwebui_rag_mcp.upload import Upload, extracted_text, upload_to_base, wait_processed
from openwebui_rag_mcp.writes import TEXT_MAX_CHARS, TITLE_MAX_CHARS, check_metadata, check_text, safe_filename

URL_MAX_CHARS = 2_048
# How long a page's host name may take to resolve before the add is refused (the resolver runs in a worker thread).
RESOLVE_SECONDS = 5.0
# Name lookups in worker threads at once, apart from anyio's shared 40 (local file reads, citation placement), so slow
# DNS cannot starve those; a lookup waiting for its turn counts against its RESOLVE_SECONDS.
LOOKUPS = anyio.CapacityLimiter(8)
# Numeric hosts that `inet_aton` reads as IPv4 (127.1, 2130706433, 0x7f.1, 0177.0.0.1) though `ipaddress` does not.
_SHORT_IPV4 = re.compile(r"(0x[0-9a-f]*|[0-9]+)(\.(0x[0-9a-f]*|[0-9]+)){0,3}")
# IPv6 prefixes that carry an IPv4 address in their last 32 bits: NAT64 (RFC 6052, RFC 8215) and IPv4-compatible.
_EMBEDDING_V4 = (
    ipaddress.IPv6Network("64:ff9b::/96"),
    ipaddress.IPv6Network("64:ff9b:1::/48"),
    ipaddress.IPv6Network("::/96"),
)
_CGNAT = ipaddress.IPv4Network("100.64.0.0/10")
_UNIQUE_LOCAL = ipaddress.IPv6Network("fc00::/7")
Address = ipaddress.IPv4Address | ipaddress.IPv6Address


async def add_file(
    app: App,
    knowledge_id: str,
    source: FileSource,
    *,
    title: str | None = None,
    metadata: Mapping[str, Any] | None = None,
    progress: Progress = no_progress,
) -> FileAdded:
    """`knowledge_add_file`: a local file or base64 bytes (`writes.add_file`), a web page, or a file by id."""
    check_writes_allowed()
    app.check_base(knowledge_id)
    source.check_one()
    if source.file_id is not None:
        if title is not None or metadata is not None or source.filename is not None:
            raise invalid_argument(
                "file_id attaches a file as it is: its title, filename and metadata were given when it was uploaded"
            )
        return await attach_existing(app, knowledge_id, check_id(source.file_id, "file_id"), progress)
    if source.url is not None:
        if not app.settings.allow_url_adds:
            raise ToolFailure(
                "forbidden",
                "adding a web page by url is switched off on this server (OPENWEBUI_ALLOW_URL_ADDS); fetch the page "
                "yourself and add its text with knowledge_add, or its bytes with content_base64. Nothing was changed",
                outcome="not_applied",
                request_sent=False,
            )
        if source.filename is not None:
            raise invalid_argument("filename goes with content_base64; a page's title is `title`")
        if title is not None:
            title = check_text(title, "title", TITLE_MAX_CHARS).strip()
        return await add_web_page(app, knowledge_id, source.url, title, check_metadata(metadata), progress)
    return await writes.add_file(app, knowledge_id, source, title=title, metadata=metadata, progress=progress)


def check_url(url: str) -> str:
    """An absolute http(s) URL with a host and no user:password (it would be kept as the document's source)."""
    url = url.strip()
    if len(url) > URL_MAX_CHARS:
        raise invalid_argument(f"url is {len(url)} characters long; the limit is {URL_MAX_CHARS}")
    if any(char.isspace() or ord(char) < 32 or char == "\\" for char in url):
        raise invalid_argument("url must not contain spaces, control characters or backslashes")
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError as error:
        raise invalid_argument(f"url is not a valid URL ({error})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise invalid_argument("url must be an http:// or https:// address with a host")
    if parts.username is not None or parts.password is not None:
        raise invalid_argument("url must not carry a user name or password; they would be stored with the document")
    return url


def resolve_host(host: str) -> list[str]:
    """Every address `host` resolves to here (blocking: it runs in a worker thread)."""
    return list(dict.fromkeys(str(info[4][0]) for info in socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)))


def _literal(host: str) -> Address | None:
    """The address a host written as one means, in every form a resolver would read it."""
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        pass
    if _SHORT_IPV4.fullmatch(host):
        try:
            return ipaddress.IPv4Address(socket.inet_aton(host))
        except OSError:
            return None
    return None


def not_public(address: Address) -> str | None:
    """Why `address` is not a public one (None when it is), looking inside IPv6 forms that carry an IPv4 one."""
    if isinstance(address, ipaddress.IPv6Address):
        inner = address.ipv4_mapped or address.sixtofour or (address.teredo[1] if address.teredo else None)
        if inner is None and any(address in prefix for prefix in _EMBEDDING_V4) and int(address) > 1:
            inner = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
        if inner is not None and (why := not_public(inner)):
            return f"an IPv6 form of {inner}, {why}"
    checks = (
        (address.is_unspecified, "unspecified"),
        (address.is_loopback, "loopback"),
        (address.is_link_local, "link-local"),
        (isinstance(address, ipaddress.IPv4Address) and address in _CGNAT, "shared (CGNAT, 100.64.0.0/10)"),
        (isinstance(address, ipaddress.IPv6Address) and address in _UNIQUE_LOCAL, "unique-local (fc00::/7)"),
        (isinstance(address, ipaddress.IPv6Address) and address.is_site_local, "site-local"),
        (address.is_multicast, "multicast"),
        (address.is_private, "private"),
        (address.is_reserved, "reserved"),
        (not address.is_global, "not a public address"),
    )
    return next((why for failed, why in checks if failed), None)


def _private(host: str, why: str) -> ToolFailure:
    return ToolFailure(
        "forbidden",
        f"url's host {host!r} {why}; this server hands Open WebUI only public addresses to fetch (an operator "
        "who wants local or private ones sets OPENWEBUI_URL_ALLOW_PRIVATE=true). Nothing was sent",
        outcome="not_applied",
        request_sent=False,
    )


async def check_public(url: str, allow_private: bool, *, resolve_within: float = RESOLVE_SECONDS) -> None:
    """Refuse a page whose host is, or resolves to, an address that is not public, before anything is sent: every
    address the name resolves to here must be public (a name may resolve differently to Open WebUI, which resolves
    it again; that gap is its own check's)."""
    if allow_private:
        return
    host = (urllib.parse.urlsplit(url).hostname or "").rstrip(".")
    if not host.isascii():
        # Mapped to ASCII differently by different libraries (IDNA 2003 or 2008): the name checked here could be
        # another than the one Open WebUI fetches.
        raise _private(
            host,
            "is not written in ASCII, so it could not be checked as Open WebUI would fetch it; write "
            "an international name in its xn-- form",
        )
    literal = _literal(host)
    if literal is not None:
        addresses: list[Address] = [literal]
    else:
        try:
            with anyio.fail_after(resolve_within):
                found = await anyio.to_thread.run_sync(resolve_host, host, abandon_on_cancel=True, limiter=LOOKUPS)
            addresses = [ipaddress.ip_address(item.split("%")[0]) for item in found]
        except TimeoutError:
            raise _private(host, f"did not resolve within {resolve_within:g} s, so it could not be checked") from None
        except (OSError, UnicodeError, ValueError) as error:
            said = error.strerror if isinstance(error, OSError) and error.strerror else type(error).__name__
            raise _private(host, f"could not be resolved here to check it ({said})") from None
        if not addresses:
            raise _private(host, "resolved to no address here, so it could not be checked")
    for address in addresses:
        why = not_public(address)
        if why is not None:
            shown = "is" if literal is not None else f"resolves to {address}, which is"
            raise _private(host, f"{shown} {why}")


def without_query(url: str) -> str:
    """`url` without its query string and fragment, which may carry a token: what is stored as a page's source."""
    parts = urllib.parse.urlsplit(url)
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, parts.path, "", ""))


def title_of(url: str) -> str:
    """A document title for a page fetched without one given: its host and path (a query string may carry a signed
    token, and the title also names the file)."""
    parts = urllib.parse.urlsplit(url)
    return (parts.netloc + parts.path).rstrip("/")[:TITLE_MAX_CHARS] or parts.netloc


async def add_web_page(
    app: App,
    knowledge_id: str,
    url: str,
    title: str | None,
    extra: Mapping[str, Any],
    progress: Progress,
) -> FileAdded:
    url = check_url(url)
    await check_public(url, app.settings.url_allow_private)
    release = await read_release(app, "fetch")
    if not release.fetch_without_indexing:
        raise ToolFailure(
            "unsupported",
            f"Open WebUI {release.version} embeds every page it fetches into a collection of its own that no base "
            "lists (0.6.42 and later can fetch without it), so a page would leave vectors behind; fetch it yourself "
            "and add its text with knowledge_add. Nothing was changed",
            stage="fetch",
            outcome="not_applied",
        )
    if not release.redirects_checked and not app.settings.url_allow_private:
        raise ToolFailure(
            "unsupported",
            f"Open WebUI {release.version} follows a page's redirects without checking where they lead (0.9.5 and "
            "later refuse a redirect to a private address), so a public page could have it fetch an internal one; "
            "fetch the page yourself and add its text with knowledge_add, or an operator who accepts internal "
            "addresses sets OPENWEBUI_URL_ALLOW_PRIVATE=true. Nothing was sent",
            stage="fetch",
            outcome="not_applied",
        )
    # Before the fetch: a key that cannot change the base gets no page fetched for it.
    await check_writable(app, knowledge_id, "fetch")
    await tell(progress, 0, 4, "fetching")
    try:
        text = await app.client.fetch_web(url)
    except ToolFailure as failure:
        said = f" ({failure.message})" if failure.message else ""
        raise failure.at("fetch", outcome="not_applied").explained(
            f" Open WebUI could not fetch {url}{said}: it refuses local and private addresses unless its operator "
            "sets ENABLE_RAG_LOCAL_WEB_FETCH (ENABLE_LOCAL_WEB_FETCH from 0.12), and addresses it cannot resolve or "
            "reach. Nothing was changed."
            if failure.http_status == 400
            else " Nothing was changed."
        ) from None
    if not text.strip():
        raise ToolFailure(
            "upstream_error",
            f"Open WebUI's web loader read no text from {url}; nothing was changed",
            stage="fetch",
            outcome="not_applied",
        )
    if len(text) > TEXT_MAX_CHARS:
        raise ToolFailure(
            "too_large",
            f"the page's text is {len(text):,} characters; the limit is {TEXT_MAX_CHARS:,}; nothing was changed",
            stage="fetch",
            outcome="not_applied",
        )
    shown_title = title or title_of(url)
    filename = safe_filename(shown_title)
    upload = Upload(
        filename,
        text.encode(),
        "text/markdown",
        {**extra, "title": shown_title, "source": extra.get("source", without_query(url))},
    )
    added = await upload_to_base(app, knowledge_id, upload, progress, text=text, tool="knowledge_add_file")
    return FileAdded(
        ok=True,
        knowledge_id=knowledge_id,
        file_id=added.file_id,
        title=shown_title,
        filename=filename,
        size=len(upload.content),
        extracted_chars=len(text),
        status=added.status,
    )


async def attach_existing(app: App, knowledge_id: str, file_id: str, progress: Progress) -> FileAdded:
    """Attach a file Open WebUI already holds. The caller must be able to read it with its own credential (and,
    under an allowlist, through an allowed base): Open WebUI's file/add does not check on every release who may
    read the file, and attaching would make someone else's upload searchable and readable to this key."""
    await app.check_file(file_id, fresh=True)
    release = await read_release(app, "attach", file_id)
    try:
        body = await app.client.file(file_id)
        uploaded = normalize.file_record(body)
        shown = normalize.file_text(body, offset=0, max_chars=1)
    except ToolFailure as failure:
        raise failure.at("attach", file_id=file_id, outcome="not_applied") from None
    meta = body.get("meta") if isinstance(body, Mapping) else None
    size = meta.get("size") if isinstance(meta, Mapping) else None
    filename = shown.filename or file_id

    def attached(status: str) -> FileAdded:
        return FileAdded(
            ok=True,
            knowledge_id=knowledge_id,
            file_id=file_id,
            title=shown.title or filename,
            filename=filename,
            size=size if isinstance(size, int) and size >= 0 else 0,
            extracted_chars=shown.total_chars,
            status=status,
        )

    async with app.locks.hold(knowledge_id) as lease:
        await check_writable(app, knowledge_id, "attach", file_id)
        members = await _members(app, knowledge_id, file_id)
        if any(member.file_id == file_id for member in members):
            return attached("completed")
        await tell(progress, 2, 4, "processing")
        try:
            # A file with no status of its own (older uploads) was processed when it was uploaded; asking for its
            # status would say "pending" forever. A processed file's text is in the answer already read.
            if uploaded.status in (None, "completed"):
                status, text = "completed", await extracted_text(app, file_id, filename, body)
            else:
                status = await wait_processed(app, release, uploaded, progress)
                text = await extracted_text(app, file_id, filename)
        except ToolFailure as failure:
            raise failure.at("process", file_id=file_id, outcome="not_applied") from None
        # Checked here, not left to Open WebUI: its file/add marks the file itself `failed` when it refuses a
        # duplicate, and the file may be in other bases.
        digests = {hashlib.sha256(text.encode()).hexdigest(), uploaded.hash}
        holder = next((member.file_id for member in members if member.hash and member.hash in digests), None)
        if holder is not None:
            raise ToolFailure(
                "duplicate_content",
                f"knowledge base {knowledge_id} already holds a document with this exact text (file_id {holder}); "
                f"file {file_id} was not attached and is unchanged",
                stage="attach",
                file_id=file_id,
                outcome="not_applied",
                existing_file_id=holder,
            )
        await tell(progress, 3, 4, "attaching")
        still_held(lease, "attach", file_id)
        # Shielded: a cancelled call must not give the base's lock back while Open WebUI may still run the attach.
        with anyio.CancelScope(shield=True):
            try:
                await app.client.add_file(knowledge_id, file_id)
            except ToolFailure as failure:
                # Unanswered, the attach may still run: the lock is kept until it shows its end, or for a while
                if not unanswered(failure) or await outlived_attach(app, knowledge_id, file_id) != "listed":
                    raise await _refused_attach(app, knowledge_id, file_id, text, failure) from None
        if not release.attach_is_atomic:
            listed = await listed_in(app, knowledge_id, file_id)
            if not listed:
                said = (
                    "a concurrent change dropped it (before 0.6.42 Open WebUI rewrites a base's file list on every "
                    "change)"
                    if listed is False
                    else "whether the base lists it could not be read"
                )
                raise ToolFailure(
                    "upstream_error",
                    f"Open WebUI accepted attaching file {file_id} to knowledge base {knowledge_id}, but {said}. The "
                    "file's text may be in the base's search index: check with knowledge_files before attaching it "
                    "again.",
                    stage="attach",
                    file_id=file_id,
                    outcome="partial_or_unknown",
                )
    await tell(progress, 4, 4, "done")
    return attached(status)


async def _members(app: App, knowledge_id: str, file_id: str) -> list[normalize.FileRecord]:
    """The base's documents, read before the attach; when they cannot be read nothing is sent."""
    try:
        files, _ = await app.client.knowledge_files(knowledge_id, None)
        return normalize.file_records(files)
    except ToolFailure as failure:
        raise failure.at("attach", file_id=file_id, outcome="not_applied") from None


async def _refused_attach(app: App, knowledge_id: str, file_id: str, text: str, failure: ToolFailure) -> ToolFailure:
    """An attach Open WebUI refused or did not answer, said with what is known of the base now. The file is never
    deleted; but a refusal made inside Open WebUI's processing marks it `failed`, which other bases holding it see."""
    if failure.code == "duplicate_content":
        holder = await holder_of(app, knowledge_id, text)
        where = f" (file_id {holder})" if holder else ""
        failure = replace(
            failure,
            message=f"knowledge base {knowledge_id} already holds a document with this exact text{where}; file "
            f"{file_id} was not attached.",
            existing_file_id=holder,
        )
    elif failure.code == "not_found":  # the file was just read with this key
        failure = failure.explained(
            " Open WebUI 0.12 and later attach another user's file only with write access to that file."
        )
    if write_outcome(failure) == "not_applied" and failure.http_status not in (400, 500):
        return failure.at("attach", file_id=file_id, outcome="not_applied")
    listed = await listed_in(app, knowledge_id, file_id)
    failed = failed_at(failure, "attach", file_id, after_upload=True)
    if listed:
        return failed.explained(f" Knowledge base {knowledge_id} lists the file {file_id} all the same.")
    state = "does not list" if listed is False else "may or may not hold"
    return failed.explained(
        f" Knowledge base {knowledge_id} {state} the file {file_id}; Open WebUI may have marked the file `failed` "
        "while refusing it (knowledge_get_file shows its status)."
    )
