"""A deterministic, stdlib-only, OpenAI-compatible embedding server for tests.

Run it with ``python -m devtools.fake_embeddings --host 127.0.0.1 --port 0``; with port 0 it picks a free port. The
first line on stdout is always ``PORT=<n>`` (flushed), so a parent process can read where it listens.

Endpoints:

* ``POST /v1/embeddings`` (also ``/embeddings``): OpenAI request shape; ``input`` may be a string, a list of strings,
  a list of token ids or a list of token-id lists (token lists are simply stringified). ``encoding_format: "base64"``
  is honoured (little-endian float32).
* ``GET /v1/models`` (also ``/models``): a one-model list.
* ``GET /health``: ``{"status": true}``.

Vectors are a hashed bag of words: the text is lower-cased and split on non-word characters (Unicode-aware, so
Cyrillic works; CJK characters are also used one by one as tokens), each token is hashed with CRC-32 into ``DIM``
buckets, the counts are L2-normalised, and an empty text gets ``1.0`` in bucket 0. Texts that share words therefore
get a higher cosine similarity than unrelated ones, which makes retrieval rankings meaningful.
"""

from __future__ import annotations

import argparse
import base64
import json
import math
import re
import struct
import sys
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

DIM = 256
MODEL_NAME = "fake-embed"

_WORD_RE = re.compile(r"\w+", re.UNICODE)

# Scripts written without spaces between words: each character also becomes a token.
_CJK_RANGES = (
    (0x2E80, 0x2FDF),  # CJK radicals
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


def _is_cjk(char: str) -> bool:
    code = ord(char)
    return any(low <= code <= high for low, high in _CJK_RANGES)


def tokenize(text: str) -> list[str]:
    """Split ``text`` into lower-case word tokens; CJK characters are additionally emitted one by one."""
    tokens: list[str] = []
    for match in _WORD_RE.finditer(text.lower()):
        word = match.group(0)
        tokens.append(word)
        tokens.extend(char for char in word if _is_cjk(char))
    return tokens


def _bucket(token: str, dim: int) -> int:
    return zlib.crc32(token.encode("utf-8")) % dim


def embed(text: str, dim: int = DIM) -> list[float]:
    """Return the deterministic, L2-normalised hashed bag-of-words vector of ``text``."""
    counts = [0.0] * dim
    for token in tokenize(text):
        counts[_bucket(token, dim)] += 1.0
    norm = math.sqrt(sum(value * value for value in counts))
    if norm == 0.0:
        counts[0] = 1.0
        return counts
    return [value / norm for value in counts]


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


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "FakeEmbeddings/1.0"
    dim: int = DIM

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
        elif path in ("/v1/models", "/models"):
            model = {"id": MODEL_NAME, "object": "model", "created": 0, "owned_by": "devtools"}
            self._send_json(200, {"object": "list", "data": [model]})
        else:
            self._error(404, f"unknown path {path}")

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length > 0 else b""
        if self._path() not in ("/v1/embeddings", "/embeddings"):
            self._error(404, f"unknown path {self._path()}")
            return
        try:
            payload = json.loads(raw.decode("utf-8") or "null")
            body = embeddings_response(payload, self.dim)
        except (ValueError, UnicodeDecodeError) as exc:
            self._error(400, str(exc))
            return
        self._send_json(200, body)


class FakeEmbeddingServer(ThreadingHTTPServer):
    """``ThreadingHTTPServer`` tuned for bursts of concurrent embedding requests."""

    daemon_threads = True
    request_queue_size = 1024
    allow_reuse_address = True


def make_server(host: str = "127.0.0.1", port: int = 0, dim: int = DIM) -> FakeEmbeddingServer:
    """Create (and bind) a server; call ``serve_forever()`` on it, ``shutdown()`` and ``server_close()`` to stop."""
    handler = type("FakeEmbeddingHandler", (_Handler,), {"dim": dim})
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
