"""HTTP for the smoke check (`tools.live.smoke`): the OpenAI-compatible API and Prometheus scrapes, bounded.

Each request has a total deadline, not only an idle timeout: a timer shuts the socket down when it runs
out, so a server that trickles its headers or body a byte at a time cannot hold the caller (and the
driver's teardown behind it) past it. Only the URL given is contacted: redirects are reported, never
followed, and no proxy settings are read from the environment (`http.client` reads none). Bodies are
read up to MAX_BODY_BYTES.
"""

from __future__ import annotations

import contextlib
import errno
import http.client
import json
import socket
import threading
import time
import urllib.parse
from collections.abc import Callable, Mapping
from typing import Any

from tools.live.core import Deadline
from tools.live.smoke_metrics import MetricsParseError, Sample, parse_prometheus, snippet

RETRY_STATUSES = frozenset({408, 425, 429})  # plus every 5xx
BACKOFF_FACTOR = 2.0
BACKOFF_CAP_SECONDS = 15.0
MAX_BODY_BYTES = 16 * 1024 * 1024
"""A completion of a few tokens is a few KB and an engine's Prometheus page well under a few MB."""


class StepError(Exception):
    """A step failed for good (deadline reached, or an error that retrying cannot fix)."""


class _RetryableError(Exception):
    """One attempt failed in a way that may clear up (connection, timeout, 5xx, malformed JSON)."""


class _FinalError(Exception):
    """One attempt failed in a way retrying cannot fix (e.g. HTTP 400/404, a redirect, a huge body)."""


class _UnreachableError(_RetryableError):
    """Nothing took the connection (refused, no route, name not found): no server is there yet, or at all."""


CONNECT_TIMEOUT_SECONDS = 10.0
"""How long a step retries while nothing accepts its connection before it says so: "is anything there" comes
before "wait for it" (a server that answers, even with 503 while it warms up, gets the step's whole budget)."""
PROGRESS_SECONDS = 30.0
"""A step that keeps retrying says what it waits for at most this often."""


UNREACHABLE_ERRNOS = frozenset({errno.ECONNREFUSED, errno.EHOSTUNREACH, errno.ENETUNREACH, errno.EADDRNOTAVAIL})


def fetch(method: str, url: str, timeout: float, body: bytes | None = None,
          headers: Mapping[str, str] | None = None, max_bytes: int = MAX_BODY_BYTES) -> tuple[int, bytes]:
    """One request, done within `timeout` seconds in total; (status, body) or _RetryableError/_FinalError."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise _FinalError(f"not an http(s) URL: {url}")
    kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    conn = kind(parts.hostname, parts.port, timeout=timeout)
    expired = threading.Event()

    def expire() -> None:
        expired.set()
        if conn.sock is not None:
            with contextlib.suppress(OSError):
                conn.sock.shutdown(socket.SHUT_RDWR)

    timer = threading.Timer(timeout, expire)
    timer.daemon = True
    timer.start()
    try:
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        conn.request(method, target, body=body, headers=dict(headers or {}))
        response = conn.getresponse()
        data = bytearray()
        while chunk := response.read(min(65536, max_bytes + 1 - len(data))):
            data += chunk
            if len(data) > max_bytes:
                raise _FinalError(f"response body larger than {max_bytes} bytes: not read further")
        if expired.is_set():
            raise TimeoutError
        status, location = response.status, response.getheader("Location")
    except (OSError, http.client.HTTPException) as err:
        if expired.is_set() or isinstance(err, TimeoutError):
            raise _RetryableError(f"timed out after {timeout:.3g}s (total time for the request)") from None
        if isinstance(err, (ConnectionRefusedError, socket.gaierror)) or (
                isinstance(err, OSError) and err.errno in UNREACHABLE_ERRNOS):
            cause = snippet(str(err) or type(err).__name__)
            raise _UnreachableError(f"connection failed, nothing accepts it: {cause}") from None
        raise _RetryableError(f"connection failed: {snippet(str(err) or type(err).__name__)}") from None
    finally:
        timer.cancel()
        conn.close()
    if 300 <= status < 400:
        raise _FinalError(f"HTTP {status} redirect to {location or '(no Location)'}: not followed, the smoke check "
                          "contacts only the URLs it was given")
    return status, bytes(data)


def completion_payload(model: str, prompt: str, max_tokens: int) -> dict[str, Any]:
    return {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0}


def chat_payload(model: str, content: str, max_tokens: int) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": content}], "max_tokens": max_tokens,
            "temperature": 0}


def validate_response(body: Any, model: str, chat: bool) -> str:
    """The generated text of a completions (or chat) response; ValueError naming what is wrong."""
    if not isinstance(body, dict):
        raise ValueError(f"response is JSON {type(body).__name__}, not an object")
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices:
        raise ValueError(f"no choices in response: {snippet(json.dumps(body))}")
    first = choices[0] if isinstance(choices[0], dict) else {}
    if chat:
        message = first.get("message") if isinstance(first.get("message"), dict) else {}
        # A reasoning parser (kimi_k2/kimi_k3) moves the first tokens into reasoning_content.
        texts = [message.get(key) for key in ("content", "reasoning_content", "reasoning")]
    else:
        texts = [first.get("text")]
    text = next((t for t in texts if isinstance(t, str) and t), None)
    if text is None:
        raise ValueError(f"empty choices[0].{'message' if chat else 'text'}: {snippet(json.dumps(first))}")
    if body.get("model") != model:
        raise ValueError(f"model is {body.get('model')!r}, expected {model!r}")
    return text


def post_json(url: str, payload: Mapping[str, Any], *, request_timeout: float, deadline_seconds: float,
              backoff_seconds: float, budget: Deadline | None = None, clock: Callable[[], float] = time.monotonic,
              sleep: Callable[[float], None] = time.sleep, connect_timeout: float = CONNECT_TIMEOUT_SECONDS,
              progress: Callable[[str], None] | None = None) -> tuple[dict[str, Any], int]:
    """POST JSON until a 200 with a JSON object arrives or the deadline passes; returns (body, attempts)."""
    return _with_retries(lambda timeout: _post_once(url, payload, timeout), request_timeout=request_timeout,
                         deadline_seconds=deadline_seconds, backoff_seconds=backoff_seconds, budget=budget,
                         clock=clock, sleep=sleep, connect_timeout=connect_timeout, progress=progress,
                         what=f"POST {url}")


def _post_once(url: str, payload: Mapping[str, Any], timeout: float) -> dict[str, Any]:
    status, data = fetch("POST", url, timeout, body=json.dumps(payload).encode(),
                         headers={"Content-Type": "application/json", "Accept": "application/json"})
    text = data.decode("utf-8", "replace")
    if status != 200:
        message = f"HTTP {status}: {snippet(text)}"
        if status >= 500 or status in RETRY_STATUSES:
            raise _RetryableError(message)
        raise _FinalError(message)
    try:
        body = json.loads(text)
    except ValueError:
        raise _RetryableError(f"malformed JSON in HTTP 200 response: {snippet(text)}") from None
    if not isinstance(body, dict):
        raise _RetryableError(f"malformed JSON: expected an object, got {snippet(text)}")
    return body


def scrape(url: str, timeout: float) -> list[Sample]:
    """GET a Prometheus text endpoint once; _RetryableError/_FinalError on failure."""
    status, data = fetch("GET", url, timeout, headers={"Accept": "text/plain"})
    text = data.decode("utf-8", "replace")
    if status != 200:
        raise _RetryableError(f"HTTP {status}: {snippet(text)}")
    try:
        return parse_prometheus(text)
    except MetricsParseError as exc:
        raise _RetryableError(f"not Prometheus text: {exc}") from None


def _with_retries(attempt: Callable[[float], Any], *, request_timeout: float, deadline_seconds: float,
                  backoff_seconds: float, budget: Deadline | None = None, clock: Callable[[], float] = time.monotonic,
                  sleep: Callable[[float], None] = time.sleep, connect_timeout: float | None = None,
                  progress: Callable[[str], None] | None = None, what: str = "the step") -> tuple[Any, int]:
    """Call attempt(timeout) with exponential backoff until it succeeds or the deadline passes.

    The step's deadline gates new attempts; `budget` (the whole run's) also caps each attempt's timeout,
    so no attempt outlives it. While nothing has ever accepted the connection, `connect_timeout` ends the step
    early; `progress` hears what the step waits for every PROGRESS_SECONDS."""
    start = clock()
    deadline = start + deadline_seconds
    delay = backoff_seconds
    attempts = 0
    answered = False
    said = start
    while True:
        timeout = request_timeout
        if budget is not None:
            if budget.passed:
                raise StepError(f"the smoke check's total time ({budget.seconds:g}s) ran out before attempt "
                                f"{attempts + 1}")
            timeout = min(timeout, budget.remaining())
        attempts += 1
        try:
            return attempt(timeout), attempts
        except _FinalError as exc:
            raise StepError(f"{exc} (attempt {attempts}, not retried)") from None
        except _RetryableError as exc:
            now = clock()
            answered = answered or not isinstance(exc, _UnreachableError)
            if not answered and connect_timeout is not None and now - start >= connect_timeout:
                raise StepError(f"{exc}: nothing answered for {now - start:.0f} s ({attempts} attempt(s)); is the "
                                f"endpoint up (the port-forward, the Gateway address)?") from None
            remaining = deadline - now
            if budget is not None:
                remaining = min(remaining, budget.remaining())
            if remaining <= 0:
                raise StepError(f"{exc} (gave up after {attempts} attempt(s), deadline {deadline_seconds:g}s)") \
                    from None
            if progress is not None and now - said >= PROGRESS_SECONDS:
                progress(f"  still waiting for {what}: {exc} (attempt {attempts}, {now - start:.0f} s of "
                         f"{deadline_seconds:g} s)")
                said = now
            wait = min(delay, remaining)
            if not answered and connect_timeout is not None:
                wait = min(wait, max(0.0, start + connect_timeout - now))
            sleep(wait)
            delay = min(delay * BACKOFF_FACTOR, BACKOFF_CAP_SECONDS)
