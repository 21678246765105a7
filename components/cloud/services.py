"""Project APIs the stack needs, enabled by the program so an empty project works."""

from __future__ import annotations

from typing import Optional

import pulumi
import pulumi_gcp as gcp

from .base import Args, Component

REQUIRED_APIS = (
    "compute.googleapis.com",          # VPC, router, NAT, workload policies, Hyperdisk
    "container.googleapis.com",        # GKE
    "iam.googleapis.com",              # service accounts and Workload Identity
    "storage.googleapis.com",          # checkpoint bucket
    # GKE Inference Gateway (https://cloud.google.com/kubernetes-engine/docs/how-to/deploy-gke-inference-gateway)
    "networkservices.googleapis.com",
    "monitoring.googleapis.com",       # Managed Prometheus
    "logging.googleapis.com",          # node and control-plane logs
)
ENGINE_IMAGE_APIS = (
    "cloudbuild.googleapis.com",       # builds the TPU engine image (components/serving/engineimage.py)
    "artifactregistry.googleapis.com", # the repository that holds it
)
"""What a stack that builds the TPU engine image needs besides (`tpu.engine` vllm-torchtpu)."""


def apis_for(cfg) -> tuple[str, ...]:
    """The APIs a stack enables: the shared list, plus the image build's on a vLLM-TorchTPU stack."""
    builds = cfg.track == "tpu" and cfg.tpu.engine == "vllm-torchtpu"
    return REQUIRED_APIS + (ENGINE_IMAGE_APIS if builds else ())


class ProjectServicesArgs(Args):
    project: str
    """Project in which to enable the APIs."""
    apis: tuple[str, ...] = REQUIRED_APIS


class ProjectServices(Component):
    """Enables each API; `resources` is what dependants put in `depends_on`."""

    def __init__(self, name: str, args: ProjectServicesArgs, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("project", "Services", name, opts)
        self.resources = [
            gcp.projects.Service(
                f"{name}-{api.split('.')[0]}",
                project=args.project,
                service=api,
                # Leave APIs on at destroy: other workloads in the project may use them.
                disable_on_destroy=False,
                opts=self.child(),
            )
            for api in args.apis
        ]
        self.finish(apis=[s.service for s in self.resources])
