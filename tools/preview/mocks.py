"""Pulumi mock engine for the offline plan: realistic provider outputs and a recording monitor.

The monitor keeps each RegisterResource request as the engine would receive it (parent, explicit
and implicit dependencies, options, serialized inputs with secrets still marked), so the plan shows
what `pulumi up` would send, not what the mocks make of it.
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass, field
from typing import Any

from google.protobuf import json_format
from pulumi.runtime import mocks

UNRESOLVED_REVISION = "0" * 40
"""Stand-in for the commit `main` resolves to at the first `pulumi up` (components/weights/revision.py) when
`model.revision` is unset: the plan never asks the Hub."""
PROJECT_NUMBER = "123456789012"
"""Stand-in project number; realistic shape so Workload Identity principals resolve."""
GKE_MASTER_VERSION = "1.35.1-gke.1396000"
"""What the mocked `getEngineVersions` reports for every release channel on the pinned line."""
CHANNELS = ("RAPID", "REGULAR", "STABLE", "EXTENDED")

STAND_INS: dict[str, str] = {
    # Values only a real `pulumi up` knows, which the mocks invent: what each stands in for. The plan marks every
    # stack output that carries one (outputs.json `$mocked`, docs/plan-format.md).
    UNRESOLVED_REVISION: "the commit `main` resolves to at the first `pulumi up` (model.revision unset)",
    UNRESOLVED_REVISION[:12]: "the commit `main` resolves to at the first `pulumi up` (model.revision unset)",
    PROJECT_NUMBER: "the project's number",
}


def stand_in(value: str, what: str) -> str:
    STAND_INS[value] = what
    return value


def _digest(*parts: str) -> str:
    return hashlib.sha256("/".join(parts).encode()).hexdigest()


@dataclass
class Registration:
    urn: str
    type: str
    name: str
    parent_urn: str
    custom: bool
    remote: bool
    provider_ref: str
    dependencies: list[str]
    inputs: dict[str, Any]
    options: dict[str, Any]


@dataclass
class Recording:
    registrations: list[Registration] = field(default_factory=list)


def _options(request: Any) -> dict[str, Any]:
    """Resource options that change what the engine does, keeping only those set."""
    options: dict[str, Any] = {}
    if request.protect:
        options["protect"] = True
    if request.retainOnDelete:
        options["retainOnDelete"] = True
    if request.deleteBeforeReplace:
        options["deleteBeforeReplace"] = True
    if request.importId:
        options["import"] = request.importId
    if list(request.ignoreChanges):
        options["ignoreChanges"] = sorted(request.ignoreChanges)
    if list(request.additionalSecretOutputs):
        options["additionalSecretOutputs"] = sorted(request.additionalSecretOutputs)
    timeouts = request.customTimeouts
    if timeouts.create or timeouts.update or timeouts.delete:
        options["customTimeouts"] = {k: v for k, v in
                                     (("create", timeouts.create), ("update", timeouts.update),
                                      ("delete", timeouts.delete)) if v}
    return options


class RecordingMonitor(mocks.MockMonitor):
    def __init__(self, mock: mocks.Mocks, recording: Recording):
        super().__init__(mock)
        self.recording = recording

    def ReadResource(self, request):  # noqa: N802 (gRPC method name)
        response = super().ReadResource(request)
        self.recording.registrations.append(Registration(
            urn=response.urn, type=request.type, name=request.name, parent_urn=request.parent, custom=True,
            remote=False, provider_ref=request.provider, dependencies=list(request.dependencies),
            inputs=json_format.MessageToDict(request.properties), options={"read": request.id},
        ))
        return response

    def RegisterResource(self, request):  # noqa: N802 (gRPC method name)
        response = super().RegisterResource(request)
        if request.type != "pulumi:pulumi:Stack":
            self.recording.registrations.append(Registration(
                urn=response.urn,
                type=request.type,
                name=request.name,
                parent_urn=request.parent,
                custom=bool(request.custom),
                remote=bool(request.remote),
                provider_ref=request.provider,
                dependencies=list(request.dependencies),
                inputs=json_format.MessageToDict(request.object),
                options=_options(request),
            ))
        return response


class PlanMocks(mocks.Mocks):
    """Provider stand-ins: ids, self links, emails and endpoints shaped like the real ones."""

    def __init__(self, project: str):
        self.project = project

    def call(self, args: mocks.MockCallArgs):
        if args.token == "gcp:organizations/getProject:getProject":
            project = args.args.get("projectId") or self.project
            return {"projectId": project, "number": PROJECT_NUMBER, "name": project,
                    "id": f"projects/{project}"}
        if args.token == "gcp:container/getEngineVersions:getEngineVersions":
            return {"latestMasterVersion": GKE_MASTER_VERSION, "latestNodeVersion": GKE_MASTER_VERSION,
                    "defaultClusterVersion": GKE_MASTER_VERSION,
                    "validMasterVersions": [GKE_MASTER_VERSION], "validNodeVersions": [GKE_MASTER_VERSION],
                    "releaseChannelDefaultVersion": dict.fromkeys(CHANNELS, GKE_MASTER_VERSION),
                    "releaseChannelLatestVersion": dict.fromkeys(CHANNELS, GKE_MASTER_VERSION),
                    "releaseChannelUpgradeTargetVersion": dict.fromkeys(CHANNELS, GKE_MASTER_VERSION)}
        raise NotImplementedError(f"offline plan has no mock for invoke {args.token}; "
                                  "add one in tools/preview/mocks.py")

    def new_resource(self, args: mocks.MockResourceArgs):
        state = dict(args.inputs)
        # A read resource (`Resource.get`) arrives with its id and no inputs; its name is the id.
        name = state.get("name") or args.resource_id or args.name
        if args.resource_id:
            state.setdefault("name", name)
        project = state.get("project", self.project)
        kind = args.typ
        compute = f"https://www.googleapis.com/compute/v1/projects/{project}"
        if kind == "pulumi-python:dynamic/kimi:HubRevision":
            return f"{state['repoId']}@{UNRESOLVED_REVISION}", {**state, "revision": UNRESOLVED_REVISION}
        if kind.startswith("kubernetes:") and not kind.startswith("pulumi:"):
            return f"{args.name}", state
        if kind == "command:local:Command":
            # The TPU engine image build (components/serving/engineimage.py) prints the pushed image's digest; the plan
            # stands in one derived from what the build is made of, so it moves when the lock does.
            digest = stand_in(f"sha256:{_digest('engine image build', *map(str, state.get('triggers', [])))}",
                              "the digest of the TPU engine image Cloud Build pushes at the first `pulumi up`")
            return f"{args.name}-{_digest(kind, args.name)[:8]}", {**state, "stdout": digest, "stderr": ""}
        if kind == "gcp:compute/network:Network":
            rid = f"projects/{project}/global/networks/{name}"
            state.update(selfLink=f"{compute}/global/networks/{name}")
        elif kind in ("gcp:compute/subnetwork:Subnetwork", "gcp:compute/router:Router",
                      "gcp:compute/resourcePolicy:ResourcePolicy", "gcp:compute/address:Address"):
            collection = {"Subnetwork": "subnetworks", "Router": "routers", "ResourcePolicy": "resourcePolicies",
                          "Address": "addresses"}
            plural = collection[kind.rsplit(":", 1)[1]]
            rid = f"projects/{project}/regions/{state.get('region')}/{plural}/{name}"
            state.update(selfLink=f"{compute}/regions/{state.get('region')}/{plural}/{name}")
            if plural == "addresses":
                state.update(address=stand_in(f"203.0.113.{int(_digest(name)[:2], 16) % 250 + 1}",
                                              "the external address Compute Engine reserves"))
        elif kind == "gcp:container/cluster:Cluster":
            rid = f"projects/{project}/locations/{state.get('location')}/clusters/{name}"
            octet = int(_digest(name)[:2], 16) % 200 + 20
            state.update(
                endpoint=stand_in(f"34.118.{octet}.2", "the cluster endpoint GKE assigns"),
                # Private clusters also get an internal endpoint from the node subnet (pods reach the API there).
                privateClusterConfig={**(state.get("privateClusterConfig") or {}),
                                      "privateEndpoint": f"10.0.15.{octet}", "publicEndpoint": f"34.118.{octet}.2"},
                masterVersion=state.get("minMasterVersion", GKE_MASTER_VERSION),
                selfLink=f"https://container.googleapis.com/v1/{rid}",
                masterAuth={"clusterCaCertificate": base64.b64encode(
                    f"mock CA of {name}".encode()).decode()},
                controlPlaneEndpointsConfig={"dnsEndpointConfig": {
                    **(state.get("controlPlaneEndpointsConfig") or {}).get("dnsEndpointConfig", {}),
                    "endpoint": stand_in(f"gke-{_digest(rid)[:32]}.{state.get('location')}.gke.goog",
                                         "the cluster's DNS endpoint GKE assigns")}},
            )
        elif kind == "gcp:container/nodePool:NodePool":
            rid = f"{state.get('location')}/{state.get('cluster', '').rsplit('/', 1)[-1]}/{name}"
        elif kind == "gcp:serviceaccount/account:Account":
            email = f"{state['accountId']}@{project}.iam.gserviceaccount.com"
            rid = f"projects/{project}/serviceAccounts/{email}"
            state.update(email=email, member=f"serviceAccount:{email}",
                         uniqueId=str(int(_digest(email)[:15], 16)))
        elif kind == "gcp:storage/bucket:Bucket":
            rid = name
            state.update(url=f"gs://{name}", selfLink=f"https://www.googleapis.com/storage/v1/b/{name}")
        elif kind == "gcp:projects/service:Service":
            rid = f"{project}/{state.get('service')}"
        else:
            rid = stand_in(f"{name}-{_digest(kind, args.name)[:8]}", f"the id the provider assigns a {kind}") \
                if args.custom else ""
        return rid, state
