"""`plan()` without HTTP: from a scanned folder and a base's documents, and case by case from files and documents
made in the test (local files, the base's documents, options -> what a run does)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from dataclasses import field as dc_field
from pathlib import Path

import pytest

from openwebui_rag_mcp.sync.names import key_of, remote_files, synced_name
from openwebui_rag_mcp.sync.plan import plan, same_bytes, same_content
from openwebui_rag_mcp.sync.scan import scan
from openwebui_rag_mcp.sync.types import LocalFile, Other, RemoteFile, Skipped
from tests.support.sync import (
    item,
)

pytestmark = pytest.mark.anyio


def test_the_plan(tmp_path: Path) -> None:
    for name, text in {"a.md": "A", "b.md": "B2", "c/d.txt": "D", "new.csv": "x,y"}.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    (tmp_path / ".hidden.md").write_text("no")
    local, refused = scan(tmp_path, 1_000_000)
    by_path = {file.relative: file for file in local}
    assert sorted(by_path) == ["a.md", "b.md", "c/d.txt", "new.csv"]
    old_b = hashlib.sha256(b"B1").hexdigest()[:12]
    remote = remote_files(
        [
            item("f-a", synced_name(by_path["a.md"], "src1")),
            item("f-b-old", f"b~src1~{old_b}.md"),
            item("f-d", synced_name(by_path["c/d.txt"], "src1")),
            item("f-d-older", "c_d~src1~" + "1" * 12 + ".txt"),  # left over by an interrupted replacement
            item("f-gone", f"gone~src1~{'2' * 12}.md"),
            item("f-other", f"gone2~src2~{'3' * 12}.md"),  # another folder's: never touched
            item("f-earlier", f"gone3~{'4' * 12}.md"),  # named like an earlier version's files: never touched
            item("f-mine", "my_own_upload.md"),  # not uploaded by sync: never touched
        ],
        "src1",
    )
    todo = plan(local, remote, refused)
    assert [file.relative for file in todo.add] == ["new.csv"]
    assert [(file.relative, [e.file_id for e in old]) for file, old in todo.replace] == [("b.md", ["f-b-old"])]
    assert sorted(file.relative for file in todo.unchanged) == ["a.md", "c/d.txt"]
    assert [entry.file_id for entry in todo.stale] == ["f-d-older"]
    assert [entry.file_id for entry in todo.gone] == ["f-gone"]


def test_a_renamed_file_is_planned_as_a_move(tmp_path: Path) -> None:
    """Open WebUI refuses the same text twice in one base: a rename removes the old document before adding."""
    (tmp_path / "new-name.md").write_text("same words")
    local, refused = scan(tmp_path, 10**6)
    old_name = synced_name(local[0], "src1").replace("new-name", "old-name")
    todo = plan(local, remote_files([item("f-old", old_name)], "src1"), refused)
    assert todo.add == []
    assert [(file.relative, entry.file_id) for file, entry in todo.renamed] == [("new-name.md", "f-old")]
    assert todo.gone == []


# -- the plan, case by case: local files, the base's documents, options -> what a run does ---------------------------


def local(relative: str, content: str, *, mirrored: bool = True) -> LocalFile:
    """A file as the scan gives it, without a folder on disk."""
    sha256 = hashlib.sha256(content.encode()).hexdigest()
    key, extension = key_of(relative)
    digest = sha256 if mirrored else sha256[:12]
    return LocalFile(relative, key, digest, extension, len(content), mirrored, sha256)


def sha(content: str) -> str:
    return hashlib.sha256(content.encode()).hexdigest()


@dataclass(frozen=True)
class Case:
    local: list[LocalFile]
    remote: list[RemoteFile] = dc_field(default_factory=list)
    skipped: list[Skipped] = dc_field(default_factory=list)
    others: list[Other] = dc_field(default_factory=list)
    delete: bool = False
    max_delete: int | None = None
    # expected: paths (add, unchanged, skipped), (path, [file ids]) (replace), (path, file id) (renamed), file ids
    add: list[str] = dc_field(default_factory=list)
    replace: list[tuple[str, list[str]]] = dc_field(default_factory=list)
    unchanged: list[str] = dc_field(default_factory=list)
    renamed: list[tuple[str, str]] = dc_field(default_factory=list)
    gone: list[str] = dc_field(default_factory=list)
    stale: list[str] = dc_field(default_factory=list)
    removals: list[str] = dc_field(default_factory=list)
    skips: list[str] = dc_field(default_factory=list)  # paths skipped, the scan's included
    refusal: str | None = None  # a part of the refusal's text


NOTES = [local(f"{n}.md", f"# note {n}") for n in range(10)]
CASES: dict[str, Case] = {
    "nothing at all": Case([]),
    "a new file is added": Case([local("a.md", "A")], add=["a.md"]),
    "the same bytes are unchanged": Case(
        [local("a.md", "A")], [RemoteFile("f-a", "a.md", sha("A"))], unchanged=["a.md"]
    ),
    "other bytes replace the old version": Case(
        [local("a.md", "A2")], [RemoteFile("f-a", "a.md", sha("A1"))], replace=[("a.md", ["f-a"])], removals=[]
    ),
    "a document with no digest is replaced, never taken as held": Case(
        [local("a.md", "A")], [RemoteFile("f-a", "a.md", "")], replace=[("a.md", ["f-a"])]
    ),
    "a digest longer than the name's 12 hex digits is other bytes": Case(
        [local("a.md", "A", mirrored=False)], [RemoteFile("f-a", "a.md", sha("A")[:20])], replace=[("a.md", ["f-a"])]
    ),
    "a mirrored document's digest that is part of the SHA-256 is other bytes": Case(
        [local("a.md", "A")], [RemoteFile("f-a", "a.md", sha("A")[:20])], replace=[("a.md", ["f-a"])]
    ),
    "a digest shorter than 12 hex digits never matches": Case(
        [local("a.md", "A")], [RemoteFile("f-a", "a.md", sha("A")[:8])], replace=[("a.md", ["f-a"])]
    ),
    "an older copy beside the current one is stale, and removed": Case(
        [local("a.md", "A")],
        [RemoteFile("f-old", "a.md", sha("A0")), RemoteFile("f-a", "a.md", sha("A"))],
        unchanged=["a.md"],
        stale=["f-old"],
        removals=["f-old"],
    ),
    "the same content under a new name is a rename": Case(
        [local("new.md", "words")], [RemoteFile("f-old", "old.md", sha("words"))], renamed=[("new.md", "f-old")]
    ),
    "the name scheme: 12 hex digits of the SHA-256": Case(
        [local("a.md", "A", mirrored=False), local("b.md", "B2", mirrored=False)],
        [RemoteFile("f-a", "a.md", sha("A")[:12]), RemoteFile("f-b", "b.md", sha("B1")[:12])],
        unchanged=["a.md"],
        replace=[("b.md", ["f-b"])],
    ),
    "a gone file's document is kept without --delete": Case(
        [local("a.md", "A")],
        [RemoteFile("f-a", "a.md", sha("A")), RemoteFile("f-gone", "gone.md", sha("G"))],
        unchanged=["a.md"],
        gone=["f-gone"],
    ),
    "with --delete a few gone files' documents are removed": Case(
        [local("a.md", "A")],
        [RemoteFile("f-a", "a.md", sha("A")), RemoteFile("f-gone", "gone.md", sha("G"))],
        delete=True,
        unchanged=["a.md"],
        gone=["f-gone"],
        removals=["f-gone"],
    ),
    "--delete from a folder with no file is refused": Case(
        [], [RemoteFile("f-a", "a.md", sha("A"))], delete=True, gone=["f-a"], removals=["f-a"], refusal="holds no file"
    ),
    "--max-delete allows what it counts": Case(
        [], [RemoteFile("f-a", "a.md", sha("A"))], delete=True, max_delete=1, gone=["f-a"], removals=["f-a"]
    ),
    "--delete of more than half and more than a few is refused": Case(
        NOTES[7:],
        [RemoteFile(f"f-{n}", f"{n}.md", sha(f"# note {n}")) for n in range(10)],
        delete=True,
        unchanged=["7.md", "8.md", "9.md"],
        gone=[f"f-{n}" for n in range(7)],
        removals=[f"f-{n}" for n in range(7)],
        refusal="more than half",
    ),
    "--max-delete below what would go is refused": Case(
        NOTES[7:],
        [RemoteFile(f"f-{n}", f"{n}.md", sha(f"# note {n}")) for n in range(10)],
        delete=True,
        max_delete=6,
        unchanged=["7.md", "8.md", "9.md"],
        gone=[f"f-{n}" for n in range(7)],
        removals=[f"f-{n}" for n in range(7)],
        refusal="more than --max-delete 6",
    ),
    "a skipped file's document is not gone": Case(
        [local("a.md", "A")],
        [RemoteFile("f-a", "a.md", sha("A")), RemoteFile("f-big", "big.md", sha("B"))],
        [Skipped("big.md", "too large")],
        delete=True,
        unchanged=["a.md"],
        skips=["big.md"],
    ),
    "documents under a folder that could not be read are not gone": Case(
        [local("a.md", "A")],
        [RemoteFile("f-a", "a.md", sha("A")), RemoteFile("f-s", "sub/b.md", sha("B"))],
        [Skipped("sub", "a folder that could not be read", folder=True)],
        delete=True,
        unchanged=["a.md"],
        skips=["sub"],
    ),
    "a skipped file's old bytes are not taken by a new file": Case(
        [local("copy.md", "old")],
        [RemoteFile("f-m", "moved.md", sha("old"))],
        [Skipped("moved.md", "too large")],
        skips=["moved.md", "copy.md"],
    ),
    "someone else's document at the path with the bytes holds the file": Case(
        [local("a.md", "A")], others=[Other("a.md", (("a.md", sha("A")),))], unchanged=["a.md"]
    ),
    "bytes someone else holds elsewhere are not sent": Case(
        [local("a.md", "A")], others=[Other("theirs.md", (("theirs.md", sha("A")),))], skips=["a.md"]
    ),
    "two files with the same bytes: the one held is synced, the other skipped": Case(
        [local("a.md", "same"), local("z.md", "same")],
        [RemoteFile("f-z", "z.md", sha("same"))],
        unchanged=["z.md"],
        skips=["a.md"],
    ),
    "two names made the same by the name scheme are both skipped": Case(
        [local("a b.md", "1", mirrored=False), local("a_b.md", "2", mirrored=False)], skips=["a b.md", "a_b.md"]
    ),
    "what the folder comparison alone found (base.glance): all unchanged, nothing to remove": Case(
        [local("a.md", "A"), local("docs/b.md", "B")],
        others=[Other("a.md", (("a.md", sha("A")),)), Other("docs/b.md", (("docs/b.md", sha("B")),))],
        delete=True,
        unchanged=["a.md", "docs/b.md"],
    ),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_the_plan_decides(case: Case) -> None:
    todo = plan(
        case.local, case.remote, case.skipped, others=case.others, delete=case.delete, max_delete=case.max_delete
    )
    assert sorted(file.relative for file in todo.add) == sorted(case.add)
    assert sorted((file.relative, [e.file_id for e in old]) for file, old in todo.replace) == sorted(case.replace)
    assert sorted(file.relative for file in todo.unchanged) == sorted(case.unchanged)
    assert sorted((file.relative, entry.file_id) for file, entry in todo.renamed) == sorted(case.renamed)
    assert sorted(entry.file_id for entry in todo.gone) == sorted(case.gone)
    assert sorted(entry.file_id for entry in todo.stale) == sorted(case.stale)
    assert sorted(entry.file_id for entry in todo.removals) == sorted(case.removals)
    assert sorted(reason.relative for reason in todo.skipped) == sorted(case.skips)
    if case.refusal is None:
        assert todo.refusal is None
    else:
        assert todo.refusal is not None
        assert case.refusal in todo.refusal


def test_same_content_is_the_digest_as_the_names_carry_it() -> None:
    mirrored, named = local("a.md", "A"), local("a.md", "A", mirrored=False)
    assert same_content(mirrored, sha("A"))
    assert not same_content(mirrored, sha("A")[:12])
    assert same_content(named, sha("A")[:12])
    assert not same_content(named, sha("A"))
    assert not same_content(named, sha("A")[:13])
    assert not same_content(mirrored, "")


def test_same_bytes_is_the_sha256_whole_or_its_first_12_hex_digits() -> None:
    file = local("a.md", "A")
    assert same_bytes(file, sha("A"))
    assert same_bytes(file, sha("A")[:12])
    assert not same_bytes(file, sha("A")[:11])
    assert not same_bytes(file, "")
    assert not same_bytes(file, sha("B"))
