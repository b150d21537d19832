"""Unit tests for the deterministic fake embedding server in ``devtools.fake_embeddings``."""

from __future__ import annotations

import math
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from devtools import fake_embeddings
from devtools.fake_embeddings import DIM, embed

REPO_ROOT = Path(__file__).resolve().parent.parent


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


def norm(vector: list[float]) -> float:
    return math.sqrt(sum(x * x for x in vector))


def test_embedding_is_deterministic() -> None:
    assert embed("Bananas are long yellow fruits.") == embed("Bananas are long yellow fruits.")
    assert len(embed("anything")) == DIM


def test_embedding_is_case_and_punctuation_insensitive() -> None:
    assert embed("Hello, World!") == embed("hello world")


@pytest.mark.parametrize("text", ["hello world", "", "   ", "...", "a", "Привет, мир", "你好世界"])
def test_embedding_has_unit_norm(text: str) -> None:
    assert norm(embed(text)) == pytest.approx(1.0)


def test_empty_text_uses_bucket_zero() -> None:
    vector = embed("")
    assert vector[0] == 1.0
    assert sum(vector) == 1.0


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
    assert "你" in fake_embeddings.tokenize("你好世界")
    query = embed("世界")
    related = embed("你好世界")
    unrelated = embed("今天天气很好")
    assert sum(1 for x in related if x) >= 3
    assert cosine(query, related) > cosine(query, unrelated)


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
