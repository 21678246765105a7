"""The preflight against hostile answers: partial, paginated, garbage, contradictory, throttled with odd
Retry-After, slow, cut off, another project's, and a Hub that is down. Every answer is checked against the shape
its API documents (components/checks/preflight.py), so each class below ends in its named failed check with one line:
never OK, never a traceback.

The Google side is tests/fakes/fakegoogle.py's loopback fake with raw answers injected (bytes, headers, a cut-off body),
read by the real client (google-auth's AuthorizedSession is a requests.Session); the Hub side is tests/fakes/fakehub.py,
a closed port and a server that never answers, read by huggingface_hub itself.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import requests

from components.checks import preflight
from tests.conftest import fixture_stack
from tests.fakes import fakegoogle
from tests.fakes.fakehub import FakeFile, FakeHub, FakeRepo
from tests.plan.test_engines import K3_CONFIG
from tools.live import preflight as cli

STACK = "gpu3"
REPO = "moonshotai/Kimi-K3.1-Pro"
TOKEN = "hf_preflightTestToken"


class HostileGoogle(fakegoogle.FakeGoogle):
    """The fake, plus raw answers: path substring -> [(status, headers, body bytes, cut)] served in turn (the last
    one again and again); `cut` closes the connection after half the body its Content-Length announces."""

    def __init__(self) -> None:
        super().__init__()
        self.raw: dict[str, list[tuple[int, dict[str, str], bytes, bool]]] = {}
        honest = self.server.RequestHandlerClass
        fake = self

        class Handler(honest):  # type: ignore[misc, valid-type]
            def do_GET(self) -> None:  # noqa: N802 - http.server names it
                for key, answers in fake.raw.items():
                    if key in self.path:
                        self._record()
                        status, headers, body, cut = answers.pop(0) if len(answers) > 1 else answers[0]
                        self.send_response(status)
                        for name, value in headers.items():
                            self.send_header(name, value)
                        self.send_header("Content-Length", str(len(body)))
                        self.end_headers()
                        self.wfile.write(body[:len(body) // 2] if cut else body)
                        if cut:
                            self.wfile.flush()
                            self.connection.shutdown(socket.SHUT_RDWR)
                        return
                super().do_GET()

        self.server.RequestHandlerClass = Handler

    def reset(self, state: dict[str, Any] | None = None) -> None:
        super().reset(state)
        self.raw = {}


def raw(body: Any, status: int = 200, cut: bool = False, **headers: str) -> tuple[int, dict[str, str], bytes, bool]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return status, {"Content-Type": "application/json", **headers}, data, cut


THROTTLED = fakegoogle.status(429, "RESOURCE_EXHAUSTED", "Quota exceeded for quota metric 'Read requests'")


@dataclass
class Case:
    name: str
    check: str
    """The check that must fail."""
    says: str
    """What its line must say."""
    state: Callable[[dict[str, Any]], Any] = lambda state: None
    raw: dict[str, list[tuple[int, dict[str, str], bytes, bool]]] = field(default_factory=dict)
    timeout: float = 10.0
    """The client's limit per request: long enough for any loopback answer on a loaded machine but the slow one."""

    def __str__(self) -> str:
        return self.name


def _pages(state: dict[str, Any], loop: bool) -> dict[str, Any]:
    """reservationSubBlocks.list in pages of one (or a page token that never ends)."""
    subs = list(state["sub_blocks"].values())
    return {"/reservationSubBlocks": [raw({"items": [sub], **({"nextPageToken": "same" if loop else f"p{i + 1}"}
                                                               if loop or i + 1 < len(subs) else {})})
                                      for i, sub in enumerate(subs)]}


CASES = [
    # partial
    Case("half the APIs answered", "apis", "answered 5 of the",
         raw={"services:batchGet": [raw({"services": [{"name": f"projects/p/services/{api}", "state": "ENABLED",
                                                        "config": {"name": api}} for api in
                                                       sorted(fakegoogle.REQUIRED_APIS)[:5]]})]}),
    Case("an empty quota list", "quota", "no quotas", state=lambda s: s.update(quotas=[])),
    Case("no quotas field", "quota", "no quotas",
         raw={"/regions/": [raw({"kind": "compute#region", "name": fakegoogle.REGION})]}),
    Case("a quota entry that is not an object", "quota", "quotas",
         state=lambda s: s["quotas"].insert(0, "N2_CPUS")),
    # paginated
    Case("a page token that never ends", "reservation racks", "pages", state=lambda s: s.update(loop_pages=True)),
    # garbage
    Case("a project answer that is not JSON", "project", "not JSON",
         raw={"cloudresourcemanager": [raw(b"<html>proxy login</html>", **{"Content-Type": "text/html"})]}),
    Case("a project answer that is a JSON list", "project", "not a JSON object",
         raw={"cloudresourcemanager": [raw([1, 2])]}),
    Case("billingEnabled as the string \"false\"", "billing", "billingEnabled",
         state=lambda s: s["billing"].update(billingEnabled="false")),
    Case("a non-numeric reservation count", "reservation", "count",
         state=lambda s: s["reservations"][fakegoogle.ZONE][fakegoogle.RESERVATION]["specificReservation"].update(
             count="eighteen")),
    Case("a non-numeric quota limit", "quota", "limit",
         state=lambda s: s["quotas"][0].update(limit="lots")),
    Case("a NaN quota limit", "quota", "limit", state=lambda s: s["quotas"][0].update(limit="NaN")),
    Case("a non-numeric sub-block count", "reservation sub-block", "count",
         state=lambda s: s["sub_blocks"]["rack-a"].update(count={"n": 18})),
    Case("an API state that is not one of the documented", "apis", "state",
         raw={"services:batchGet": [raw({"services": [{"name": f"projects/p/services/{api}", "state": 1}
                                                      for api in sorted(fakegoogle.REQUIRED_APIS)]})]}),
    Case("org policy rules that are not a list", "org policy", "rules",
         state=lambda s: s["policies"].update({"gcp.resourceLocations": {"spec": {"rules": "allowAll"}}})),
    Case("node pools with a non-numeric node count", "cluster", "initialNodeCount",
         state=lambda s: s.update(node_pools=[{"name": "gpu-0", "initialNodeCount": "many",
                                               "config": {"machineType": "a4x-maxgpu-4g-metal"}}])),
    Case("bucket labels that are not a map", "bucket", "labels",
         state=lambda s: s["buckets"].update({"kimi-test-project-kimi-k3-1-weights": {"labels": ["x"]}})),
    Case("an error body whose details are not a list", "quota", "HTTP 500",
         raw={"/regions/": [raw({"error": {"code": 500, "message": "boom", "details": "x"}}, 500)]}),
    Case("an HTML error page", "quota", "HTTP 502",
         raw={"/regions/": [raw(b"<html>bad gateway</html>", 502, **{"Content-Type": "text/html"})]}),
    # contradictory
    Case("another project's id", "project", "answered for project someone-else",
         state=lambda s: s["project"].update(projectId="someone-else")),
    Case("billing of another project", "billing", "answered for project someone-else",
         state=lambda s: s["billing"].update(projectId="someone-else")),
    Case("another region's quotas", "quota", "answered for region europe-west4",
         raw={"/regions/": [raw({"kind": "compute#region", "name": "europe-west4", "quotas": []})]}),
    Case("a quota metric listed twice with different limits", "quota", "twice",
         state=lambda s: s["quotas"].append({"metric": "N2_CPUS", "limit": 0.0, "usage": 0.0})),
    Case("more hosts in use than the reservation holds", "reservation", "in use",
         state=lambda s: s["reservations"][fakegoogle.ZONE][fakegoogle.RESERVATION]["specificReservation"].update(
             count="48", inUseCount="60")),
    # throttled, with odd Retry-After
    Case("429 with Retry-After: nan", "quota", "throttled",
         raw={"/regions/": [raw(THROTTLED, 429, **{"Retry-After": "nan"})]}),
    Case("503 with Retry-After: -5", "quota", "throttled",
         raw={"/regions/": [raw(THROTTLED, 503, **{"Retry-After": "-5"})]}),
    Case("429 with Retry-After: 1e9", "quota", "throttled",
         raw={"/regions/": [raw(THROTTLED, 429, **{"Retry-After": "1e9"})]}),
    Case("429 with an HTTP-date Retry-After", "quota", "throttled",
         raw={"/regions/": [raw(THROTTLED, 429, **{"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"})]}),
    # slow, cut off
    Case("a slow answer", "quota", "no answer from compute.googleapis.com within 0.4 s",
         state=lambda s: s["delay"].update({"/regions/": 0.8}), timeout=0.4),
    Case("a body cut off before its length", "project", "cut off",
         raw={"cloudresourcemanager": [raw({"projectId": fakegoogle.PROJECT, "state": "ACTIVE",
                                            "name": "projects/1"}, cut=True)]}),
]


@pytest.fixture(scope="module")
def google():
    with HostileGoogle() as fake:
        yield fake


@pytest.fixture(scope="module")
def config():
    return cli.load(fixture_stack(STACK))


def _google_checks(google: HostileGoogle, config: Any, case: Case, sleeps: list[float]) -> list[preflight.Check]:
    google.reset()
    case.state(google.state)
    google.raw.update(case.raw)
    if google.state.pop("loop_pages", None):  # no sub-blocks named: the racks are listed, page after page
        google.raw.update(_pages(google.state, loop=True))
        config = config.model_copy(update={"gpu": config.gpu.model_copy(update={"reservationSubBlocks": []})})
    session = requests.Session()
    try:
        return preflight.check_google(preflight.Google(session, google.url, timeout=case.timeout,
                                                       sleep=sleeps.append),
                                      config, STACK)
    finally:
        session.close()


@pytest.mark.parametrize("case", CASES, ids=str)
def test_a_hostile_google_answer_fails_its_named_check(google, config, case: Case):
    sleeps: list[float] = []
    checks = _google_checks(google, config, case, sleeps)
    failed = [c for c in checks if c.name == case.check and not c.ok]
    assert failed, [c.line() for c in checks]
    assert any(case.says in c.detail for c in failed), [c.line() for c in failed]
    for check in checks:
        assert "\n" not in check.line() and len(check.line()) < 600, check.line()
    assert all(0 <= s <= preflight.RETRY_CAP_S for s in sleeps), sleeps


def test_pages_are_followed(google, config):
    """The positive control of the paging case: sub-blocks listed one per page are all read."""
    google.reset()
    google.raw.update(_pages(google.state, loop=False))
    config = config.model_copy(update={"gpu": config.gpu.model_copy(update={"reservationSubBlocks": []})})
    with requests.Session() as session:
        checks = preflight.check_google(preflight.Google(session, google.url, timeout=10.0), config, STACK)
    racks = [c for c in checks if c.name == "reservation racks"]
    assert racks and all(c.ok for c in racks) and "3 HEALTHY sub-blocks" in racks[0].detail, racks


# --------------------------------------------------------------------------- the Hub
def _closed_port() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


class Silent:
    """Accepts and reads, never answers."""

    def __init__(self) -> None:
        self.stop = threading.Event()

        class Handler(BaseHTTPRequestHandler):
            def do_GET(handler) -> None:  # noqa: N805
                self.stop.wait(10)

            do_HEAD = do_GET  # noqa: N815

            def log_message(handler, *args: Any) -> None:  # noqa: N805
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def close(self) -> None:
        self.stop.set()
        self.server.shutdown()
        self.server.server_close()


def _repo(content: bytes) -> FakeRepo:
    return FakeRepo({"config.json": FakeFile(0, lfs=False, content=content)}, commit="a" * 40, allowed={TOKEN})


HUB_CASES = {
    "the Hub unreachable (connection refused)": ("closed", None, "hub", "could not reach the Hub"),
    "the Hub never answering": ("silent", None, "hub", "could not reach the Hub"),
    "a config.json that is not JSON": ("fake", b"{not json", "checkpoint", "config.json"),
    "a config.json that is a JSON list": ("fake", b"[1, 2]", "checkpoint", "config.json"),
    "a config.json with architectures of the wrong type": ("fake", json.dumps({**K3_CONFIG, "architectures": 7})
                                                           .encode(), "checkpoint", "architectures"),
}


@pytest.mark.parametrize("name", HUB_CASES)
def test_a_hostile_hub_fails_its_named_check(config, tmp_path: Path, monkeypatch, name: str):
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    # Online to loopback whatever the worker imported before (tests/engine_support.py sets HF_HUB_OFFLINE at import,
    # and huggingface_hub reads it once, at its own import).
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    kind, content, check, says = HUB_CASES[name]
    silent = Silent() if kind == "silent" else None
    try:
        if kind == "fake":
            with FakeHub({REPO: _repo(content)}, tokens={TOKEN}) as hub:
                checks = preflight.check_hub(config, TOKEN, hub.url, timeout=1.0)
        else:
            start = time.monotonic()
            checks = preflight.check_hub(config, TOKEN, silent.url if silent else _closed_port(), timeout=0.5)
            assert time.monotonic() - start < 20
    finally:
        if silent:
            silent.close()
    failed = [c for c in checks if c.name == check and not c.ok]
    assert failed and says in failed[0].detail, [c.line() for c in checks]
    assert all("\n" not in c.line() for c in checks)
