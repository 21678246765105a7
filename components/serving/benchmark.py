"""inference-perf benchmark (ConfigMap + Job), created only when `benchmark.enabled` is on: it replays
multi-turn, long-context sessions against the router and writes its reports to the bucket.

The config is the schema of the inference-perf release the Job image carries (requirements-dev.txt pins the same
release; tests/serving/test_benchmark_config.py loads it with inference-perf's own loader and builds its data
generator).
It follows upstream's conversation-replay preset (https://github.com/llm-d/llm-d/blob/a2b33d4/guides/models/
qwen3-coder-480b/benchmark-templates/guide.yaml); docs/upstream-alignment.md lists every difference.
Keys are checked by the release's strict loader (unknown keys fail).
"""

from __future__ import annotations

from typing import Any, Optional

import pulumi
import pulumi_kubernetes as k8s
import yaml

from ..cloud.base import Args, Component, StrInput
from ..config import StackConfig
from ..facts import catalog, contract
from ..plan import engines, images
from ..platform import hardening

CONFIG_FILE = "config.yml"
CONFIG_MOUNT = "/etc/inference-perf"
SERVICE_ACCOUNT = f"{catalog.GUIDE_NAME}-benchmark"
JOB_NAME = f"{catalog.GUIDE_NAME}-inference-perf"
RESULTS_PREFIX = "benchmarks"
SCRATCH_PATH = "/scratch"
CPU = 4
"""CPUs the Job requests; inference-perf starts one worker process per CPU of the *node* unless told."""
REQUEST_TIMEOUT_S = 600
"""Per-request timeout of upstream's conversation-replay preset; inference-perf has none by default."""


def fixed(value: int) -> dict[str, Any]:
    """A constant size: inference-perf 0.7.0 takes every conversation size as a Distribution, and `fixed`
    samples int(mean) (https://github.com/kubernetes-sigs/inference-perf/blob/v0.7.0/inference_perf/utils/numeric/
    distribution/utils.py)."""
    return {"type": "fixed", "min": value, "max": value, "mean": value, "std_dev": 0}


def inference_perf_config(cfg: StackConfig, base_url: str, bucket: str, results_path: str) -> dict[str, Any]:
    bench = cfg.benchmark
    # Closed-loop replay: one conversation slot per concurrent session; a slot starts its next conversation as
    # soon as one ends, so `conversations` in total is conversations / slots rounds of every slot
    # (https://github.com/kubernetes-sigs/inference-perf/blob/v0.7.0/inference_perf/datagen/replay/
    # conversation_replay_datagen.py docstring).
    slots = min(bench.conversations, bench.concurrency)
    return {
        "load": {"type": "concurrent", "num_workers": CPU, "request_timeout": REQUEST_TIMEOUT_S,
                 "stages": [{"num_requests": bench.conversations * bench.turnsPerConversation,
                             "concurrency_level": slots}]},
        # conversation_replay supports only the completion API; streaming measures TTFT and TPOT.
        "api": {"type": "completion", "streaming": True},
        "server": {"type": "vllm" if cfg.track == "gpu" else engines.tpu_engine_type(cfg),
                   "model_name": catalog.KIMI.hf_id,
                   "base_url": base_url, "ignore_eos": True},
        # The tokenizer comes from the read-only weights volume: no hub download.
        "tokenizer": {"pretrained_model_name_or_path": cfg.model.path, "trust_remote_code": True},
        "data": {"type": "conversation_replay", "conversation_replay": {
            "seed": 0,
            "num_conversations": slots,
            "shared_system_prompt_len": bench.systemPromptTokens,
            "turns_per_conversation": fixed(bench.turnsPerConversation),
            "input_tokens_per_turn": fixed(bench.inputTokensPerTurn),
            "output_tokens_per_turn": fixed(bench.outputTokensPerTurn),
            "max_model_len": cfg.context_length,
        }},
        # Per-request rows let the report break latency down by conversation turn.
        "report": {"request_lifecycle": {"summary": True, "per_stage": True, "per_request": True},
                   "session_lifecycle": {"summary": True, "per_stage": True}},
        "storage": {"google_cloud_storage": {"bucket_name": bucket, "path": results_path,
                                             "report_file_prefix": catalog.GUIDE_NAME}},
    }


class BenchmarkArgs(Args):
    namespace: StrInput
    config: StackConfig
    bucket: StrInput
    results_path: str
    """Folder in the bucket for this stack's reports."""
    base_url: str
    models_claim: StrInput
    """The hydrated weights claim (WeightStaging.claim): the tokenizer is read from it."""


class Benchmark(Component):
    """The Job is not awaited by `pulumi up`; the driver (tools.live.bench) waits for it and collects the reports."""

    def __init__(self, name: str, args: BenchmarkArgs, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("benchmark", "Benchmark", name, opts)
        self.account = k8s.core.v1.ServiceAccount(
            f"{name}-sa", metadata=k8s.meta.v1.ObjectMetaArgs(name=SERVICE_ACCOUNT, namespace=args.namespace),
            opts=self.child())
        config = pulumi.Output.from_input(args.bucket).apply(lambda bucket: yaml.safe_dump(
            inference_perf_config(args.config, args.base_url, bucket, args.results_path), sort_keys=False))
        self.config_map = k8s.core.v1.ConfigMap(
            f"{name}-config",
            metadata=k8s.meta.v1.ObjectMetaArgs(name=f"{JOB_NAME}-config", namespace=args.namespace),
            data={CONFIG_FILE: config},
            opts=self.child(),
        )
        models = k8s.core.v1.VolumeArgs(name="models", persistent_volume_claim=k8s.core.v1
                                        .PersistentVolumeClaimVolumeSourceArgs(claim_name=args.models_claim,
                                                                               read_only=True))
        scratch, scratch_mount = hardening.scratch_volume("scratch", SCRATCH_PATH, "4Gi")
        self.job = k8s.batch.v1.Job(
            f"{name}-job",
            metadata=k8s.meta.v1.ObjectMetaArgs(name=JOB_NAME, namespace=args.namespace,
                                                annotations={"pulumi.com/skipAwait": "true"}),
            spec=k8s.batch.v1.JobSpecArgs(
                backoff_limit=0,  # a second attempt would mix two runs in one report folder
                template=k8s.core.v1.PodTemplateSpecArgs(
                    metadata=k8s.meta.v1.ObjectMetaArgs(
                        labels={**contract.LOAD_CLIENT_LABELS, **contract.BENCHMARK_NAME_LABEL}),
                    spec=k8s.core.v1.PodSpecArgs(
                        restart_policy="Never",
                        service_account_name=self.account.metadata.name,
                        # Workload Identity needs the service account name, not its API token (the GKE metadata server
                        # identifies the pod); the Job never calls the Kubernetes API.
                        automount_service_account_token=False,
                        security_context=hardening.pod_context(),
                        # The transfer pool's C3 nodes attach Hyperdisk ML (the populator writes it from there);
                        # the system pool's N2 machines may not, and the tokenizer is read from that volume.
                        node_selector={catalog.COMPUTE_CLASS_LABEL: catalog.VOLUME_POPULATOR_COMPUTE_CLASS},
                        tolerations=[k8s.core.v1.TolerationArgs(
                            key=catalog.COMPUTE_CLASS_LABEL, operator="Equal",
                            value=catalog.VOLUME_POPULATOR_COMPUTE_CLASS, effect="NoSchedule")],
                        containers=[k8s.core.v1.ContainerArgs(
                            name="inference-perf",
                            image=images.ref(args.config.images, "inference-perf"),
                            command=["inference-perf"],
                            args=["--config_file", f"{CONFIG_MOUNT}/{CONFIG_FILE}"],
                            # Read-only root filesystem: reports, caches and HOME go to the scratch volume.
                            working_dir=SCRATCH_PATH,
                            env=[k8s.core.v1.EnvVarArgs(name="HOME", value=SCRATCH_PATH)],
                            security_context=hardening.container_context(),
                            resources=k8s.core.v1.ResourceRequirementsArgs(
                                requests={"cpu": str(CPU), "memory": "16Gi"},
                                limits={"cpu": str(CPU), "memory": "16Gi"}),
                            image_pull_policy="Always",  # a one-off Job: pull what the tag (or digest) names now
                            volume_mounts=[
                                k8s.core.v1.VolumeMountArgs(name="config", mount_path=CONFIG_MOUNT, read_only=True),
                                k8s.core.v1.VolumeMountArgs(name="models", mount_path=contract.MODELS_MOUNT_PATH,
                                                            read_only=True),
                                scratch_mount,
                            ],
                        )],
                        volumes=[
                            k8s.core.v1.VolumeArgs(name="config", config_map=k8s.core.v1.ConfigMapVolumeSourceArgs(
                                name=self.config_map.metadata.name)),
                            models,
                            scratch,
                        ],
                    ),
                ),
            ),
            opts=self.child(),
        )
        self.finish(job=self.job.metadata.name)
