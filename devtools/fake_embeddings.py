"""A deterministic, stdlib-only, OpenAI-compatible embedding server for tests.

Run it with ``python -m devtools.fake_embeddings --host 127.0.0.1 --port 0``; with port 0 it picks a free port. The
first line on stdout is always ``PORT=<n>`` (flushed), so a parent process can read where it listens.

Endpoints:

* ``POST /v1/embeddings`` (also ``/embeddings``): OpenAI request shape; ``input`` may be a string, a list of strings,
  a list of token ids or a list of token-id lists (token lists are simply stringified). ``encoding_format: "base64"``
  is honoured (little-endian float32).
* ``POST /v1/rerank`` (also ``/rerank``): the reranking request Open WebUI's external reranker sends (``query``,
  ``documents``); each document's ``relevance_score`` is ``rerank_score``: the share of the query's words (stemmed,
  stop words dropped) that the document contains, in [0, 1].
* ``GET /v1/rerank/requests``: ``{"requests": n}``, how many reranking requests were answered, so a test can tell
  whether Open WebUI's hybrid search called the reranker.
* ``GET /v1/models`` (also ``/models``): a one-model list.
* ``GET /health``: ``{"status": true}``.

A text that contains ``SLOW_MARKER`` is answered ``SLOW_SECONDS`` late (only that request), so a live test can hold
Open WebUI in the middle of indexing one document and check that nothing calls it searchable before it is.

Vectors are hashed word and character n-grams, so that shared words rank sensibly in any script:

* the text is normalised with Unicode NFKC and case folding (and ``ё`` as ``е``); anything that is not a letter, a
  digit or a combining mark separates words;
* very common English and Russian words (``the``, ``are``, ``и``, ``на`` ...) are dropped, unless nothing else is
  left;
* each remaining word gives its crudely stemmed form (English plurals, common Russian endings: ``bananas`` and
  ``banana``, ``Москвы`` and ``Москва`` meet) plus its character 3-grams with the word's edges marked, at a lower
  weight, so other inflections still overlap;
* scripts written without spaces (CJK, kana, Hangul, Thai, Lao, Khmer, Myanmar) give character unigrams (minus a few
  particles such as ``的``) and character bigrams instead;
* each feature's weight is ``1 + ln(count)`` times the weight of its kind; features are hashed with BLAKE2b (stable
  across processes, unlike ``hash()``) into ``DIM`` buckets with a hashed sign, and the vector is L2-normalised. An
  empty text (or one with no letters or digits) gets ``1.0`` in bucket 0.

There is no model and no IDF: texts that share more (and rarer-than-stop-word) words get a higher cosine similarity,
which is what the README's demo searches and the tests need.
"""

from __future__ import annotations

import argparse
import base64
import functools
import hashlib
import json
import math
import struct
import sys
import threading
import time
import unicodedata
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

DIM = 512
SLOW_MARKER = "slowembeddingmarker"
SLOW_SECONDS = 4.0
MODEL_NAME = "fake-embed"

# Weights of the feature kinds (before the sub-linear count weighting and the final L2 normalisation).
WORD_WEIGHT = 1.0  # a stemmed word
TRIGRAM_WEIGHT = 0.25  # each character 3-gram of a word (a 6-letter word has 6 of them)
CHAR_WEIGHT = 0.5  # one character of an unspaced script
BIGRAM_WEIGHT = 1.0  # two adjacent characters of an unspaced script (closest to a word there)

# Scripts written without spaces between words: their characters become unigram and bigram features.
_UNSPACED_RANGES = (
    (0x0E00, 0x0EFF),  # Thai, Lao
    (0x1000, 0x109F),  # Myanmar
    (0x1780, 0x17FF),  # Khmer
    (0x2E80, 0x2FDF),  # CJK radicals
    (0x3005, 0x3007),  # 々 〆 〇
    (0x3040, 0x30FF),  # Hiragana, Katakana
    (0x3100, 0x312F),  # Bopomofo
    (0x3130, 0x318F),  # Hangul compatibility jamo
    (0x31F0, 0x31FF),  # Katakana phonetic extensions
    (0x3400, 0x4DBF),  # CJK extension A
    (0x4E00, 0x9FFF),  # CJK unified ideographs
    (0xAC00, 0xD7AF),  # Hangul syllables
    (0xF900, 0xFAFF),  # CJK compatibility ideographs
    (0x20000, 0x3134F),  # CJK extensions B-G
)


def _words(text: str) -> list[str]:
    return text.split()


# Very common words, dropped unless a text has nothing else (then they are kept, so "the" still has a vector).
STOP_WORDS = frozenset(
    _words(
        """
        a about after all also an and any are as at be been before being both but by can could did do does doing down
        during each for from further had has have having he her here hers him his how i if in into is it its itself
        just me more most my no nor not now of off on once only or other our ours out over own same she should so some
        such than that the their theirs them then there these they this those through to too under until up very was
        we were what when where which while who whom why will with would you your yours
        а б без бы был была были было быть в вам вас во вот все всего вы где да даже для до его ее ей если есть еще же
        за и из или им их к как ко когда кто ли либо мне мы на над не него нее нет ни них но ну о об однако он она они
        оно от по под при про с со так такой там то тоже только тот у уж уже чем что чтобы эта эти это этот я
        """
    )
)
# Particles and other very common characters of unspaced scripts: dropped as unigrams, kept inside bigrams.
STOP_CHARS = frozenset("的了是在和与及之也而或其这那个们有就都着把被给从对以于为のはがをにでともやへかねよ")

_EN_PLURAL = (("sses", "ss"), ("ies", "y"), ("xes", "x"), ("ches", "ch"), ("shes", "sh"), ("zes", "z"))
# Longest first, so "ами" wins over "и".
_RU_ENDINGS = tuple(
    sorted(
        _words(
            """
            иями ями ами ией иях ях ах ого его ому ему ыми ими ой ей ий ый ая яя ое ее ые ие ую юю ом ем ам ям ов ев ия
            ию ии ье ья ью ть а я ы и у ю е о ь й
            """
        ),
        key=len,
        reverse=True,
    )
)


def _is_unspaced(char: str) -> bool:
    code = ord(char)
    return any(low <= code <= high for low, high in _UNSPACED_RANGES)


def normalize(text: str) -> str:
    """NFKC, case folding, and ``ё`` as ``е``."""
    return unicodedata.normalize("NFKC", text).casefold().replace("ё", "е")


def _segments(text: str) -> list[tuple[bool, str]]:
    """Split normalised ``text`` into runs of word characters (letters, digits, marks): ``(unspaced, run)``."""
    segments: list[tuple[bool, str]] = []
    current: list[str] = []
    current_unspaced = False
    for char in normalize(text):
        major = unicodedata.category(char)[0]
        if major not in "LNM":
            kind: bool | None = None  # punctuation, symbols, spaces, controls: a separator
        elif major == "M" and current:
            kind = current_unspaced  # a combining mark stays with its base character
        else:
            kind = _is_unspaced(char)
        if current and kind != current_unspaced:
            segments.append((current_unspaced, "".join(current)))
            current = []
        if kind is not None:
            current_unspaced = kind
            current.append(char)
    if current:
        segments.append((current_unspaced, "".join(current)))
    return segments


def tokenize(text: str) -> list[str]:
    """The normalised words of ``text``, stop words included; unspaced scripts give one token per character."""
    tokens: list[str] = []
    for unspaced, run in _segments(text):
        if unspaced:
            tokens.extend(run)
        else:
            tokens.append(run)
    return tokens


def stem(word: str) -> str:
    """A crude, dictionary-free stem: English plurals and common Russian endings; other words stay as they are."""
    if word.isascii():
        if len(word) > 4:
            for suffix, replacement in _EN_PLURAL:
                if word.endswith(suffix):
                    return word[: -len(suffix)] + replacement
        if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
            return word[:-1]
        return word
    if "а" <= word[-1] <= "я":
        for ending in _RU_ENDINGS:
            if word.endswith(ending) and len(word) - len(ending) >= 3:
                return word[: -len(ending)]
    return word


def features(text: str) -> dict[str, float]:
    """The weighted features of ``text`` (before hashing): ``w:`` stems, ``g:`` 3-grams, ``c:`` and ``b:`` unspaced
    characters and bigrams."""
    segments = _segments(text)
    words = [run for unspaced, run in segments if not unspaced]
    kept = [word for word in words if word not in STOP_WORDS] or words
    counts: Counter[tuple[str, float]] = Counter()
    for word in kept:
        counts["w:" + stem(word), WORD_WEIGHT] += 1
        if len(word) >= 3:
            padded = f"<{word}>"
            for start in range(len(padded) - 2):
                counts["g:" + padded[start : start + 3], TRIGRAM_WEIGHT] += 1
    for unspaced, run in segments:
        if not unspaced:
            continue
        for index, char in enumerate(run):
            if char not in STOP_CHARS or len(run) == 1:
                counts["c:" + char, CHAR_WEIGHT] += 1
            if index + 1 < len(run):
                counts["b:" + run[index : index + 2], BIGRAM_WEIGHT] += 1
    return {feature: weight * (1.0 + math.log(count)) for (feature, weight), count in counts.items()}


@functools.lru_cache(maxsize=1 << 16)
def _slot(feature: str, dim: int) -> tuple[int, float]:
    """The bucket and sign of ``feature``: stable across processes and Python versions."""
    digest = int.from_bytes(hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest(), "big")
    return digest % dim, (1.0 if digest >> 63 else -1.0)


def embed(text: str, dim: int = DIM) -> list[float]:
    """Return the deterministic, L2-normalised hashed n-gram vector of ``text``."""
    vector = [0.0] * dim
    for feature, weight in features(text).items():
        bucket, sign = _slot(feature, dim)
        vector[bucket] += sign * weight
    norm = math.sqrt(sum(value * value for value in vector))
    if norm == 0.0:
        vector = [0.0] * dim
        vector[0] = 1.0
        return vector
    return [value / norm for value in vector]


def _inputs_as_texts(raw: Any) -> list[str]:
    """Normalise the OpenAI ``input`` field to a list of strings."""
    if isinstance(raw, str):
        return [raw]
    if isinstance(raw, list):
        if raw and all(isinstance(item, int) and not isinstance(item, bool) for item in raw):
            return [" ".join(str(item) for item in raw)]  # one token list
        texts: list[str] = []
        for item in raw:
            if isinstance(item, str):
                texts.append(item)
            elif isinstance(item, list):
                texts.append(" ".join(str(part) for part in item))
            else:
                texts.append(str(item))
        return texts
    raise ValueError("'input' must be a string or a list")


def _encode_base64(vector: list[float]) -> str:
    return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode("ascii")


def embeddings_response(payload: Any, dim: int = DIM) -> dict[str, Any]:
    """Build the OpenAI ``/v1/embeddings`` answer for a decoded request body."""
    if not isinstance(payload, dict) or "input" not in payload:
        raise ValueError("request body must be a JSON object with an 'input' field")
    texts = _inputs_as_texts(payload["input"])
    as_base64 = payload.get("encoding_format") == "base64"
    data: list[dict[str, Any]] = []
    total_tokens = 0
    for index, text in enumerate(texts):
        vector = embed(text, dim)
        total_tokens += len(tokenize(text))
        data.append(
            {
                "object": "embedding",
                "index": index,
                "embedding": _encode_base64(vector) if as_base64 else vector,
            }
        )
    model = payload.get("model")
    return {
        "object": "list",
        "data": data,
        "model": model if isinstance(model, str) and model else MODEL_NAME,
        "usage": {"prompt_tokens": total_tokens, "total_tokens": total_tokens},
    }


def rerank_score(query: str, document: str) -> float:
    """The share of the query's words found in the document: deterministic, and on another scale than the cosine
    similarities of the vectors, so a search can tell which of the two ranked it."""
    wanted = _stems(query)
    if not wanted:
        return 0.0
    return round(len(wanted & _stems(document)) / len(wanted), 6)


def _stems(text: str) -> set[str]:
    return {stem(word) for word in tokenize(text) if word not in STOP_WORDS}


def rerank_response(payload: Any) -> dict[str, Any]:
    if not isinstance(payload, dict) or not isinstance(payload.get("query"), str):
        raise ValueError("a rerank request needs a query string")
    documents = payload.get("documents")
    if not isinstance(documents, list) or not all(isinstance(text, str) for text in documents):
        raise ValueError("a rerank request needs a list of document strings")
    scores = [rerank_score(payload["query"], text) for text in documents]
    return {"results": [{"index": i, "relevance_score": score} for i, score in enumerate(scores)]}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "FakeEmbeddings/1.0"
    dim: int = DIM
    slow_seconds: float = SLOW_SECONDS

    def log_message(self, format: str, *args: Any) -> None:
        """Stay quiet: Open WebUI sends many requests."""

    def _send_json(self, status: int, body: Any) -> None:
        encoded = json.dumps(body, separators=(",", ":")).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(encoded)))
        self.end_headers()
        self.wfile.write(encoded)

    def _error(self, status: int, message: str) -> None:
        self._send_json(status, {"error": {"message": message, "type": "invalid_request_error", "code": status}})

    def _path(self) -> str:
        return self.path.split("?", 1)[0].rstrip("/") or "/"

    def do_GET(self) -> None:
        path = self._path()
        if path == "/health":
            self._send_json(200, {"status": True})
        elif path == "/v1/rerank/requests":
            self._send_json(200, {"requests": self.server.reranked})  # type: ignore[attr-defined]
        elif path in ("/v1/models", "/models"):
            model = {"id": MODEL_NAME, "object": "model", "created": 0, "owned_by": "devtools"}
            self._send_json(200, {"object": "list", "data": [model]})
        else:
            self._error(404, f"unknown path {path}")

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length > 0 else b""
        path = self._path()
        if path not in ("/v1/embeddings", "/embeddings", "/v1/rerank", "/rerank"):
            self._error(404, f"unknown path {path}")
            return
        try:
            payload = json.loads(raw.decode("utf-8") or "null")
            if path.endswith("rerank"):
                body = rerank_response(payload)
                self.server.count_rerank()  # type: ignore[attr-defined]
            else:
                body = embeddings_response(payload, self.dim)
                if SLOW_MARKER in raw.decode("utf-8"):
                    time.sleep(self.slow_seconds)
        except (ValueError, UnicodeDecodeError) as exc:
            self._error(400, str(exc))
            return
        self._send_json(200, body)


class FakeEmbeddingServer(ThreadingHTTPServer):
    """``ThreadingHTTPServer`` tuned for bursts of concurrent embedding requests."""

    daemon_threads = True
    request_queue_size = 1024
    allow_reuse_address = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.reranked = 0
        self._counting = threading.Lock()

    def count_rerank(self) -> None:
        with self._counting:
            self.reranked += 1


def make_server(
    host: str = "127.0.0.1", port: int = 0, dim: int = DIM, slow_seconds: float = SLOW_SECONDS
) -> FakeEmbeddingServer:
    """Create (and bind) a server; call ``serve_forever()`` on it, ``shutdown()`` and ``server_close()`` to stop.
    ``slow_seconds``: how late a text with ``SLOW_MARKER`` is answered."""
    handler = type("FakeEmbeddingHandler", (_Handler,), {"dim": dim, "slow_seconds": slow_seconds})
    return FakeEmbeddingServer((host, port), handler)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0] if __doc__ else None)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port (printed as PORT=<n>)")
    parser.add_argument("--dim", type=int, default=DIM, help=f"vector size (default {DIM})")
    args = parser.parse_args(argv)
    server = make_server(args.host, args.port, args.dim)
    print(f"PORT={server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
