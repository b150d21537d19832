"""What a run does, decided from the folder and what the base holds, without I/O: add, replace, unchanged, renamed,
gone, and whether `--delete` may remove what is gone. `same_content` (this folder's documents) and `same_bytes`
(anyone else's) are the rules for "this file is held"."""

from __future__ import annotations

from collections.abc import Sequence

from openwebui_rag_mcp.sync.names import DIGEST_CHARS, key_of
from openwebui_rag_mcp.sync.types import LocalFile, Other, Plan, RemoteFile, Skipped

# --delete without --max-delete removes at most this many of this folder's documents, or at most half of them.
DELETE_FEW = 5


def same_content(file: LocalFile, digest: str) -> bool:
    """Whether a document this command wrote for this folder, whose recorded digest is `digest`, holds this file's
    bytes: the two digests are equal as the names carry them (the whole SHA-256 when mirrored, else its first 12 hex
    digits). Anything else, longer or shorter, is other bytes: the document is replaced."""
    return digest == file.digest


def same_bytes(file: LocalFile, digest: str) -> bool:
    """Whether someone else's document (`Other`), whose recorded digest is `digest`, holds this file's bytes: the
    SHA-256 of the file's bytes, whole (Open WebUI's `meta.file_hash`, which its folder comparison checks too) or its
    first 12 hex digits at least. A shorter or missing digest never matches."""
    return len(digest) >= DIGEST_CHARS and file.sha256.startswith(digest)


def plan(
    local: list[LocalFile],
    remote: list[RemoteFile],
    skipped: Sequence[Skipped] = (),
    *,
    others: Sequence[Other] = (),
    delete: bool = False,
    max_delete: int | None = None,
) -> Plan:
    """What to do. `remote`: the documents this command manages for this folder; `others`: the rest of the base (or,
    when Open WebUI's folder comparison alone showed the base holds the folder unchanged, what it found at each
    place: `base.glance`). `delete`: documents of files gone from the folder are removed, within `refusal`'s bound."""
    result = Plan(skipped=list(skipped))
    by_key: dict[str, list[RemoteFile]] = {}
    for entry in remote:
        by_key.setdefault(entry.key, []).append(entry)
    files = _distinct_names(local, result.skipped)
    files = _distinct_bytes(files, by_key, others, result.skipped)
    seen = {file.identity for file in files}
    for file in files:
        held = by_key.get(file.identity, [])
        current = [entry for entry in held if same_content(file, entry.digest)]
        older = [entry for entry in held if not same_content(file, entry.digest)]
        if current:
            result.unchanged.append(file)
            result.stale.extend(older + current[1:])
        elif older:
            result.replace.append((file, older))
        elif _held_by_others(file, others):
            # The same bytes at the same path, put there by someone else: held already. Not uploaded again (Open
            # WebUI would refuse the same text twice), never removed.
            result.unchanged.append(file)
        else:
            result.add.append(file)
    # A document whose file this run skips (or under a folder it could not read) is not gone: the file is there.
    kept = [entry for entry in remote if any(covers(reason, entry) for reason in result.skipped)]
    gone = [entry for key, entries in by_key.items() if key not in seen for entry in entries if entry not in kept]
    # A renamed file: its content is in the base under its old name, and Open WebUI refuses the same text twice in
    # one base, so the old document goes first and the file is added under its new name.
    for file in list(result.add):
        moved = next((entry for entry in gone if same_content(file, entry.digest)), None)
        if moved is not None:
            gone.remove(moved)
            result.renamed.append((file, moved))
            result.add.remove(file)
    result.gone = gone
    # Bytes the base holds already under a document that stays (someone else's, or a skipped file's): Open WebUI
    # would refuse them, so they are not sent; the file's own older versions stay too.
    staying = [Other(entry.key, ((entry.key, entry.digest),)) for entry in kept] + list(others)
    for file in result.add + [file for file, _ in result.replace]:
        holder = _holder(file, staying)
        if holder is not None:
            result.skipped.append(Skipped(file.relative, f"its bytes are already in the base as {holder}", fails=False))
    moved_away = {reason.relative for reason in result.skipped}
    result.add = [file for file in result.add if file.relative not in moved_away]
    result.replace = [(file, old) for file, old in result.replace if file.relative not in moved_away]
    result.removals = result.stale + (result.gone if delete else [])
    if delete:
        empty = not local and not skipped
        result.refusal = refusal(len(result.gone), len(remote), max_delete, empty=empty)
    return result


def refusal(gone: int, held: int, max_delete: int | None, *, empty: bool) -> str | None:
    """Why --delete may not remove `gone` of the `held` documents of this folder, or None."""
    if gone == 0 or (max_delete is not None and gone <= max_delete):
        return None
    if max_delete is not None:
        return f"--delete would remove {gone} of this folder's {held} documents, more than --max-delete {max_delete}"
    if empty:  # an unmounted share or a wrong path looks like a folder whose files are all gone
        return (
            f"the folder holds no file (a share not mounted? a wrong path?), so --delete would remove all {gone} of "
            f"this folder's documents; if that is meant, run again with --max-delete {gone}"
        )
    if gone > DELETE_FEW and gone * 2 > held:
        return (
            f"--delete would remove {gone} of this folder's {held} documents, more than half; if that is meant, run "
            f"again with --max-delete {gone}"
        )
    return None


def covers(skipped: Skipped, entry: RemoteFile) -> bool:
    """Whether the document `entry` may be the skipped file's (or under the skipped folder)."""
    if not skipped.folder:
        return entry.key in (skipped.relative, "".join(key_of(skipped.relative)))
    if not skipped.relative:
        return True
    return entry.key.startswith((f"{skipped.relative}/", key_of(f"{skipped.relative}/x")[0].removesuffix("x")))


def _distinct_names(local: list[LocalFile], skipped: list[Skipped]) -> list[LocalFile]:
    """Files whose names are the same once made safe cannot both be held under it: both are skipped (and so the
    documents under that name stay as they are)."""
    count: dict[str, int] = {}
    for file in local:
        count[file.identity] = count.get(file.identity, 0) + 1
    distinct = []
    for file in local:
        if count[file.identity] == 1:
            distinct.append(file)
        else:
            skipped.append(Skipped(file.relative, "another file's name is the same once made safe; rename one"))
    return distinct


def _distinct_bytes(
    local: list[LocalFile], by_key: dict[str, list[RemoteFile]], others: Sequence[Other], skipped: list[Skipped]
) -> list[LocalFile]:
    """Open WebUI holds a text once per base: of several files with the same bytes (the same whole SHA-256) one is
    synced (the one the base holds already, else the first), the others are skipped without failing, so the folder
    settles."""
    copies: dict[str, list[LocalFile]] = {}
    for file in local:
        copies.setdefault(file.sha256, []).append(file)
    distinct = []
    for file in local:
        group = copies[file.sha256]
        holds = [f for f in group if _is_held(f, by_key, others)]
        keeper = (holds or group)[0]
        if file is keeper:
            distinct.append(file)
        else:
            skipped.append(
                Skipped(file.relative, f"the same bytes as {keeper.relative}, which the base holds once", fails=False)
            )
    return distinct


def _is_held(file: LocalFile, by_key: dict[str, list[RemoteFile]], others: Sequence[Other]) -> bool:
    ours = by_key.get(file.identity, [])
    return any(same_content(file, entry.digest) for entry in ours) or _held_by_others(file, others)


def _held_by_others(file: LocalFile, others: Sequence[Other]) -> bool:
    return any(name in file.names and same_bytes(file, digest) for other in others for name, digest in other.names)


def _holder(file: LocalFile, staying: Sequence[Other]) -> str | None:
    return next((other.label for other in staying for _, digest in other.names if same_bytes(file, digest)), None)
