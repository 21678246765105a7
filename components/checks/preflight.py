"""Know before you spend: read-only questions to Google Cloud and the Hugging Face Hub that say whether this stack can
come up, before `pulumi up` creates anything that bills. `python -m tools preflight` asks all of them; `pulumi up`
asks the Google ones as its first step (`gate`) and stops before registering any resource when one fails.

Plain REST through google-auth's `AuthorizedSession` (google-auth and requests are already installed with
google-cloud-storage): each call is one documented GET of a Google API's REST reference (the URL beside each
check), so no client library per API (compute, quotas, org policy, billing, service usage) joins the
dependencies, and a test can assert that only GETs were made. The Hub is read with huggingface_hub, the copier's
own client. Credentials: GOOGLE_OAUTH_ACCESS_TOKEN when set (the variable the Pulumi Google provider also reads,
https://www.pulumi.com/registry/packages/gcp/installation-configuration/), else Application Default Credentials.

An answer counts only as far as it has the shape its API documents: every field read is checked for its type
(`Answer`), a list must answer what was asked (every API, the asked project, region and zone), pages must end, and
anything else is a failed check saying what was odd, never OK and never a traceback.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Optional

from ..cloud.services import apis_for
from ..config import ConfigError, StackConfig
from ..facts import catalog
from ..plan.naming import label_value

API_ROOT_ENV = "KIMI_GOOGLE_API_ROOT"
"""A root standing in for `https://<service>.googleapis.com` (a recording proxy or a test's fake): requests go to
`<root>/<service host>/<path>`."""
TOKEN_ENV = "GOOGLE_OAUTH_ACCESS_TOKEN"
SCOPE = "https://www.googleapis.com/auth/cloud-platform"
REQUEST_TIMEOUT_S = 30.0
RETRIES = 3
"""Tries per call when Google answers 429 or 503 (throttled), waiting Retry-After (at most RETRY_CAP_S)."""
RETRY_CAP_S = 10.0
OFFLINE_PLAN = False
"""Set by the offline plan (tools/preview/render.py), which runs this program under Pulumi's mock engine with
`preview=False`: the gate never calls the cloud there."""

# Which Google endpoints answer what (REST references).
PROJECTS_GET = "https://cloud.google.com/resource-manager/reference/rest/v3/projects/get"
BILLING_GET = "https://cloud.google.com/billing/docs/reference/rest/v1/projects/getBillingInfo"
SERVICES_BATCH_GET = "https://cloud.google.com/service-usage/docs/reference/rest/v1/services/batchGet"
RESERVATIONS_GET = "https://cloud.google.com/compute/docs/reference/rest/v1/reservations/get"
RESERVATIONS_AGGREGATED = "https://cloud.google.com/compute/docs/reference/rest/v1/reservations/aggregatedList"
BLOCKS_GET = "https://cloud.google.com/compute/docs/reference/rest/v1/reservationBlocks/get"
SUB_BLOCKS_GET = "https://cloud.google.com/compute/docs/reference/rest/v1/reservationSubBlocks/get"
REGIONS_GET = "https://cloud.google.com/compute/docs/reference/rest/v1/regions/get"
EFFECTIVE_POLICY = ("https://cloud.google.com/resource-manager/docs/reference/orgpolicy/rest/v2/projects.policies/"
                    "getEffectivePolicy")
BUCKETS_GET = "https://cloud.google.com/storage/docs/json_api/v1/buckets/get"
SPECIFIC_CONSUMPTION = "https://cloud.google.com/kubernetes-engine/docs/how-to/consuming-reservations"

QUOTAS_PAGE = "https://cloud.google.com/docs/quotas/view-manage"
HDML_QUOTA_PREFIX = "HDML_"
HDML_QUOTA_SOURCE = "https://docs.cloud.google.com/compute/docs/disks/hyperdisks"
"""Hyperdisk ML's regional quotas, as regions.get reports them. Compute names them with this prefix when it refuses
a volume (`Quota 'HDML_TOTAL_THROUGHPUT' exceeded`, the provisioned MiB/s of the region's Hyperdisk ML volumes);
the compute v1 discovery document (revision 20261106, Quota.metric) lists no HDML metric at all, and no Google page
we could read names the capacity one. So the check takes the region's HDML_ metrics as they come: the one ending
in _THROUGHPUT against the volume's provisioned MiB/s, the one ending in _GB against its GiB (the suffixes of the
documented Hyperdisk Balanced pair HDB_TOTAL_THROUGHPUT / HDB_TOTAL_GB), and says so when a region reports none."""
TPU_RESERVED_QUOTA = "https://cloud.google.com/kubernetes-engine/docs/how-to/tpus"
"""GKE, "Ensure sufficient quota for on-demand or Spot VMs": a TPU node pool that consumes a TPU reservation needs
no TPU quota; on-demand and Spot pools need the region's Compute Engine TPU quota (compute.googleapis.com, not
tpu.googleapis.com). regions.get documents no TPU7x metric (compute v1 Quota.metric stops at the v5 ones), so
for tpu.spot the preflight names the chips to check on the Quotas page instead of reading a guessed metric."""

ACCELERATOR_QUOTA_METRIC = {"a4x-max": "NVIDIA_GB300_GPUS", "a4x": "NVIDIA_GB200_GPUS"}
"""regions.get quota metric of each GPU family, by the pattern of the documented ones (compute v1 Quota.metric:
NVIDIA_H100_GPUS, NVIDIA_A100_80GB_GPUS); GB200/GB300 are not in that enum, so a region that reports no such
metric gets a note, not a failure (reservation-bound capacity is charged to quota when the reservation is made)."""


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    """What was found, or (failed) what to change, in one line."""
    step: str = ""
    """Logical name (prefix) of the resource `pulumi up` would fail on, for the cost of a failed up."""

    def line(self) -> str:
        """One line, whatever an answer put into the detail."""
        return f"{'ok  ' if self.ok else 'FAIL'} {self.name}: {' '.join(self.detail.split())}"


class ApiError(Exception):
    def __init__(self, status: int, reason: str, message: str, service: str = ""):
        super().__init__(message)
        self.status, self.reason, self.message, self.service = status, reason, message, service


class Google:
    """GET-only JSON reads with the caller's credentials, bounded: a timeout per call, RETRIES on throttling."""

    def __init__(self, session: Any, root: Optional[str] = None, timeout: float = REQUEST_TIMEOUT_S,
                 sleep: Callable[[float], None] = time.sleep):
        self.session, self.root, self.timeout, self.sleep = session, (root or "").rstrip("/"), timeout, sleep

    @classmethod
    def from_environment(cls, project: str, timeout: float = REQUEST_TIMEOUT_S) -> Google:
        """GOOGLE_OAUTH_ACCESS_TOKEN, else Application Default Credentials (google.auth.default). Requests bill to
        `project` (x-goog-user-project) unless the credentials name a quota project: client-based APIs refuse
        user credentials that name none (https://cloud.google.com/docs/authentication/adc-troubleshooting/user-creds;
        the identity needs serviceusage.services.use on it)."""
        import google.auth
        from google.auth.transport.requests import AuthorizedSession
        from google.oauth2.credentials import Credentials

        token = os.environ.get(TOKEN_ENV)
        credentials = Credentials(token=token) if token else google.auth.default(scopes=[SCOPE])[0]
        if not getattr(credentials, "quota_project_id", None) and hasattr(credentials, "with_quota_project"):
            credentials = credentials.with_quota_project(project)
        return cls(AuthorizedSession(credentials), os.environ.get(API_ROOT_ENV), timeout)

    def get(self, host: str, path: str, params: Optional[dict[str, Any]] = None) -> dict[str, Any]:
        """The JSON object Google answered, or ApiError: no answer, an error status, or an answer that is not a
        JSON object (a proxy's page, a cut-off body)."""
        import google.auth.exceptions
        import requests

        url = f"{self.root}/{host}/{path}" if self.root else f"https://{host}/{path}"
        for attempt in range(RETRIES):
            try:
                response = self.session.get(url, params=params, timeout=self.timeout)
            except requests.Timeout:
                raise ApiError(0, "TIMEOUT", f"no answer from {host} within {self.timeout:g} s") from None
            except requests.exceptions.ChunkedEncodingError as err:
                raise ApiError(0, "UNREACHABLE", f"the answer from {host} was cut off before its end "
                                                 f"({_first_line(err)})") from None
            except requests.RequestException as err:  # refused, reset, TLS, a proxy, a malformed URL
                raise ApiError(0, "UNREACHABLE", f"cannot reach {host}: {_first_line(err)}") from None
            except google.auth.exceptions.GoogleAuthError as err:  # the credentials could not be refreshed
                raise ApiError(0, "CREDENTIALS", f"the credentials were refused before asking {host}: "
                                                 f"{_first_line(err)}") from None
            if response.status_code in (429, 503) and attempt + 1 < RETRIES:
                self.sleep(retry_after(response.headers.get("Retry-After")))
                continue
            if response.status_code >= 400:
                raise _api_error(host, response)
            try:
                answer = response.json()
            except ValueError:
                kind = response.headers.get("Content-Type", "no Content-Type")
                raise ApiError(response.status_code, "UNEXPECTED", f"the answer from {host} is not JSON ({kind}; "
                                                                   "a proxy's page?)") from None
            if not isinstance(answer, dict):
                raise ApiError(response.status_code, "UNEXPECTED",
                               f"the answer from {host} is {_kind(answer)}, not a JSON object")
            return answer
        raise AssertionError("unreachable")


def retry_after(header: Optional[str]) -> float:
    """Seconds to wait for a Retry-After header: its number of seconds within [0, RETRY_CAP_S]; 1 s for anything
    else (an HTTP-date, nan, garbage: RFC 9110 allows a date, which a 10 s cap makes moot)."""
    try:
        wait = float(header) if header is not None else 1.0
    except ValueError:
        wait = 1.0
    return min(max(wait, 0.0), RETRY_CAP_S) if math.isfinite(wait) else 1.0


def _first_line(err: BaseException) -> str:
    text = " ".join(str(err).split()) or type(err).__name__
    return text[:160]


def _kind(value: Any) -> str:
    return {dict: "a JSON object", list: "a JSON list", str: "a string", bool: "a boolean", type(None): "null",
            int: "a number", float: "a number"}.get(type(value), type(value).__name__)


def _shown(value: Any) -> str:
    text = json.dumps(value, default=str) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 60 else f"{text[:45]}...{text[-10:]}"


class Answer:
    """Typed reads of one answer (or part of one) against its documented shape: each raises ApiError
    (UNEXPECTED) naming the field, what it holds and what the API documents. Compute's int64 fields come as
    JSON strings of digits (the JSON mapping of int64), int32 ones as numbers; proto3 omits a false boolean and a
    zero or empty field, so an absent field reads as that default."""

    def __init__(self, value: Any, what: str, source: str = ""):
        if not isinstance(value, dict):
            raise ApiError(200, "UNEXPECTED", f"{what} is {_kind(value)}, not a JSON object{_source(source)}")
        self.value, self.what, self.source = value, what, source

    def _bad(self, key: str, expected: str) -> ApiError:
        value = self.value[key]
        return ApiError(200, "UNEXPECTED", f"{self.what}.{key} is {_kind(value)} {_shown(value)}, not {expected}"
                                           f"{_source(self.source)}")

    def has(self, key: str) -> bool:
        return self.value.get(key) is not None

    def text(self, key: str, default: str = "", allowed: Optional[Iterable[str]] = None) -> str:
        value = self.value.get(key)
        if value is None:
            return default
        if not isinstance(value, str):
            raise self._bad(key, "a string")
        if allowed is not None and value not in allowed:
            raise self._bad(key, f"one of {', '.join(allowed)}")
        return value

    def flag(self, key: str) -> bool:
        value = self.value.get(key, False)
        if not isinstance(value, bool):
            raise self._bad(key, "a boolean")
        return value

    def count(self, key: str) -> int:
        value = self.value.get(key, 0)
        if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 19:
            return int(value)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
        if isinstance(value, float) and value.is_integer() and 0 <= value < 2**63:
            return int(value)
        raise self._bad(key, "a whole number")

    def number(self, key: str) -> float:
        value = self.value.get(key, 0.0)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            return float(value)
        raise self._bad(key, "a finite number")

    def part(self, key: str) -> Answer:
        value = self.value.get(key)
        return Answer({} if value is None else value, f"{self.what}.{key}", self.source)

    def parts(self, key: str) -> list[Answer]:
        value = self.value.get(key)
        if value is None:
            return []
        if not isinstance(value, list):
            raise self._bad(key, "a list")
        return [Answer(item, f"{self.what}.{key}[{i}]", self.source) for i, item in enumerate(value)]

    def texts(self, key: str) -> list[str]:
        value = self.value.get(key)
        if value is None:
            return []
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise self._bad(key, "a list of strings")
        return value

    def labels(self, key: str) -> dict[str, str]:
        value = self.value.get(key)
        if value is None:
            return {}
        if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
            raise self._bad(key, "a map of strings")
        return value

    def items(self, key: str) -> list[tuple[str, Answer]]:
        """A map of objects (aggregatedList's `items`)."""
        value = self.value.get(key)
        if value is None:
            return []
        if not isinstance(value, dict):
            raise self._bad(key, "a map")
        return [(name, Answer(item, f"{self.what}.{key}[{name!r}]", self.source)) for name, item in value.items()]


def _source(source: str) -> str:
    return f" ({source})" if source else ""


def _api_error(host: str, response: Any) -> ApiError:
    """google.rpc.Status as Google's JSON APIs return it (https://cloud.google.com/apis/design/errors); any other
    body (a proxy's page, garbage) leaves the status code and its reason phrase."""
    try:
        body = response.json()
    except ValueError:
        body = {}
    error = body.get("error") if isinstance(body, dict) else None
    error = error if isinstance(error, dict) else {}
    reason, service = str(error.get("status") or response.status_code), ""
    details = error.get("details")
    for detail in details if isinstance(details, list) else []:
        if isinstance(detail, dict) and str(detail.get("@type", "")).endswith("google.rpc.ErrorInfo"):
            reason = str(detail.get("reason") or reason)
            metadata = detail.get("metadata")
            service = str((metadata if isinstance(metadata, dict) else {}).get("service", ""))
    if response.status_code == 429:
        reason = "THROTTLED"
    message = " ".join(str(error.get("message") or response.reason or "").split())[:160]
    return ApiError(response.status_code, reason[:60], message, service[:80])


def explain(err: ApiError, what: str, permission: str, project: str) -> str:
    """One line for a call that got no answer: what to change so it can."""
    if err.reason == "SERVICE_DISABLED":
        service = err.service or what
        return (f"{service} is disabled in project {project}: gcloud services enable {service} --project {project} "
                f"(preflight needs it to read {what})")
    if err.status == 403:
        return f"permission denied reading {what}: the identity needs {permission} on project {project}"
    if err.reason == "THROTTLED" or err.status == 503:
        return f"throttled reading {what} after {RETRIES} tries ({err.status}): run preflight again in a minute"
    if err.reason in ("TIMEOUT", "UNREACHABLE", "CREDENTIALS"):
        return f"could not read {what}: {err.message}"
    if err.reason == "UNEXPECTED":
        return f"could not read {what}: the answer is not what the API documents: {err.message}"
    return f"could not read {what}: HTTP {err.status} {err.reason} {err.message}".rstrip()


# --------------------------------------------------------------------------- what the stack asks for
@dataclass(frozen=True)
class Ask:
    project: str
    region: str
    zone: str
    machine_type: str
    reservation: Optional[str]
    reservation_project: str
    hosts: int
    """Accelerator VMs of the whole stack."""
    block: Optional[str] = None
    sub_blocks: tuple[str, ...] = ()
    slice_hosts: int = 0
    """Hosts one slice needs inside one sub-block (GPU: one NVL72 rack per slice)."""
    accelerators: int = 0
    """GPUs or TPU chips of the whole stack."""
    accelerator_metric: Optional[str] = None
    shielded: bool = True
    spot: bool = False


def ask(cfg: StackConfig) -> Ask:
    if cfg.track == "gpu":
        g = cfg.gpu
        return Ask(cfg.gcp.project, cfg.gcp.region, cfg.gcp.zone, g.spec.machine_type, g.reservation,
                   g.reservationProject or cfg.gcp.project, g.node_count, g.reservationBlock,
                   tuple(g.reservationSubBlocks[:g.slices]), g.slice_nodes, g.node_count * g.spec.gpus_per_node,
                   ACCELERATOR_QUOTA_METRIC.get(g.machine), g.spec.shielded_gke_nodes)
    t = cfg.tpu
    return Ask(cfg.gcp.project, cfg.gcp.region, cfg.gcp.zone, catalog.IRONWOOD.machine_type,
               None if t.spot else t.reservation, t.reservationProject or cfg.gcp.project,
               t.slices * t.hosts_per_slice, slice_hosts=t.hosts_per_slice,
               accelerators=t.slices * t.chips_per_slice, spot=t.spot)


# --------------------------------------------------------------------------- the checks
COMPUTE = "compute.googleapis.com"


def check_project(g: Google, cfg: StackConfig) -> list[Check]:
    p = cfg.gcp.project
    try:
        project = g.get("cloudresourcemanager.googleapis.com", f"v3/projects/{p}")
    except ApiError as err:
        if err.status in (403, 404) and err.reason != "SERVICE_DISABLED":
            return [Check("project", False, f"project {p} is not readable (HTTP {err.status}): check gcp.project and "
                                            "that the identity has resourcemanager.projects.get on it", "apis")]
        return [Check("project", False, explain(err, "the project", "resourcemanager.projects.get", p), "apis")]
    try:
        answer = Answer(project, "project", PROJECTS_GET)
        found, state = answer.text("projectId"), answer.text("state")
    except ApiError as err:
        return [Check("project", False, explain(err, "the project", "resourcemanager.projects.get", p), "apis")]
    if found != p:
        return [Check("project", False, f"projects.get answered for project {found or '(none)'}, not {p}: check "
                                        "gcp.project (or a proxy rewriting answers)", "apis")]
    checks = [Check("project", state == "ACTIVE", f"{p} is {state or 'in an unknown state'}"
                    + ("" if state == "ACTIVE" else ": restore it or set gcp.project"), "apis")]
    try:
        billing = Answer(g.get("cloudbilling.googleapis.com", f"v1/projects/{p}/billingInfo"), "billingInfo",
                         BILLING_GET)
        enabled, owner, account = billing.flag("billingEnabled"), billing.text("projectId"), \
            billing.text("billingAccountName")
    except ApiError as err:
        return [*checks, Check("billing", False, explain(err, "the billing link", "resourcemanager.projects.get "
                                                              "(roles/billing.viewer)", p), "apis")]
    if owner and owner != p:
        return [*checks, Check("billing", False, f"getBillingInfo answered for project {owner}, not {p}: run "
                                                 "preflight again (or check a proxy rewriting answers)", "apis")]
    checks.append(Check("billing", enabled, f"billing account {account}" if enabled
                        else f"project {p} has no billing enabled: gcloud billing projects link {p} "
                             "--billing-account=<ACCOUNT_ID>", "apis"))
    return checks


def check_apis(g: Google, cfg: StackConfig) -> list[Check]:
    p = cfg.gcp.project
    apis = apis_for(cfg)
    names = [f"projects/{p}/services/{api}" for api in apis]
    try:
        answer = g.get("serviceusage.googleapis.com", f"v1/projects/{p}/services:batchGet", {"names": names})
    except ApiError as err:
        return [Check("apis", False, explain(err, "the project's APIs", "serviceusage.services.get", p), "apis")]
    try:
        states = {s.part("config").text("name") or s.text("name").rsplit("/", 1)[-1]:
                  s.text("state", allowed=("STATE_UNSPECIFIED", "DISABLED", "ENABLED"))
                  for s in Answer(answer, "batchGet", SERVICES_BATCH_GET).parts("services")}
    except ApiError as err:
        return [Check("apis", False, explain(err, "the project's APIs", "serviceusage.services.get", p), "apis")]
    missing = [api for api in apis if api not in states]
    if missing:
        return [Check("apis", False, f"services.batchGet answered {len(apis) - len(missing)} of the {len(apis)} APIs "
                                     f"asked (not {', '.join(missing[:3])}{', ...' if len(missing) > 3 else ''}): an "
                                     "API left out is not known to be enabled; run preflight again", "apis")]
    checks = []
    for api in apis:
        state = states.get(api, "DISABLED")
        if state == "ENABLED":
            continue
        if api == COMPUTE:  # reservations and quotas are read through it
            checks.append(Check("apis", False, f"{api} is disabled in project {p}: gcloud services enable {api} "
                                               f"--project {p} (pulumi up enables it too, but preflight reads "
                                               "reservations and quotas through it)", "apis"))
        else:
            checks.append(Check("apis", True, f"{api} is disabled; pulumi up enables it "
                                              f"(components/cloud/services.py)"))
    return checks or [Check("apis", True, f"all {len(apis)} APIs the stack uses are enabled")]


def _reservation_where(g: Google, a: Ask) -> Optional[str]:
    """The zone a reservation of that name is in, from the project's aggregated list, or None."""
    pages = _pages(g, f"compute/v1/projects/{a.reservation_project}/aggregated/reservations",
                   {"filter": f'name = "{a.reservation}"'}, RESERVATIONS_AGGREGATED)
    for page in pages:
        for scope, listed in page.items("items"):
            for reservation in listed.parts("reservations"):
                if reservation.text("name") == a.reservation:
                    return scope.removeprefix("zones/")
    return None


@dataclass(frozen=True)
class Held:
    """What the stack's own cluster already holds (a later `up`): its pools' nodes count as free for it."""
    nodes: dict[str, int]
    """Machine type -> nodes of the cluster's pools."""
    sub_blocks: frozenset[str]
    """Sub-blocks the pools consume (the last part of their reservation affinity)."""
    accelerator_pools: int

    @property
    def any(self) -> bool:
        return bool(self.nodes)


NOTHING_HELD = Held({}, frozenset(), 0)
NODE_POOLS_LIST = "https://cloud.google.com/kubernetes-engine/docs/reference/rest/v1/projects.locations.clusters.nodePools/list"


def held(g: Google, cfg: StackConfig) -> Held:
    """The node pools of the stack's cluster (GKE nodePools.list, NODE_POOLS_LIST), or nothing before the first
    `up`. Nodes = initialNodeCount x locations: the program's pools are fixed-size."""
    try:
        answer = g.get("container.googleapis.com", f"v1/projects/{cfg.gcp.project}/locations/{cfg.gcp.region}/"
                                                   f"clusters/{cfg.cluster_name}/nodePools")
    except ApiError as err:
        if err.status == 404 or err.reason == "SERVICE_DISABLED":
            return NOTHING_HELD
        raise
    machine = ask(cfg).machine_type
    nodes: dict[str, int] = {}
    sub_blocks: set[str] = set()
    pools = 0
    for pool in Answer(answer, "nodePools.list", NODE_POOLS_LIST).parts("nodePools"):
        config = pool.part("config")
        count = pool.count("initialNodeCount") * max(1, len(pool.texts("locations")))
        kind = config.text("machineType")
        nodes[kind] = nodes.get(kind, 0) + count
        pools += kind == machine
        for value in config.part("reservationAffinity").texts("values"):
            if "/reservationSubBlocks/" in value:
                sub_blocks.add(value.rsplit("/", 1)[-1])
    return Held(nodes, frozenset(sub_blocks), pools)


def check_reservation(g: Google, cfg: StackConfig, mine: Held = NOTHING_HELD) -> list[Check]:
    a = ask(cfg)
    key = f"{cfg.track}.reservation"
    pool = f"{cfg.track}-0"  # the first accelerator pool (components/cloud/nodepools.py slice_pool_name)
    if not a.reservation:
        return [Check("reservation", True, "tpu.spot: Spot capacity, no reservation to check")]
    base = f"compute/v1/projects/{a.reservation_project}/zones/{a.zone}/reservations/{a.reservation}"
    try:
        reservation = g.get(COMPUTE, base)
    except ApiError as err:
        if err.status != 404:
            return [Check("reservation", False, explain(err, f"reservation {a.reservation}", "compute.reservations.get",
                                                        a.reservation_project), pool)]
        try:
            where = _reservation_where(g, a)
        except ApiError as err2:
            return [Check("reservation", False, explain(err2, "the project's reservations",
                                                        "compute.reservations.list", a.reservation_project), pool)]
        if where:
            return [Check("reservation", False, f"reservation {a.reservation} is in zone {where}, not the serving zone "
                                                f"{a.zone}: pulumi config set gcp.zone {where}", pool)]
        return [Check("reservation", False, f"no reservation {a.reservation} in project {a.reservation_project}: "
                                            f"check {key} and {cfg.track}.reservationProject", pool)]
    try:
        answer = Answer(reservation, "reservation", RESERVATIONS_GET)
        spec = answer.part("specificReservation")
        machine = spec.part("instanceProperties").text("machineType")
        count, used = spec.count("count"), spec.count("inUseCount")
        status, specific = answer.text("status"), answer.flag("specificReservationRequired")
        zone = answer.text("zone").rsplit("/", 1)[-1]
        shared = _shared_with(answer, a.project)
    except ApiError as err:
        return [Check("reservation", False, explain(err, f"reservation {a.reservation}", "compute.reservations.get",
                                                    a.reservation_project), pool)]
    if zone and zone != a.zone:
        return [Check("reservation", False, f"reservations.get answered for zone {zone}, not {a.zone}: run preflight "
                                            "again (or check a proxy rewriting answers)", pool)]
    if used > count:
        return [Check("reservation", False, f"reservation {a.reservation} reports {used} hosts in use of {count}: the "
                                            "answer contradicts itself; run preflight again", pool)]
    free = count - used + mine.nodes.get(a.machine_type, 0)
    problems = []
    if status != "READY":
        problems.append(f"reservation {a.reservation} is {status or 'in no state'}, not READY: wait for it or ask "
                        "your account team")
    if not specific:
        problems.append(f"reservation {a.reservation} is not SPECIFIC (specificReservationRequired false); GKE "
                        f"consumes it by name only when it is ({SPECIFIC_CONSUMPTION}): recreate it with "
                        "--require-specific-reservation")
    if machine and machine != a.machine_type:
        problems.append(f"reservation {a.reservation} holds {machine}, the stack asks for {a.machine_type}: set "
                        f"{key} to a reservation of {a.machine_type}")
    if a.reservation_project != a.project and not shared:
        problems.append(f"reservation {a.reservation} of {a.reservation_project} is not shared with {a.project}: "
                        "share it (shareSettings SPECIFIC_PROJECTS) with this project")
    if free < a.hosts:
        slices = free // a.slice_hosts if a.slice_hosts else 0
        problems.append(f"reservation {a.reservation} has {free} free hosts of {count}, the stack asks for {a.hosts}: "
                        f"set {cfg.track}.slices to {slices} or free {a.hosts - free} hosts")
    if problems:
        return [Check("reservation", False, p, pool) for p in problems]
    own = f" (the stack's pools hold {mine.nodes[a.machine_type]})" if mine.nodes.get(a.machine_type) else ""
    checks = [Check("reservation", True, f"{a.reservation} in {a.zone}: SPECIFIC, {machine or a.machine_type}, "
                                         f"{free} of {count} hosts free{own}, {a.hosts} asked")]
    if cfg.track == "gpu" and a.sub_blocks:
        checks += _check_blocks(g, a, base, pool, mine)
    elif cfg.track == "gpu":
        checks += _check_racks(g, a, base, cfg.gpu.slices - mine.accelerator_pools)
    return checks


MAX_PAGES = 20
"""Pages of a list call read at most (500 items each by default): a bound, not a limit any reservation reaches."""


def _pages(g: Google, path: str, params: Optional[dict[str, Any]], source: str) -> list[Answer]:
    """Every page of a Compute list call; ApiError when the pages do not end within MAX_PAGES or a token repeats
    (a partial list is never read as the whole)."""
    pages: list[Answer] = []
    token, seen = "", set()
    for _ in range(MAX_PAGES):
        page = Answer(g.get(COMPUTE, path, {**(params or {}), **({"pageToken": token} if token else {})}),
                      path.rsplit("/", 1)[-1], source)
        pages.append(page)
        token = page.text("nextPageToken")
        if not token:
            return pages
        if token in seen:
            raise ApiError(200, "UNEXPECTED", f"the list's page token {_shown(token)} came back again: the pages "
                                              f"never end ({source})")
        seen.add(token)
    raise ApiError(200, "UNEXPECTED", f"the list has more than {MAX_PAGES} pages, more than any reservation holds: "
                                      f"not read as a partial list ({source})")


def _list(g: Google, path: str, source: str = RESERVATIONS_GET) -> list[Answer]:
    return [item for page in _pages(g, path, None, source) for item in page.parts("items")]


def _check_racks(g: Google, a: Ask, base: str, slices: int) -> list[Check]:
    """No sub-blocks named: Compute Engine picks a rack per slice, so the reservation (or the named block) must hold
    `slices` healthy sub-blocks with a slice's hosts free each (reservationBlocks.list, reservationSubBlocks.list)."""
    try:
        blocks = [a.block] if a.block else [b.text("name") for b in _list(g, f"{base}/reservationBlocks",
                                                                          "https://cloud.google.com/compute/docs/"
                                                                          "reference/rest/v1/reservationBlocks/list")]
        racks = [(block, sub) for block in blocks
                 for sub in _list(g, f"{base}/reservationBlocks/{block}/reservationSubBlocks",
                                  "https://cloud.google.com/compute/docs/reference/rest/v1/reservationSubBlocks/list")]
        usable = [sub for _, sub in racks if sub.part("healthInfo").text("healthStatus") == "HEALTHY"
                  and sub.count("count") - sub.count("inUseCount") >= a.slice_hosts]
    except ApiError as err:
        if err.status == 404 and a.block:
            return [Check("reservation block", False, f"reservation {a.reservation} has no block {a.block}: check "
                                                      "gpu.reservationBlock", "gpu-0")]
        return [Check("reservation racks", False, explain(err, f"the blocks of {a.reservation}",
                                                          "compute.reservations.get", a.reservation_project), "gpu-0")]
    if not racks:
        return [Check("reservation racks", True, f"{a.reservation} lists no blocks or sub-blocks (not a dense "
                                                 "deployment): free hosts checked above")]
    if slices <= 0:
        return [Check("reservation racks", True, "every slice's pool already holds its rack")]
    if len(usable) < slices:
        change = f"set gpu.slices to {len(usable)}" if usable else "wait for a rack or ask your account team"
        return [Check("reservation racks", False,
                      f"{len(usable)} of the {len(racks)} sub-blocks of {a.reservation} are HEALTHY with "
                      f"{a.slice_hosts} free hosts, gpu.slices = {slices} needs {slices}: {change}",
                      f"gpu-{len(usable)}")]
    return [Check("reservation racks", True, f"{len(usable)} HEALTHY sub-blocks with {a.slice_hosts} free hosts, "
                                             f"{slices} needed")]


def _shared_with(reservation: Answer, project: str) -> bool:
    share = reservation.part("shareSettings")
    kind = share.text("shareType")
    if kind == "ORGANIZATION":
        return True
    return kind == "SPECIFIC_PROJECTS" and project in [name for name, _ in share.items("projectMap")]


def _check_blocks(g: Google, a: Ask, base: str, pool: str, mine: Held = NOTHING_HELD) -> list[Check]:
    """The named block, and per named sub-block (one NVL72 rack per slice) its health and free hosts."""
    try:
        block = g.get(COMPUTE, f"{base}/reservationBlocks/{a.block}")
    except ApiError as err:
        if err.status == 404:
            return [Check("reservation block", False, f"reservation {a.reservation} has no block {a.block}: check "
                                                      "gpu.reservationBlock", pool)]
        return [Check("reservation block", False, explain(err, f"block {a.block}", "compute.reservations.get",
                                                          a.reservation_project), pool)]
    try:  # reservationBlocks.get wraps it: {"resource": ReservationBlock}
        block_answer = Answer(block, "reservationBlocks.get", BLOCKS_GET)
        block_answer = block_answer.part("resource") if block_answer.has("resource") else block_answer
        block_state = f"{block_answer.text('status')} {block_answer.part('healthInfo').text('healthStatus')}"
    except ApiError as err:
        return [Check("reservation block", False, explain(err, f"block {a.block}", "compute.reservations.get",
                                                          a.reservation_project), pool)]
    checks = []
    for index, name in enumerate(a.sub_blocks):
        try:
            sub = g.get(COMPUTE, f"{base}/reservationBlocks/{a.block}/reservationSubBlocks/{name}")
        except ApiError as err:
            reason = (f"block {a.block} has no sub-block {name}: fix gpu.reservationSubBlocks[{index}]"
                      if err.status == 404 else explain(err, f"sub-block {name}", "compute.reservations.get",
                                                        a.reservation_project))
            checks.append(Check("reservation sub-block", False, reason, f"gpu-{index}"))
            continue
        try:
            answer = Answer(sub, "reservationSubBlocks.get", SUB_BLOCKS_GET)
            answer = answer.part("resource") if answer.has("resource") else answer
            health = answer.part("healthInfo").text("healthStatus", "HEALTH_STATUS_UNSPECIFIED")
            count, used = answer.count("count"), answer.count("inUseCount")
        except ApiError as err:
            checks.append(Check("reservation sub-block", False, explain(err, f"sub-block {name}",
                                                                        "compute.reservations.get",
                                                                        a.reservation_project), f"gpu-{index}"))
            continue
        free = count - used
        if health != "HEALTHY":
            checks.append(Check("reservation sub-block", False,
                                f"sub-block {name} (slice {index}) is {health}: name a healthy sub-block in "
                                f"gpu.reservationSubBlocks[{index}]", f"gpu-{index}"))
        elif free < a.slice_hosts and name not in mine.sub_blocks:
            checks.append(Check("reservation sub-block", False,
                                f"sub-block {name} (slice {index}) has {free} free hosts, a slice needs "
                                f"{a.slice_hosts}: name another sub-block in gpu.reservationSubBlocks[{index}]",
                                f"gpu-{index}"))
        else:
            checks.append(Check("reservation sub-block", True, f"{name}: HEALTHY, {free} free, slice {index} needs "
                                                               f"{a.slice_hosts}"))
    return checks or [Check("reservation block", True, f"{a.block}: {block_state}")]


def quota_demand(cfg: StackConfig) -> list[tuple[str, float, str, str]]:
    """(regions.get metric, amount the stack adds, what drives it, step that would fail) per regional quota."""
    from ..facts.machines import MACHINES
    from ..plan.staging import MACHINE_TYPE as STAGING_MACHINE
    from ..plan.staging import staging_addresses, staging_pods

    cpus: dict[str, list[float]] = {}
    for machine, count in ((cfg.systemPool.machineType, cfg.systemPool.nodeCount),
                           (cfg.transferPool.machineType, cfg.transferPool.nodeCount),
                           (STAGING_MACHINE, staging_pods(cfg))):
        metric = f"{machine.split('-')[0].upper()}_CPUS"
        cpus.setdefault(metric, []).append(MACHINES[machine].vcpus * count)
    demand = [(metric, sum(v), "the CPU pools (systemPool, transferPool, staging)", "cpu")
              for metric, v in cpus.items()]
    demand.append(("HDB_TOTAL_GB", boot_disks_gb(cfg), f"the hyperdisk-balanced boot disks "
                                                       f"({catalog.BOOT_DISK_GB_ACCELERATOR} GB per accelerator node, "
                                                       f"{cfg.track}.slices)", f"{cfg.track}-0"))
    demand.append(("STATIC_ADDRESSES", staging_addresses(cfg), "Cloud NAT: one static address per staging VM "
                                                               "(storage.stagingPods)", "net-staging-ip"))
    a = ask(cfg)
    if cfg.track == "gpu" and a.accelerator_metric and a.accelerators:
        demand.append((a.accelerator_metric, a.accelerators, "gpu.slices", "gpu-0"))
    return demand


HYPERDISK_BALANCED = "hyperdisk-balanced"


def boot_disk_gb(machine: str) -> int:
    """GB of hyperdisk-balanced boot disk one node of `machine` adds (components/cloud/nodepools.py), HDB_TOTAL_GB in
    compute v1 Quota.metric; pd-balanced CPU boot disks count elsewhere and are not asked."""
    from ..facts.machines import MACHINES, cpu_series

    if machine in (catalog.IRONWOOD.machine_type,) or (machine in MACHINES and MACHINES[machine].extended):
        return catalog.BOOT_DISK_GB_ACCELERATOR
    series = cpu_series(machine)
    return catalog.BOOT_DISK_GB_CPU if series is not None and series.boot_disk == HYPERDISK_BALANCED else 0


def boot_disks_gb(cfg: StackConfig) -> int:
    from ..plan.staging import MACHINE_TYPE as STAGING_MACHINE
    from ..plan.staging import staging_pods

    a = ask(cfg)
    pools = ((cfg.systemPool.machineType, cfg.systemPool.nodeCount),
             (cfg.transferPool.machineType, cfg.transferPool.nodeCount), (STAGING_MACHINE, staging_pods(cfg)))
    return a.hosts * catalog.BOOT_DISK_GB_ACCELERATOR + sum(boot_disk_gb(m) * n for m, n in pools)


@dataclass(frozen=True)
class HdmlDemand:
    gib: int
    mibps: int


def hdml_demand(cfg: StackConfig) -> HdmlDemand:
    """The stack's one Hyperdisk ML volume: storage.volumeSizeGi and its provisioned throughput
    (components/plan/capacity.py weight_staging, what stacks/base.py gives the StorageClass)."""
    from ..plan.capacity import weight_staging

    staging = weight_staging(cfg)
    return HdmlDemand(staging.volume_gib, staging.throughput_mibps)


def _held_hdml(cfg: StackConfig, mine: Held) -> HdmlDemand:
    """What the stack's existing Hyperdisk ML volume already holds of the quotas: the throughput and size the plan
    gives the slice count its cluster runs now (a scale-up raises the volume's throughput in place, so only the
    rise must be free; components/weights/volume.py), or nothing before the first up."""
    if not mine.any or mine.accelerator_pools <= 0:
        return HdmlDemand(0, 0)
    section = cfg.gpu if cfg.track == "gpu" else cfg.tpu
    running = cfg.model_copy(update={cfg.track: section.model_copy(update={"slices": mine.accelerator_pools})})
    return hdml_demand(running)


HDML_STEP = "weights-volume"
"""Logical name prefix of the Hyperdisk ML volume's resources (stacks/base.py): where `up` would fail on a short
Hyperdisk ML quota."""


def check_quotas(g: Google, cfg: StackConfig, mine: Held = NOTHING_HELD) -> list[Check]:
    p, region = cfg.gcp.project, cfg.gcp.region
    try:
        answer = g.get(COMPUTE, f"compute/v1/projects/{p}/regions/{region}")
    except ApiError as err:
        return [Check("quota", False, explain(err, f"region {region}'s quotas", "compute.regions.get", p), "cpu")]
    try:
        quotas = _quotas(Answer(answer, "region", REGIONS_GET), region)
    except ApiError as err:
        return [Check("quota", False, explain(err, f"region {region}'s quotas", "compute.regions.get", p), "cpu")]
    credit = _held_quota(cfg, mine)
    checks = []
    for metric, amount, driver, step in quota_demand(cfg) + _hdml_rows(cfg, quotas, region, checks):
        quota = quotas.get(metric)
        if quota is None:
            checks.append(Check("quota", True, f"{metric}: not reported by regions.get in {region}; check it on "
                                               "the Quotas page"))
            continue
        held_volume = 0.0
        if step == HDML_STEP:  # a later up: the stack's volume has what its running slices were given
            held = _held_hdml(cfg, mine)
            held_volume = held.mibps if metric.endswith("_THROUGHPUT") else held.gib
        free = quota[0] - quota[1] + credit.get(metric, 0) + held_volume
        if free < amount:
            checks.append(Check("quota", False, f"{metric} in {region}: {free:g} free of {quota[0]:g}, "
                                                f"the stack needs {amount:g} for {driver}: request more "
                                                "(https://cloud.google.com/docs/quotas/view-manage) or lower it",
                                step))
        else:
            checks.append(Check("quota", True, f"{metric} in {region}: {free:g} free, {amount:g} needed"))
    checks += _nat_ports(cfg) + _tpu_quota(cfg)
    return checks


def _quotas(region_answer: Answer, region: str) -> dict[str, tuple[float, float]]:
    """regions.get's quotas as metric -> (limit, usage): the asked region's, at least one, each metric once."""
    name = region_answer.text("name")
    if name != region:
        raise ApiError(200, "UNEXPECTED", f"regions.get answered for region {name or '(none)'}, not {region}")
    quotas: dict[str, tuple[float, float]] = {}
    for quota in region_answer.parts("quotas"):
        metric, values = quota.text("metric"), (quota.number("limit"), quota.number("usage"))
        if metric in quotas and quotas[metric] != values:
            raise ApiError(200, "UNEXPECTED", f"regions.get lists {metric} twice, with limits {quotas[metric][0]:g} "
                                              f"and {values[0]:g}")
        quotas[metric] = values
    if not quotas:
        raise ApiError(200, "UNEXPECTED", f"regions.get answered no quotas for {region} (every region has some)")
    return quotas


def _hdml_rows(cfg: StackConfig, quotas: dict[str, Any], region: str,
               notes: list[Check]) -> list[tuple[str, float, str, str]]:
    """Quota rows for the Hyperdisk ML metrics the region reports (HDML_QUOTA_SOURCE), or a note per one it
    does not."""
    want = hdml_demand(cfg)
    metrics = [m for m in quotas if str(m).startswith(HDML_QUOTA_PREFIX)]
    rows: list[tuple[str, float, str, str]] = []
    for suffix, amount, what, key in (("_THROUGHPUT", want.mibps, "MiB/s", "storage.throughputMiBps"),
                                      ("_GB", want.gib, "GiB", "storage.volumeSizeGi")):
        found = [m for m in metrics if m.endswith(suffix)]
        if found:
            rows += [(m, amount, f"the Hyperdisk ML volume ({amount} {what}, {key})", HDML_STEP) for m in found]
        else:
            notes.append(Check("quota", True, f"Hyperdisk ML {what}: regions.get reports no {HDML_QUOTA_PREFIX}*"
                                              f"{suffix} metric in {region}; check {amount} {what} on the Quotas "
                                              f"page ({QUOTAS_PAGE})"))
    return rows


def _nat_ports(cfg: StackConfig) -> list[Check]:
    """Cloud NAT of the staging subnet: each staging VM reserves NAT_MIN_PORTS_PER_VM_ONE_ADDRESS ports of the 64,512
    one address has (components/plan/limits.py), so the addresses must cover VMs x ports; the cluster's NAT allocates
    its addresses itself (AUTO_ONLY)."""
    from ..plan.limits import NAT_PORTS_PER_ADDRESS
    from ..plan.staging import staging_addresses, staging_pods

    vms, addresses = staging_pods(cfg), staging_addresses(cfg)
    ports = vms * catalog.NAT_MIN_PORTS_PER_VM_ONE_ADDRESS
    if ports > addresses * NAT_PORTS_PER_ADDRESS:
        fit = addresses * NAT_PORTS_PER_ADDRESS // catalog.NAT_MIN_PORTS_PER_VM_ONE_ADDRESS
        return [Check("nat", False, f"the staging NAT needs {vms} VMs x {catalog.NAT_MIN_PORTS_PER_VM_ONE_ADDRESS} "
                                    f"ports = {ports} of {addresses} addresses x {NAT_PORTS_PER_ADDRESS}: lower "
                                    f"storage.stagingPods to {fit}", "net-staging-nat")]
    return [Check("nat", True, f"staging NAT: {vms} VMs x {catalog.NAT_MIN_PORTS_PER_VM_ONE_ADDRESS} ports on "
                               f"{addresses} static addresses ({catalog.CLOUD_NAT_ADDRESSES_SOURCE})")]


def _tpu_quota(cfg: StackConfig) -> list[Check]:
    """tpu7x chips: a reservation's hosts are checked with the reservation; quota applies to Spot only
    (TPU_RESERVED_QUOTA)."""
    if cfg.track != "tpu":
        return []
    a = ask(cfg)
    if not a.spot:
        return [Check("quota", True, f"tpu7x: {a.accelerators} chips come from reservation {a.reservation}, which "
                                     f"needs no TPU quota ({TPU_RESERVED_QUOTA})")]
    return [Check("quota", True, f"tpu7x Spot: {a.accelerators} chips need the region's preemptible TPU7x quota in "
                                 f"{cfg.gcp.region}, which regions.get does not report: check it on the Quotas page "
                                 f"({QUOTAS_PAGE}; {TPU_RESERVED_QUOTA})")]


def _held_quota(cfg: StackConfig, mine: Held) -> dict[str, float]:
    """Quota the stack's own resources already use: its pools' vCPUs and GPUs, and its staging addresses."""
    from ..facts.machines import MACHINES
    from ..plan.staging import staging_addresses

    if not mine.any:
        return {}
    credit: dict[str, float] = {"STATIC_ADDRESSES": staging_addresses(cfg)}
    a = ask(cfg)
    credit["HDB_TOTAL_GB"] = sum(boot_disk_gb(machine) * count for machine, count in mine.nodes.items())
    for machine, count in mine.nodes.items():
        if machine == a.machine_type and a.accelerator_metric and cfg.track == "gpu":
            credit[a.accelerator_metric] = credit.get(a.accelerator_metric, 0) + count * cfg.gpu.spec.gpus_per_node
        elif machine in MACHINES and not MACHINES[machine].extended:
            metric = f"{machine.split('-')[0].upper()}_CPUS"
            credit[metric] = credit.get(metric, 0) + count * MACHINES[machine].vcpus
    return credit


LOCATION_GROUPS = {"us": "us-", "europe": "europe-", "asia": "asia-", "northamerica": "northamerica-",
                   "southamerica": "southamerica-", "australia": "australia-", "me": "me-", "africa": "africa-"}


def _location_allowed(value: str, region: str, zone: str) -> bool:
    """A gcp.resourceLocations value (https://cloud.google.com/resource-manager/docs/organization-policy/
    defining-locations): `in:<region>-locations`, `in:<group>-locations`, a region, `zones:<zone>` or the like."""
    value = value.removeprefix("is:")
    if value.startswith("in:") and value.endswith("-locations"):
        group = value[3:-len("-locations")]
        return group == region or region.startswith(LOCATION_GROUPS.get(group, "\0"))
    name = value.split(":", 1)[-1]
    return name in (region, zone)


def _rules(policy: dict[str, Any]) -> list[Answer]:
    return [r for r in Answer(policy, "policy", EFFECTIVE_POLICY).part("spec").parts("rules") if not r.has("condition")]


def check_org_policies(g: Google, cfg: StackConfig) -> list[Check]:
    p, region, zone = cfg.gcp.project, cfg.gcp.region, cfg.gcp.zone
    a = ask(cfg)
    checks: list[Check] = []

    def effective(constraint: str) -> Optional[dict[str, Any]]:
        try:
            return g.get("orgpolicy.googleapis.com", f"v2/projects/{p}/policies/{constraint}:getEffectivePolicy")
        except ApiError as err:
            if err.status == 404:
                return {}
            checks.append(Check("org policy", False, explain(err, f"the effective policy {constraint}",
                                                             "orgpolicy.policy.get", p), "apis"))
            return None

    locations = effective("gcp.resourceLocations")
    if locations is not None:
        for rule in _rules(locations):
            allowed = rule.part("values").texts("allowedValues")
            denied = rule.part("values").texts("deniedValues")
            if rule.flag("denyAll") or (allowed and not any(_location_allowed(v, region, zone) for v in allowed)) \
                    or any(_location_allowed(v, region, zone) for v in denied):
                checks.append(Check("org policy", False, f"constraints/gcp.resourceLocations does not allow "
                                                         f"{region}/{zone}: set gcp.region and gcp.zone to an allowed "
                                                         "location or ask your org admin for an exception", "net"))
                break
    services = effective("gcp.restrictServiceUsage")
    if services is not None:
        for rule in _rules(services):
            allowed = rule.part("values").texts("allowedValues")
            denied = set(rule.part("values").texts("deniedValues"))
            refused = [api for api in apis_for(cfg)
                       if rule.flag("denyAll") or api in denied or (allowed and api not in allowed)]
            if refused:
                checks.append(Check("org policy", False, f"constraints/gcp.restrictServiceUsage refuses "
                                                         f"{', '.join(refused)}, which the stack enables: ask your "
                                                         "org admin to allow them for this project", "apis"))
                break
    if not a.shielded:
        shielded = effective("compute.requireShieldedVm")
        if shielded is not None and any(r.flag("enforce") for r in _rules(shielded)):
            checks.append(Check("org policy", False, f"constraints/compute.requireShieldedVm is enforced, and "
                                                     f"{a.machine_type} nodes run without Shielded GKE Nodes "
                                                     "(components/facts/catalog.py shielded_gke_nodes): ask your org "
                                                     "admin "
                                                     "for an exception for this project", "cluster"))
    return checks or [Check("org policy", True, "gcp.resourceLocations, gcp.restrictServiceUsage"
                                                + ("" if a.shielded else ", compute.requireShieldedVm")
                                                + " allow what the plan creates (nodes are private: no external IPs)")]


@dataclass(frozen=True)
class BucketFinding:
    """Whose the checkpoint bucket's name is, and so what `pulumi up` does with the bucket (`use`): create it (free),
    import it (this stack's, kept by its last destroy), read it as it is (another stack's of this project, the
    checkpoint staged once for all of them, or storage.bucketExists), or refuse (anyone else's)."""
    use: str
    """create | import | read | refuse"""
    line: str


def find_bucket(g: Google, cfg: StackConfig, stack: str) -> BucketFinding:
    """Ask Cloud Storage (BUCKETS_GET) whose gs://<storage.bucketName> is. A bucket is this project's stacks' when it
    carries the guide's label (components/plan/naming.py resource_labels) and lives in this project (its
    projectNumber, where both answers give one); its `pulumi-stack` label says which stack created it."""
    name = cfg.bucket_name
    keeps = "every destroy keeps it" if not cfg.storage.deleteCheckpointOnDestroy else \
        "destroy deletes it (storage.deleteCheckpointOnDestroy)"
    try:
        bucket = g.get("storage.googleapis.com", f"storage/v1/b/{name}")
    except ApiError as err:
        if err.status == 404:
            return BucketFinding("create", f"gs://{name} is free; pulumi up creates it, {keeps}")
        if err.status == 403 and not cfg.storage.bucketExists:
            return BucketFinding("refuse", f"gs://{name} exists and this identity cannot read it (another "
                                           "project's): set storage.bucketName to a free name")
        raise
    answer = Answer(bucket, "bucket", BUCKETS_GET)
    labels = answer.labels("labels")
    if cfg.storage.bucketExists:
        return BucketFinding("read", f"gs://{name} exists; the stack uses it as it is (storage.bucketExists) and no "
                                     "destroy of it deletes it")
    creator = labels.get("pulumi-stack")
    here = _project_number(g, cfg)
    there = bucket.get("projectNumber") if isinstance(bucket.get("projectNumber"), str) else None
    ours = labels.get("llm-d-guide") == catalog.GUIDE_NAME and (here is None or there is None or here == there)
    if ours and creator in (label_value(stack), None):
        return BucketFinding("import", f"gs://{name} exists and is this stack's (kept by its last destroy): pulumi "
                                       f"up takes it back as it is, nothing to set; {keeps}")
    if ours:
        return BucketFinding("read", f"gs://{name} exists and is stack {creator}'s of this project, which staged the "
                                     "checkpoint for every stack: pulumi up uses it as it is, and no destroy of this "
                                     "stack deletes it")
    whose = "has no llm-d-guide label of this guide" if labels.get("llm-d-guide") != catalog.GUIDE_NAME else \
        f"is in project number {there}, not this project's {here}"
    return BucketFinding("refuse", f"gs://{name} already exists and {whose}: set storage.bucketName to a free name, "
                                   "or storage.bucketExists true if it is yours to share")


def _project_number(g: Google, cfg: StackConfig) -> Optional[str]:
    """This project's number (projects.get's `name`, projects/<number>), or None when it cannot be read."""
    try:
        name = Answer(g.get("cloudresourcemanager.googleapis.com", f"v3/projects/{cfg.gcp.project}"), "project",
                      PROJECTS_GET).text("name")
    except ApiError:
        return None
    return name.removeprefix("projects/") or None


def check_bucket(g: Google, cfg: StackConfig, stack: str) -> list[Check]:
    try:
        found = find_bucket(g, cfg, stack)
    except ApiError as err:
        return [Check("bucket", False, explain(err, f"gs://{cfg.bucket_name}", "storage.buckets.get",
                                               cfg.gcp.project), "weights-bucket")]
    return [Check("bucket", found.use != "refuse", found.line, "" if found.use != "refuse" else "weights-bucket")]


def bucket_use(cfg: StackConfig, stack: str, google: Optional[Google] = None) -> str:
    """What `pulumi up` and `pulumi preview` do with the checkpoint bucket (BucketFinding.use), so that up after a
    destroy, or a second stack of the project, needs nothing set. The offline plan asks nobody: create (or read,
    with storage.bucketExists). Without credentials or an answer it creates, as before: the provider then fails
    the same way, later. A bucket that is someone else's stops the program before any resource, in one line."""
    if OFFLINE_PLAN or cfg.storage.bucketExists:
        return "read" if cfg.storage.bucketExists else "create"
    try:
        found = find_bucket(google or Google.from_environment(cfg.gcp.project), cfg, stack)
    except Exception:  # no credentials, no answer: the gate (or the provider) says why
        return "create"
    if found.use == "refuse":
        raise ConfigError("storage.bucketName", cfg.bucket_name, found.line)
    return found.use


def check_google(g: Google, cfg: StackConfig, stack: str) -> list[Check]:
    """Every Google question, in the order `pulumi up` would meet the answer."""
    checks = _guarded("project", "apis", lambda: check_project(g, cfg), cfg.gcp.project) \
        + _guarded("apis", "apis", lambda: check_apis(g, cfg), cfg.gcp.project)
    if any(not c.ok for c in checks if c.name in ("project", "apis") and COMPUTE in c.detail) or \
            any(not c.ok and c.name == "project" for c in checks):
        return checks  # without the project or the Compute API the other answers would all be the same refusal
    try:
        mine = held(g, cfg)
    except ApiError as err:
        return [*checks, Check("cluster", False, explain(err, f"the node pools of cluster {cfg.cluster_name}",
                                                         "container.clusters.get", cfg.gcp.project), "cluster")]
    for name, step, ask_it in (("org policy", "apis", lambda: check_org_policies(g, cfg)),
                               ("quota", "cpu", lambda: check_quotas(g, cfg, mine)),
                               ("reservation", f"{cfg.track}-0", lambda: check_reservation(g, cfg, mine)),
                               ("bucket", "weights-bucket", lambda: check_bucket(g, cfg, stack))):
        checks += _guarded(name, step, ask_it, cfg.gcp.project)
    return checks


def _guarded(name: str, step: str, ask_it: Callable[[], list[Check]], project: str) -> list[Check]:
    """A check's own lines; an answer it could not read (ApiError past its own handling) is its failed line."""
    try:
        return ask_it()
    except ApiError as err:
        return [Check(name, False, explain(err, f"the {name} answers", "(the permission its reference names)",
                                           project), step)]


# --------------------------------------------------------------------------- this machine
GCLOUD_INSTALL = "https://cloud.google.com/sdk/docs/install"
GCLOUD_AUTH_LIST = "https://cloud.google.com/sdk/gcloud/reference/auth/list"
GCLOUD_TOKEN_FILE_ENV = "CLOUDSDK_AUTH_ACCESS_TOKEN_FILE"
"""gcloud's own access-token file setting (https://cloud.google.com/sdk/gcloud/reference/config/set, auth/
access_token_file): with it gcloud needs no logged-in account."""
BUILD_STEP = "engine-image-build"


def check_local(cfg: StackConfig, which: Callable[[str], Optional[str]] | None = None,
                run: Callable[..., Any] | None = None, timeout: float = REQUEST_TIMEOUT_S) -> list[Check]:
    """What `pulumi up` runs on this machine: the TPU engine image's build is a local command
    (components/serving/engineimage.py: bash, then gcloud as its logged-in account, which is not the Application Default
    Credentials the Pulumi provider uses). One line per thing missing, naming what to install or run."""
    import shutil
    import subprocess

    from ..plan.loading import builds_engine_image
    from ..serving.engineimage import BUILD_INTERPRETER

    if not builds_engine_image(cfg):
        return []
    which = which or shutil.which
    run = run or subprocess.run
    bash = BUILD_INTERPRETER[0]
    if not os.access(bash, os.X_OK):
        return [Check("local tools", False, f"{bash} is missing: pulumi up runs the TPU engine image's build with it "
                                            "(components/serving/engineimage.py); run pulumi up on Linux, macOS or WSL",
                      BUILD_STEP)]
    gcloud = which("gcloud")
    if not gcloud:
        return [Check("local tools", False, f"gcloud is not on PATH: install the Google Cloud CLI ({GCLOUD_INSTALL});"
                                            " pulumi up runs `gcloud builds submit` for the TPU engine image",
                      BUILD_STEP)]
    if os.environ.get(GCLOUD_TOKEN_FILE_ENV):
        return [Check("local tools", True, f"gcloud {gcloud}, credentials from {GCLOUD_TOKEN_FILE_ENV}")]
    try:
        proc = run([gcloud, "auth", "list", "--filter=status:ACTIVE", "--format=value(account)"],
                   capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.SubprocessError) as err:
        return [Check("local tools", False, f"gcloud auth list did not answer ({str(err).splitlines()[0][:120]}): "
                                            "check the Google Cloud CLI installation", BUILD_STEP)]
    accounts = proc.stdout.split() if proc.returncode == 0 else []
    if not accounts:
        return [Check("local tools", False, "gcloud has no active account: run gcloud auth login (the TPU engine "
                                            "image's build runs as gcloud's account, not as the Application Default "
                                            f"Credentials; {GCLOUD_AUTH_LIST})", BUILD_STEP)]
    return [Check("local tools", True, f"gcloud {gcloud}, active account {accounts[0]} (the engine image's build "
                                       f"runs as it in project {cfg.gcp.project})")]


# --------------------------------------------------------------------------- the Hub
def check_hub(cfg: StackConfig, token: Optional[str], endpoint: Optional[str] = None,
              timeout: float = REQUEST_TIMEOUT_S) -> list[Check]:
    """The token reads the pinned repo at its revision, and the revision's config.json is one the pinned engine
    registers with the geometry the plan was computed with (components/weights/geometry.py's rule)."""
    import httpx2
    from huggingface_hub import HfApi, hf_hub_download
    from huggingface_hub.errors import (
        EntryNotFoundError,
        GatedRepoError,
        HfHubHTTPError,
        HTTPError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    from ..plan.engines import registered_architectures
    from ..weights.geometry import _CheckGeometry, expected_geometry

    repo, revision = cfg.model.repoId, cfg.model.revision or "main"
    api = HfApi(endpoint=endpoint, token=token or False)
    step = "model-geometry"
    try:
        info = api.model_info(repo, revision=revision, timeout=timeout)
        path = hf_hub_download(repo, "config.json", revision=info.sha or revision, token=token or False,
                               endpoint=endpoint, etag_timeout=timeout)
    except GatedRepoError:
        return [Check("hub", False, f"{repo} is gated and the token cannot read it: accept the model's license at "
                                    f"{api.endpoint}/{repo} with the account whose token is hfToken", step)]
    except RevisionNotFoundError:
        return [Check("hub", False, f"{repo} has no revision {revision}: set model.revision to a commit of it", step)]
    except RepositoryNotFoundError:
        return [Check("hub", False, f"repository {repo} was not found with this token: check model.repoId and "
                                    "hfToken (a gated or private repository answers this way without one)", step)]
    except EntryNotFoundError:
        return [Check("hub", False, f"{repo}@{revision} has no config.json: check model.repoId and model.revision",
                      step)]
    except HfHubHTTPError as err:
        return [Check("hub", False, f"could not read {repo}@{revision}: {_first_line(err)}", step)]
    except (httpx2.HTTPError, HTTPError, OSError) as err:
        # huggingface_hub 2.4 talks httpx2: a refused connection is httpx2.ConnectError, a timeout
        # httpx2.TimeoutException (neither is an OSError); its cache and offline errors are OSErrors
        return [Check("hub", False, f"could not reach the Hub ({api.endpoint}) for {repo}@{revision}: "
                                    f"{type(err).__name__}: {_first_line(err)}", step)]
    except ValueError as err:  # an answer huggingface_hub could not parse
        return [Check("hub", False, f"could not read {repo}@{revision}: the Hub's answer is not what huggingface_hub "
                                    f"expects ({_first_line(err)})", step)]
    try:
        with open(path, encoding="utf-8") as handle:
            config = json.load(handle)
    except (OSError, ValueError, RecursionError) as err:
        return [Check("hub", True, f"the token reads {repo}@{(info.sha or revision)[:12]}"),
                Check("checkpoint", False, f"config.json of {repo}@{revision} is not JSON ({_first_line(err)}): "
                                           "check model.repoId", step)]
    problem = _config_shape(config)
    if problem is None:
        engine, registered = registered_architectures(cfg)
        problem = _CheckGeometry.compare(config, expected_geometry(cfg), sorted(registered), engine)
    if problem:
        return [Check("hub", True, f"the token reads {repo}@{(info.sha or revision)[:12]}"),
                Check("checkpoint", False, problem, step)]
    return [Check("hub", True, f"the token reads {repo}@{(info.sha or revision)[:12]}"),
            Check("checkpoint", True, f"config.json: {(config.get('architectures') or ['?'])[0]}, which {engine} "
                                      "registers, with the plan's geometry")]


def _config_shape(config: Any) -> Optional[str]:
    """Why a config.json is not one the geometry rule can read (components/weights/geometry.py observed), or None."""
    if not isinstance(config, dict):
        return f"config.json is {_kind(config)}, not a JSON object: check model.repoId"
    architectures = config.get("architectures")
    if architectures is not None and not (isinstance(architectures, list)
                                          and all(isinstance(a, str) for a in architectures)):
        return f"config.json's architectures is {_kind(architectures)} {_shown(architectures)}, not a list of names"
    text = config.get("text_config") or config
    if not isinstance(text, dict) or not isinstance(text.get("linear_attn_config") or {}, dict):
        return "config.json's text_config or linear_attn_config is not a JSON object: check model.repoId"
    numbers = [("text_config", k) for k in ("kv_lora_rank", "qk_rope_head_dim", "num_nextn_predict_layers")] + \
              [("linear_attn_config", k) for k in ("num_heads", "head_dim", "short_conv_kernel_size")]
    for where, key in numbers:
        holder = text if where == "text_config" else (text.get("linear_attn_config") or {})
        value = holder.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            return f"config.json's {key} is {_kind(value)} {_shown(value)}, not a whole number"
    for key in ("kda_layers", "full_attn_layers"):
        value = (text.get("linear_attn_config") or {}).get(key)
        if value is not None and not isinstance(value, list):
            return f"config.json's {key} is {_kind(value)} {_shown(value)}, not a list of layers"
    return None


# --------------------------------------------------------------------------- the gate in `pulumi up`
def gate_applies(cfg: StackConfig) -> bool:
    """`pulumi up` only: not `pulumi preview` (dry run), not the offline plan, not with lifecycle.preflight false."""
    import pulumi

    return cfg.lifecycle.preflight and not OFFLINE_PLAN and not pulumi.runtime.is_dry_run()


def gate(cfg: StackConfig, stack: str, google: Optional[Google] = None) -> list[Check]:
    """The failed checks of this machine and of Google (the Hub's are the model-geometry resource's, which
    accelerator pools wait for)."""
    local = [c for c in check_local(cfg) if not c.ok]
    try:
        google = google or Google.from_environment(cfg.gcp.project)
    except Exception as err:  # no credentials: the provider would fail the same way, but later
        return [*local, Check("credentials", False, f"no Google credentials ({str(err).splitlines()[0][:120]}): "
                                                    "run gcloud auth application-default login")]
    return local + [c for c in check_google(google, cfg, stack) if not c.ok]


def gate_message(failed: Iterable[Check]) -> str:
    lines = [c.line() for c in failed]
    return (f"preflight: {len(lines)} check(s) failed, nothing was created: " + " | ".join(lines)
            + " (python -m tools preflight shows every check; to skip this step: "
              "pulumi config set lifecycle.preflight false)")
