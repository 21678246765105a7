"""A small Google Cloud on loopback for the preflight's tests: the GET endpoints components/checks/preflight.py reads,
answering with the response shapes of each API's discovery document (compute v1 Reservation,
ReservationBlocksGetResponse,
ReservationSubBlocksGetResponse, Region.quotas; orgpolicy v2 Policy; serviceusage v1 BatchGetServicesResponse;
cloudbilling v1 ProjectBillingInfo; cloudresourcemanager v3 Project; storage v1 Bucket) and errors as google.rpc.Status.

Requests arrive as `<root>/<service host>/<path>` (components.checks.preflight.API_ROOT_ENV). `state` is plain data
a test
edits; every request is recorded as (method, path); anything but GET answers 405.
"""

from __future__ import annotations

import copy
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from components.cloud.services import ENGINE_IMAGE_APIS, REQUIRED_APIS
from tests.fakes.loopback_http import send_json

PROJECT = "kimi-test-project"
ZONE = "us-central1-b"
REGION = "us-central1"
RESERVATION = "test-a4x-max-reservation"
BLOCK = "test-block"


def healthy(sub_blocks: tuple[str, ...] = ("rack-a", "rack-b", "rack-c"), hosts: int = 48) -> dict[str, Any]:
    """A project where the gpu3 fixture stack (3 slices of 16 A4X Max nodes) can come up."""
    return {
        "project": {"name": "projects/123456789012", "projectId": PROJECT, "state": "ACTIVE"},
        "billing": {"name": f"projects/{PROJECT}/billingInfo", "projectId": PROJECT,
                    "billingAccountName": "billingAccounts/000000-000000-000000", "billingEnabled": True},
        "services": {api: "ENABLED" for api in REQUIRED_APIS + ENGINE_IMAGE_APIS},
        "reservations": {ZONE: {RESERVATION: {
            "kind": "compute#reservation", "name": RESERVATION, "zone": ZONE, "status": "READY",
            "specificReservationRequired": True,
            "specificReservation": {"count": str(hosts), "inUseCount": "0",
                                    "instanceProperties": {"machineType": "a4x-maxgpu-4g-metal"}},
        }}},
        "blocks": {BLOCK: {"kind": "compute#reservationBlock", "name": BLOCK, "count": hosts, "inUseCount": 0,
                           "status": "READY", "healthInfo": {"healthStatus": "HEALTHY"}}},
        "sub_blocks": {name: {"kind": "compute#reservationSubBlock", "name": name, "count": 18, "inUseCount": 0,
                              "status": "READY", "healthInfo": {"healthStatus": "HEALTHY", "healthyHostCount": 18}}
                       for name in sub_blocks},
        "quotas": [{"metric": "N2_CPUS", "limit": 500.0, "usage": 0.0},
                   {"metric": "C3_CPUS", "limit": 500.0, "usage": 0.0},
                   {"metric": "STATIC_ADDRESSES", "limit": 16.0, "usage": 0.0},
                   {"metric": "HDB_TOTAL_GB", "limit": 100000.0, "usage": 0.0},
                   # Hyperdisk ML: Compute's own quota refusal names HDML_TOTAL_THROUGHPUT; the capacity metric's
                   # name is documented nowhere we could read, so the preflight matches HDML_*_GB and this fake
                   # uses the Hyperdisk Balanced pattern (HDB_TOTAL_GB) for it.
                   {"metric": "HDML_TOTAL_GB", "limit": 4000.0, "usage": 0.0},
                   {"metric": "HDML_TOTAL_THROUGHPUT", "limit": 200000.0, "usage": 0.0},
                   {"metric": "NVIDIA_GB300_GPUS", "limit": 256.0, "usage": 0.0}],
        "policies": {},
        "node_pools": None,  # the stack's cluster: None = none yet (404), else nodePools.list's nodePools
        "buckets": {},
        "errors": {},  # path substring -> [(status, body, headers)], answered by the next matching requests
        "delay": {},  # path substring -> seconds to wait before answering
    }


def node_pool(name: str, machine: str, nodes: int, reservation: str = "") -> dict[str, Any]:
    """A container v1 NodePool as nodePools.list returns it (the fields the preflight reads)."""
    config: dict[str, Any] = {"machineType": machine}
    if reservation:
        config["reservationAffinity"] = {"consumeReservationType": "SPECIFIC_RESERVATION",
                                         "key": "compute.googleapis.com/reservation-name", "values": [reservation]}
    return {"name": name, "initialNodeCount": nodes, "locations": [ZONE], "config": config, "status": "RUNNING"}


def status(code: int, state: str, message: str, reason: str = "", service: str = "") -> dict[str, Any]:
    error: dict[str, Any] = {"code": code, "status": state, "message": message}
    if reason:
        error["details"] = [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": reason,
                             "domain": "googleapis.com", "metadata": {"service": service}}]
    return {"error": error}


class FakeGoogle:
    def __init__(self, state: dict[str, Any] | None = None):
        self.state = state or healthy()
        self.calls: list[tuple[str, str]] = []
        self.billed_to: set[str] = set()
        """x-goog-user-project of every request (the project the call's quota is charged to)."""
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.server.daemon_threads = True
        # A client that timed out (the timeout tests) has closed its socket by the time the answer is written.
        self.server.handle_error = lambda request, client_address: None
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        self._thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.01},
                                        daemon=True)

    def reset(self, state: dict[str, Any] | None = None) -> None:
        self.state = copy.deepcopy(state) if state is not None else healthy()
        self.calls.clear()
        self.billed_to.clear()

    def __enter__(self) -> FakeGoogle:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def answer(self, path: str, query: dict[str, list[str]]) -> tuple[int, dict[str, Any]]:
        s = self.state
        host, _, rest = path.lstrip("/").partition("/")
        parts = rest.split("/")
        not_found = (404, status(404, "NOT_FOUND", f"The resource '{rest}' was not found"))
        if host == "cloudresourcemanager.googleapis.com":
            return 200, s["project"]
        if host == "cloudbilling.googleapis.com":
            return 200, s["billing"]
        if host == "serviceusage.googleapis.com":
            names = query.get("names", [])
            return 200, {"services": [{"name": n, "config": {"name": n.rsplit("/", 1)[-1]},
                                       "state": s["services"].get(n.rsplit("/", 1)[-1], "DISABLED")} for n in names]}
        if host == "orgpolicy.googleapis.com":
            constraint = parts[4].removesuffix(":getEffectivePolicy")
            return 200, s["policies"].get(constraint, {"name": f"projects/{PROJECT}/policies/{constraint}"})
        if host == "container.googleapis.com":
            pools = s["node_pools"]
            return (200, {"nodePools": pools}) if pools is not None else not_found
        if host == "storage.googleapis.com":
            bucket = s["buckets"].get(parts[3])
            return (200, bucket) if isinstance(bucket, dict) else (bucket, status(bucket, "DENIED", "denied")) \
                if bucket else (404, status(404, "NOT_FOUND", "The specified bucket does not exist."))
        if host == "compute.googleapis.com":
            if s["services"].get("compute.googleapis.com") != "ENABLED":
                return 403, status(403, "PERMISSION_DENIED", "Compute Engine API has not been used in project",
                                   "SERVICE_DISABLED", "compute.googleapis.com")
            if parts[4] == "regions":
                return 200, {"kind": "compute#region", "name": parts[5], "quotas": s["quotas"]}
            if parts[4] == "aggregated":
                wanted = query.get("filter", [""])[0].split('"')[1]
                return 200, {"items": {f"zones/{zone}": {"reservations": [r for n, r in found.items() if n == wanted]}
                                       for zone, found in s["reservations"].items()}}
            zone, name = parts[5], parts[7]
            reservation = s["reservations"].get(zone, {}).get(name)
            if reservation is None:
                return not_found
            if len(parts) == 8:
                return 200, reservation
            if len(parts) == 9:
                return 200, {"kind": "compute#reservationBlocksListResponse", "items": list(s["blocks"].values())}
            block = s["blocks"].get(parts[9])
            if block is None:
                return not_found
            if len(parts) == 10:
                return 200, {"resource": block}
            if len(parts) == 11:
                return 200, {"kind": "compute#reservationSubBlocksListResponse",
                             "items": list(s["sub_blocks"].values())}
            sub = s["sub_blocks"].get(parts[11])
            return (200, {"resource": sub}) if sub else not_found
        return not_found


def _handler(fake: FakeGoogle) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # headers and body go out as two writes: no 40 ms delayed-ACK wait each

        def log_message(self, *args: Any) -> None:
            pass

        def _record(self) -> str:
            url = urlsplit(self.path)
            fake.calls.append((self.command, url.path))
            fake.billed_to.add(self.headers.get("x-goog-user-project", ""))
            return url.path

        def do_GET(self) -> None:
            path = self._record()
            query = parse_qs(urlsplit(self.path).query)
            for key, seconds in fake.state["delay"].items():
                if key in path:
                    time.sleep(seconds)
            for key, queued in fake.state["errors"].items():
                if key in path and queued:
                    code, body, headers = queued.pop(0)
                    data = json.dumps(body).encode()
                    self.send_response(code)
                    for name, value in headers.items():
                        self.send_header(name, value)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
            code, body = fake.answer(path, query)
            send_json(self, code, body)

        def _refuse(self) -> None:
            self._record()
            send_json(self, 405, status(405, "METHOD_NOT_ALLOWED", "preflight must only read"))

        do_POST = do_PUT = do_PATCH = do_DELETE = _refuse  # noqa: N815 (http.server's handler names)

    return Handler
