"""Unit tests for the deterministic fake embedding server in ``devtools.fake_embeddings``.

The ranking tests use cosine similarity over the demo documents that `./dev setup` seeds (``DEMO_DOCS``), the way
Open WebUI's Chroma collections (``hnsw:space: cosine``) rank them; with a handful of documents that search is exact.
"""

from __future__ import annotations

import base64
import json
import math
import re
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from devtools import fake_embeddings
from devtools.fake_embeddings import DIM, embed
from devtools.openwebui_local import DEMO_DOCS
from tests.support.demo import OTHER_SEARCHES, README_SEARCHES, shown_in_readme

REPO_ROOT = Path(__file__).resolve().parent.parent

# Search examples in the READMEs that are about the reader's own bases, not the demo (no expected document there).
NOT_DEMO_SEARCHES = frozenset(
    {
        "release checklist",
        "on-call hand-over",
        "релиз",
        "how fast must on-call answer a page?",
        "hotel limit per night in Paris",  # the PDF example: its own base, one document
    }
)


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


def norm(vector: list[float]) -> float:
    return math.sqrt(sum(x * x for x in vector))


def ranking(query: str, docs: dict[str, str]) -> list[tuple[str, float]]:
    """``docs``' names by cosine similarity to ``query``, best first."""
    vector = embed(query)
    scored = [(name, cosine(vector, embed(text))) for name, text in docs.items()]
    return sorted(scored, key=lambda item: item[1], reverse=True)


@pytest.mark.parametrize("query", [*README_SEARCHES, *OTHER_SEARCHES])
def test_demo_searches_put_the_expected_document_first(query: str) -> None:
    expected = {**README_SEARCHES, **OTHER_SEARCHES}[query]
    ranked = ranking(query, DEMO_DOCS)
    assert ranked[0][0] == expected, ranked
    assert ranked[0][1] > 0.2, ranked
    assert ranked[0][1] - ranked[1][1] > 0.15, ranked  # a clear winner, not a hash collision


@pytest.mark.parametrize("name", ["README.md", "README.ru.md"])
def test_every_demo_search_in_the_readmes_is_in_the_table(name: str) -> None:
    readme = (REPO_ROOT / name).read_text(encoding="utf-8")
    missing = [query for query in README_SEARCHES if not shown_in_readme(query, readme)]
    assert not missing, f"{name} no longer shows these searches of README_SEARCHES (tests/live/test_live_demo.py)"
    patterns = (
        r'inspect "([^"]+)"',
        r"inspect '([^']+)'",
        r"query='([^']+)'",
        r'query="([^"]+)"',
        r"query=([^\s'\"`]+)",
        r'"query": "([^"]+)"',
    )
    shown = {match for pattern in patterns for match in re.findall(pattern, readme)}
    unknown = shown - NOT_DEMO_SEARCHES - set(README_SEARCHES)
    assert not unknown, f"searches in {name} that README_SEARCHES (tests/live/test_live_demo.py) lacks: {unknown}"


def test_dev_inspect_default_search_is_in_the_table() -> None:
    dev = (REPO_ROOT / "dev").read_text(encoding="utf-8")
    default = re.search(r"query=\$\{2:-([^}]+)\}", dev)
    assert default is not None
    assert default.group(1) in README_SEARCHES


# Small corpora in scripts without spaces, and with inflection: query -> expected first document.
CJK_DOCS = {
    "tokyo": "東京は日本の首都です。人口が多い大都市です。",
    "kyoto": "京都には古いお寺と神社がたくさんあります。",
    "seoul": "서울은 대한민국의 수도이며 가장 큰 도시이다.",
    "shanghai": "上海是中国最大的城市，也是重要的港口。",
    "beijing": "北京是中华人民共和国的首都，有三千多年的历史。",
}
CJK_SEARCHES = {
    "日本の首都": "tokyo",
    "京都のお寺": "kyoto",
    "대한민국 수도": "seoul",
    "中国最大的城市": "shanghai",
    "港口": "shanghai",
    "北京历史": "beijing",
}
MIXED_DOCS = {
    "fruit": "Bananas are long yellow fruits rich in potassium.",
    "rivers": "The Volga is the longest river in Europe.",
    "moscow_ru": "Москва — столица России и крупнейший город страны.",
    "cats_ru": "Кошки спят на диванах, а собаки бегают по улицам.",
    "stopwords": "It is what it is, and that is that: the one and the other, in the end.",
}
MIXED_SEARCHES = {
    "banana": "fruit",  # singular finds the plural
    "yellow BANANAS!": "fruit",  # case and punctuation
    "ｙｅｌｌｏｗ ｂａｎａｎａｓ": "fruit",  # full-width forms (NFKC)
    "rivers of Europe": "rivers",
    "what is the longest river": "rivers",  # stop words do not pull "stopwords" up
    "столицы России": "moscow_ru",  # another case of the same words
    "в Москве": "moscow_ru",
    "кошка и собака": "cats_ru",
    "Кошки": "cats_ru",
}


@pytest.mark.parametrize(("query", "expected"), [*CJK_SEARCHES.items(), *MIXED_SEARCHES.items()])
def test_word_overlap_ranks_first_in_any_script(query: str, expected: str) -> None:
    docs = CJK_DOCS if query in CJK_SEARCHES else MIXED_DOCS
    ranked = ranking(query, docs)
    assert ranked[0][0] == expected, ranked
    assert ranked[0][1] - ranked[1][1] > 0.1, ranked


def test_embedding_is_deterministic() -> None:
    assert embed("Bananas are long yellow fruits.") == embed("Bananas are long yellow fruits.")
    assert len(embed("anything")) == DIM
    assert len(embed("anything", 64)) == 64


def test_embedding_is_the_same_in_other_processes() -> None:
    texts = ["yellow bananas", "Москва столица", "北京是中华人民共和国的首都", ""]
    script = (
        "import json, sys; from devtools.fake_embeddings import embed; "
        "print(json.dumps([embed(t) for t in json.loads(sys.argv[1])]))"
    )
    for seed in ("1", "2"):  # str hashes differ between these processes; the vectors must not
        out = subprocess.run(
            [sys.executable, "-c", script, json.dumps(texts)],
            cwd=REPO_ROOT,
            env={"PYTHONHASHSEED": seed, "PATH": "/usr/bin:/bin"},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert json.loads(out) == [embed(text) for text in texts]


def test_embedding_is_case_and_punctuation_insensitive() -> None:
    assert embed("Hello, World!") == embed("hello world")
    assert embed("Ёлка") == embed("елка")
    assert embed("ＨＥＬＬＯ") == embed("hello")


@pytest.mark.parametrize("text", ["hello world", "", "   ", "...", "a", "the", "Привет, мир", "你好世界", "的"])
def test_embedding_has_unit_norm(text: str) -> None:
    assert norm(embed(text)) == pytest.approx(1.0)


def test_empty_text_uses_bucket_zero() -> None:
    for text in ("", "  ", "...", "—!?"):
        vector = embed(text)
        assert vector[0] == 1.0
        assert sum(vector) == 1.0


def test_a_text_of_stop_words_only_still_has_its_own_vector() -> None:
    assert embed("the") != embed("")
    assert cosine(embed("the"), embed("the")) == pytest.approx(1.0)
    assert cosine(embed("bananas and the"), embed("bananas")) == pytest.approx(1.0)  # dropped beside other words


def test_shared_words_score_higher_than_unrelated_text() -> None:
    query = embed("yellow bananas potassium")
    related = embed("Bananas are long yellow fruits rich in potassium.")
    unrelated = embed("Apples are red and grow on trees in the orchard.")
    assert cosine(query, related) > cosine(query, unrelated)
    assert cosine(query, related) > 0.3


def test_cyrillic_text_gives_meaningful_vectors() -> None:
    query = embed("кошка")
    related = embed("Кошка спит на диване.")
    unrelated = embed("Собака бежит по улице.")
    assert sum(1 for x in related if x) >= 3
    assert cosine(query, related) > cosine(query, unrelated)


def test_cjk_characters_are_tokens_of_their_own() -> None:
    assert fake_embeddings.tokenize("你好世界") == ["你", "好", "世", "界"]
    assert fake_embeddings.tokenize("Hello, 世界!") == ["hello", "世", "界"]
    query = embed("世界")
    related = embed("你好世界")
    unrelated = embed("今天天气很好")
    assert sum(1 for x in related if x) >= 3
    assert cosine(query, related) > cosine(query, unrelated)


def test_combining_marks_stay_inside_words() -> None:
    assert fake_embeddings.tokenize("नमस्ते दुनिया") == ["नमस्ते", "दुनिया"]
    assert ranking("दुनिया", {"hi": "नमस्ते दुनिया", "other": "आज मौसम अच्छा है"})[0][0] == "hi"


def test_crude_stems() -> None:
    stem = fake_embeddings.stem
    assert stem("bananas") == stem("banana") == "banana"
    assert stem("countries") == stem("country") == "country"
    assert stem("boxes") == "box"
    assert stem("glass") == "glass"
    assert stem("bus") == "bus"
    assert stem("москва") == stem("москвы") == stem("москве") == "москв"
    assert stem("столица") == stem("столицы") == "столиц"
    assert stem("дом") == "дом"  # nothing shorter than three letters is left


def test_response_builder_accepts_strings_lists_and_token_lists() -> None:
    single = fake_embeddings.embeddings_response({"input": "one", "model": "m"})
    assert single["model"] == "m"
    assert [item["index"] for item in single["data"]] == [0]
    many = fake_embeddings.embeddings_response({"input": ["one", "two", "three"]})
    assert [item["embedding"] for item in many["data"]] == [embed("one"), embed("two"), embed("three")]
    tokens = fake_embeddings.embeddings_response({"input": [[1, 2], [3]]})
    assert len(tokens["data"]) == 2
    with pytest.raises(ValueError, match="input"):
        fake_embeddings.embeddings_response({"model": "m"})


def test_base64_answers_carry_the_same_vectors() -> None:
    body = fake_embeddings.embeddings_response({"input": ["yellow bananas", ""], "encoding_format": "base64"})
    for item, text in zip(body["data"], ["yellow bananas", ""], strict=True):
        raw = base64.b64decode(item["embedding"])
        assert list(struct.unpack(f"<{DIM}f", raw)) == pytest.approx(embed(text), abs=1e-6)


def test_server_settings_for_bursts_and_dimensions() -> None:
    assert fake_embeddings.FakeEmbeddingServer.daemon_threads is True
    assert fake_embeddings.FakeEmbeddingServer.request_queue_size >= 1024
    server = fake_embeddings.make_server("127.0.0.1", 0, dim=64)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/v1/embeddings"
        body = httpx.post(url, json={"input": ["a", "b c", ""]}, trust_env=False).json()
        assert [len(item["embedding"]) for item in body["data"]] == [64, 64, 64]
        assert body["data"][1]["embedding"] == pytest.approx(embed("b c", 64))
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@pytest.fixture
def server_url() -> Iterator[str]:
    server = fake_embeddings.make_server("127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def test_http_round_trip(server_url: str) -> None:
    with httpx.Client(base_url=server_url, trust_env=False) as http:
        response = http.post("/v1/embeddings", json={"input": ["hello world", "привет"], "model": "fake-embed"})
        assert response.status_code == 200
        body = response.json()
        assert body["object"] == "list"
        assert [item["index"] for item in body["data"]] == [0, 1]
        assert body["data"][0]["embedding"] == pytest.approx(embed("hello world"))
        assert body["data"][1]["object"] == "embedding"
        assert body["usage"]["total_tokens"] == 3

        short = http.post("/embeddings", json={"input": "solo"})
        assert short.json()["data"][0]["embedding"] == pytest.approx(embed("solo"))

        assert http.get("/health").json() == {"status": True}
        assert http.get("/v1/models").json()["data"][0]["id"] == fake_embeddings.MODEL_NAME
        assert http.post("/v1/embeddings", content=b"not json").status_code == 400
        assert http.get("/nope").status_code == 404


def test_the_reranker_scores_query_words_found_and_counts_its_requests(server_url: str) -> None:
    """The reranker Open WebUI's hybrid search calls in the live tests (RAG_RERANKING_ENGINE=external)."""
    with httpx.Client(base_url=server_url, trust_env=False) as http:
        assert http.get("/v1/rerank/requests").json() == {"requests": 0}
        documents = ["Zebras have black stripes.", "Horses run on the savanna.", "nothing here"]
        answer = http.post(
            "/v1/rerank", json={"model": "fake-rerank", "query": "zebra stripes", "documents": documents}
        )
        assert answer.status_code == 200
        assert answer.json() == {
            "results": [
                {"index": 0, "relevance_score": 1.0},
                {"index": 1, "relevance_score": 0.0},
                {"index": 2, "relevance_score": 0.0},
            ]
        }
        assert http.post("/rerank", json={"query": "savanna zebra", "documents": documents[1:2]}).json() == {
            "results": [{"index": 0, "relevance_score": 0.5}]
        }
        assert http.post("/v1/rerank", json={"query": "x"}).status_code == 400
        assert http.get("/v1/rerank/requests").json() == {"requests": 2}


def test_cli_prints_port_first_and_serves() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "devtools.fake_embeddings", "--port", "0"],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert first.startswith("PORT=")
        port = int(first.strip().removeprefix("PORT="))
        response = httpx.post(f"http://127.0.0.1:{port}/v1/embeddings", json={"input": "x"}, trust_env=False)
        assert response.json()["data"][0]["embedding"] == pytest.approx(embed("x"))
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()


def test_a_text_with_the_slow_marker_is_answered_late() -> None:
    """The live tests hold Open WebUI mid-indexing with it."""
    server = fake_embeddings.make_server("127.0.0.1", 0, slow_seconds=1.0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{server.server_address[1]}", trust_env=False) as http:
            started = time.monotonic()
            answer = http.post("/v1/embeddings", json={"input": [f"a {fake_embeddings.SLOW_MARKER} text"]})
            assert time.monotonic() - started >= 1.0
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
    assert answer.json()["data"][0]["embedding"] == pytest.approx(embed(f"a {fake_embeddings.SLOW_MARKER} text"))
