"""A small OpenAI-compatible completions server on loopback for running the real inference-perf against.

It streams `max_tokens` words at a fixed pace after a delay that grows with the uncached part of the prompt,
and reports usage like vLLM does (prompt_tokens_details.cached_tokens): the longest prefix a prompt shares with
an earlier one counts as cached. So later conversation turns show prefix-cache hits and a shorter time
to first token, which the report's plots must show. Stdlib only; it stops with `close()`.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.fakes.loopback_http import send_json

PREFILL_S_PER_TOKEN = 0.00002
"""Time to first token per uncached prompt token (a 1,000-token cold prompt: 20 ms)."""
DECODE_S_PER_TOKEN = 0.002
MAX_TOKENS_CAP = 256
"""Bounds each response, whatever a client asks."""


class FakeOpenAI:
    def __init__(self, model: str = "fake-model"):
        self.model = model
        self.requests = 0
        self._seen: list[list[str]] = []
        self._lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05},
                                       daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)

    def cached_prefix(self, words: list[str]) -> int:
        """Longest prefix this prompt shares with an earlier one (what a prefix cache would hold); remembers it."""
        def common(seen: list[str]) -> int:
            n = 0
            for a, b in zip(seen, words, strict=False):
                if a != b:
                    break
                n += 1
            return n

        with self._lock:
            best = max(map(common, self._seen), default=0)
            self._seen.append(words)
            self.requests += 1
        return best

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _json(self, status: int, body: dict) -> None:
                send_json(self, status, body)

            def do_GET(self) -> None:
                if self.path.rstrip("/") == "/v1/models":
                    self._json(200, {"object": "list", "data": [{"id": fake.model, "object": "model"}]})
                else:
                    self._json(404, {"error": {"message": f"no route {self.path}"}})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                if self.path.rstrip("/") != "/v1/completions" or not isinstance(body.get("prompt"), str):
                    self._json(404, {"error": {"message": f"only text completions are served, not {self.path}"}})
                    return
                words = body["prompt"].split()
                cached = fake.cached_prefix(words)
                tokens = min(int(body.get("max_tokens") or 16), MAX_TOKENS_CAP)
                usage = {"prompt_tokens": len(words), "completion_tokens": tokens,
                         "total_tokens": len(words) + tokens, "prompt_tokens_details": {"cached_tokens": cached}}
                time.sleep((len(words) - cached) * PREFILL_S_PER_TOKEN)
                if not body.get("stream"):
                    self._json(200, {"id": "cmpl-fake", "object": "text_completion", "model": fake.model,
                                     "choices": [{"index": 0, "text": " w1" * tokens, "finish_reason": "length"}],
                                     "usage": usage})
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for i in range(tokens):
                    self._event({"id": "cmpl-fake", "object": "text_completion", "model": fake.model,
                                 "choices": [{"index": 0, "text": f" w{i % 50 + 1}",
                                              "finish_reason": "length" if i == tokens - 1 else None}]})
                    time.sleep(DECODE_S_PER_TOKEN)
                if (body.get("stream_options") or {}).get("include_usage"):
                    self._event({"id": "cmpl-fake", "object": "text_completion", "model": fake.model,
                                 "choices": [], "usage": usage})
                self._chunk(b"data: [DONE]\n\n")
                self._chunk(b"")

            def _event(self, obj: dict[str, Any]) -> None:
                self._chunk(b"data: " + json.dumps(obj).encode() + b"\n\n")

            def _chunk(self, data: bytes) -> None:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()

        return Handler
