"""Every config validator rejects what it should, with the exact line a user sees."""

from __future__ import annotations

import json
from typing import Any

import pytest

from components.config import ConfigError, StackConfig, parse_config
from components.facts import catalog
from tests.conftest import fixture_stack
from tools.preview.render import project_file, stack_config

NS = "kimi-k3-1:"


def committed(stack: str) -> dict[str, str]:
    """The fixture stack's config as Pulumi hands it to the program (namespace stripped)."""
    config, _ = stack_config(fixture_stack(stack), project_file())
    return {k[len(NS):]: v for k, v in config.items() if k.startswith(NS)}


def parse(stack: str, **changes: Any) -> StackConfig:
    raw = committed(stack)
    for key, value in changes.items():
        key = key.replace("__", ".")
        if value is None:
            raw.pop(key, None)
        else:
            raw[key] = value if isinstance(value, str) else json.dumps(value)
    return parse_config(raw)


def error(stack: str, **changes: Any) -> str:
    with pytest.raises(ConfigError) as info:
        parse(stack, **changes)
    message = str(info.value)
    assert "\n" not in message.strip() or message.count("\n") <= 1
    return message


def test_committed_stacks_parse():
    assert parse("gpu").track == "gpu"
    assert parse("tpu").track == "tpu"


@pytest.mark.parametrize("stack,changes,expected", [
    ("tpu", {"tpu__topolgy": "2x2x4"},
     "kimi-k3-1:tpu.topolgy = '2x2x4': unknown key; did you mean kimi-k3-1:tpu.topology?"),
    ("gpu", {"gcp__project": None},
     "kimi-k3-1:gcp.project = (unset): required: Google Cloud project ID that owns every resource."),
    ("tpu", {"tpu__slices": "two"},
     "kimi-k3-1:tpu.slices = 'two': input should be a valid integer, unable to parse string as an integer"),
    ("tpu", {"tpu__slices": "9"}, "kimi-k3-1:tpu.slices = '9': input should be less than or equal to 8"),
    ("gpu", {"track": "cpu"}, "kimi-k3-1:track = 'cpu': expected one of 'gpu' or 'tpu'"),
    ("gpu", {"cluster__deletionProtection": "maybe"},
     "kimi-k3-1:cluster.deletionProtection = 'maybe': input should be a valid boolean, unable to interpret input"),
    ("gpu", {"cluster__authorizedNetworks": "203.0.113.0/24"},
     "kimi-k3-1:cluster.authorizedNetworks = '203.0.113.0/24': expected a list, e.g. [\"203.0.113.7/32\"]"),
])
def test_type_errors_name_key_value_and_valid(stack, changes, expected):
    assert error(stack, **changes) == expected


@pytest.mark.parametrize("stack,changes,expected", [
    # Topology vs hosts vs chips vs parallelism.
    ("tpu", {"tpu__topology": "2x2x1"},
     "kimi-k3-1:tpu.topology = '2x2x1': a single-host slice: it takes no workload policy, and one host cannot hold "
     "the model; it deploys the multi-host topologies 2x2x2, 2x2x4, 2x4x4, 4x4x4"),
    ("tpu", {"tpu__tensorParallel": 16},
     "kimi-k3-1:tpu.tensorParallel = 16: a 2x2x4 slice has 16 chips x 2 TensorCores = 32 devices; "
     "tpu.tensorParallel (16) must be 32 with tpu.launch=tp-across-hosts (or a divisor of 8 with dp-across-hosts)"),
    # The released launcher's layout: TP inside a host.
    ("tpu", {"tpu__launch": "dp-across-hosts"},
     "kimi-k3-1:tpu.launch = 'dp-across-hosts': tpu.launch=dp-across-hosts runs tensor parallelism inside each "
     "host: tpu.tensorParallel (32) must divide a host's 4 chips x 2 TensorCores = 8 (set 8, as the launcher runs "
     "a host)"),
    ("tpu", {"tpu__launch": "dp-across-hosts", "tpu__tensorParallel": 3},
     "kimi-k3-1:tpu.tensorParallel = 3: tpu.launch=dp-across-hosts runs tensor parallelism inside each host: "
     "tpu.tensorParallel (3) must divide a host's 4 chips x 2 TensorCores = 8 (set 8, as the launcher runs a host)"),
    ("tpu", {"tpu__launch": "dp-across-hosts", "tpu__tensorParallel": 8, "tpu__engine": "sglang-torchtpu",
             "tpu__sglangImage": "us-docker.pkg.dev/p/r/sglang:1"},
     "kimi-k3-1:tpu.launch = 'dp-across-hosts': tpu.launch=dp-across-hosts is vLLM-TorchTPU's layout; "
     "tpu.engine=sglang-torchtpu takes tp-across-hosts"),
    ("tpu", {"tpu__topology": "2x2x2"},
     # The topology is what changed (TP is at its default), so the topology is named.
     "kimi-k3-1:tpu.topology = '2x2x2': a 2x2x2 slice has 8 chips x 2 TensorCores = 16 devices; "
     "tpu.tensorParallel (32) must be 16 with tpu.launch=tp-across-hosts (or a divisor of 8 with dp-across-hosts)"),
    ("tpu", {"tpu__expertParallel": 5},
     "kimi-k3-1:tpu.expertParallel = 5: tpu.expertParallel (5) must divide tpu.tensorParallel (32)"),
    ("tpu", {"tpu__reservation": None},
     "kimi-k3-1:tpu.reservation = (unset): Ironwood capacity comes from a reservation: set tpu.reservation, "
     "or tpu.spot=true for Spot capacity"),
    ("tpu", {"tpu__spot": "true"},
     "kimi-k3-1:tpu.spot = true: choose either tpu.reservation or tpu.spot, not both"),
    # NVL72 domain size.
    ("gpu", {"gpu__prefillNodesPerGroup": 5},
     "kimi-k3-1:gpu.prefillNodesPerGroup = 5: a slice of 3x5 prefill + 1x4 decode = 19 pods x 4 GPUs = 76 GPUs; "
     "one NVL72 domain holds 18 nodes, 72 GPUs (add gpu.slices instead)"),
    # Reservation-only machines.
    ("gpu", {"gpu__reservation": None},
     "kimi-k3-1:gpu.reservation = (unset): a4x-maxgpu-4g-metal is reservation-only: set the name of your "
     "specific reservation"),
    ("gpu", {"gpu__reservationSubBlocks": ["sb-1"]},
     "kimi-k3-1:gpu.reservationSubBlocks = [\"sb-1\"]: naming sub-blocks needs gpu.reservationBlock too (the block "
     "that holds them)"),
    # Zones.
    ("tpu", {"gcp__zone": "europe-west4-a"},
     "kimi-k3-1:gcp.zone = 'europe-west4-a': must be a zone of gcp.region 'us-central1'; tpu7x-standard-4t is known in "
     "us-central1-c, us-central1-ai1a"),
    ("tpu", {"gcp__zone": "us-central1-b"},
     "kimi-k3-1:gcp.zone = 'us-central1-b': tpu7x-standard-4t is known in us-central1-c, us-central1-ai1a "
     "(source: https://docs.cloud.google.com/tpu/docs/regions-zones (us-central1-c; us-central1-ai1a in one "
     "version)); if your "
     "reservation is elsewhere, set kimi-k3-1:gcp.allowUnlistedZone=true"),
    # 3-node groups = 12 EP ranks; 896 routed experts do not split evenly.
    ("gpu", {"gpu__prefillNodesPerGroup": 3},
     "kimi-k3-1:gpu.prefillNodesPerGroup = 3: 12 expert-parallel ranks do not divide the 896 routed experts "
     "(EP = TP x DP: https://github.com/vllm-project/vllm/blob/0170256/docs/serving/expert_parallel_deployment.md); "
     "use one of 1, 2, 4, 7, 8, 14, 16 nodes"),
    # Names.
    ("gpu", {"gcp__project": "My_Project"},
     "kimi-k3-1:gcp.project = 'My_Project': a project ID is 6-30 characters of a-z, 0-9 and '-', "
     "starting with a letter and not ending with '-' "
     "(https://cloud.google.com/resource-manager/docs/creating-managing-projects)"),
    ("gpu", {"cluster__name": "a-very-long-cluster-name-that-exceeds-forty"},
     "kimi-k3-1:cluster.name = 'a-very-long-cluster-name-that-exceeds-forty': must be 1-40 characters of a-z, "
     "0-9 and '-', start with a letter and not end with '-' "
     "(https://cloud.google.com/kubernetes-engine/docs/reference/rest/v1/projects.locations.clusters)"),
    ("gpu", {"cluster__name": "kimi-k3-1-gpu-benchmark-stack"},
     "kimi-k3-1:cluster.name = 'kimi-k3-1-gpu-benchmark-stack': the node service account ID "
     "'kimi-k3-1-gpu-benchmark-stack-nodes' derived from it must be 1-30 characters of a-z, 0-9 and "
     "'-', start with a letter and not end with '-' "
     "(https://cloud.google.com/iam/docs/reference/rest/v1/projects.serviceAccounts/create); use a cluster name of "
     "at most 24 characters"),
    ("gpu", {"storage__bucketName": "Weights!"},
     "kimi-k3-1:storage.bucketName = 'Weights!': not a valid bucket name: only a-z, 0-9, '-', '_' and '.', "
     "starting and ending with a letter or digit (https://cloud.google.com/storage/docs/naming-buckets)"),
    # Network ranges.
    ("gpu", {"network__podsCidr": "10.0.8.0/21"},
     "kimi-k3-1:network.podsCidr = '10.0.8.0/21': overlaps network.nodesCidr '10.0.0.0/20'; ranges must be disjoint"),
    ("gpu", {"network__proxyOnlyCidr": "10.9.0.0/27"},
     "kimi-k3-1:network.proxyOnlyCidr = '10.9.0.0/27': a proxy-only subnet needs at least a /26 (/23 recommended)"),
    ("gpu", {"cluster__controlPlaneAccess": "ip"},
     "kimi-k3-1:cluster.authorizedNetworks = []: controlPlaneAccess=ip needs at least one CIDR you run pulumi "
     "from, e.g. [\"203.0.113.7/32\"]"),
    ("gpu", {"cluster__authorizedNetworks": ["0.0.0.0/0"]},
     "kimi-k3-1:cluster.authorizedNetworks = '0.0.0.0/0': 0.0.0.0/0 opens the control plane to the internet"),
    ("gpu", {"cluster__authorizedNetworks": ["203.0.113.7/32", "128.0.0.0/1"]},
     "kimi-k3-1:cluster.authorizedNetworks = '128.0.0.0/1': public ranges wider than a /24 open the control plane "
     "to the internet; list the addresses you run pulumi from"),
    # Versions and limits.
    ("gpu", {"cluster__versionPrefix": "1.34."},
     f"kimi-k3-1:cluster.versionPrefix = '1.34.': both tracks need GKE >= {catalog.GKE_MIN_VERSION}; "
     "use '1.35.' or newer"),
    ("gpu", {"model__contextLength": 2_000_000},
     "kimi-k3-1:model.contextLength = 2000000: must be 1024-1048576 (the model's max_position_embeddings)"),
    ("gpu", {"storage__volumeSizeGi": 1500},
     "kimi-k3-1:storage.volumeSizeGi = 1500: must be 1599-65536 GiB (checkpoint 1.56 TB + 10% headroom)"),
    ("gpu", {"storage__throughputMiBps": 100},
     "kimi-k3-1:storage.throughputMiBps = 100: Hyperdisk ML takes 400-2097152 MiB/s"),
    ("gpu", {"storage__softDeleteDays": 3}, "kimi-k3-1:storage.softDeleteDays = 3: must be 0 (off) or 7-90 days"),
    ("gpu", {"storage__bucketExists": "true", "storage__deleteCheckpointOnDestroy": "true"},
     "kimi-k3-1:storage.deleteCheckpointOnDestroy = true: a bucket the stack only uses (storage.bucketExists=true) "
     "is never deleted by it; set one of them"),
    ("gpu", {"storage__checkpointPrefix": "/models"},
     "kimi-k3-1:storage.checkpointPrefix = '/models': a folder path such as 'models/kimi/' (trailing '/', "
     "no leading '/')"),
])
def test_rules_reject_with_exact_message(stack, changes, expected):
    assert error(stack, **changes) == expected


def test_gke_minimum_is_the_highest_gate():
    gates = [catalog.parse_gke_version(g.minimum) for g in catalog.GKE_VERSION_GATES]
    assert catalog.parse_gke_version(catalog.GKE_MIN_VERSION) == max(gates)
    assert catalog.GKE_MIN_VERSION == "1.35.0-gke.2745000"  # A4X Max on 1.35 (gke.md §3)


def test_tpu_stack_without_tpu_keys_still_needs_capacity():
    message = error("tpu", tpu__reservation=None, tpu__topology=None, tpu__slices=None)
    assert message.startswith("kimi-k3-1:tpu.reservation = (unset): Ironwood capacity comes from a reservation")


def test_other_tracks_section_is_not_required():
    """A GPU stack does not need a TPU reservation, and the reverse."""
    assert parse("gpu").tpu.reservation is None
    assert parse("tpu").gpu.reservation is None


def test_unset_stand_ins_mean_derived():
    """Pulumi.yaml declares "" / 0 as the default of optional keys (the CLI requires keys without one)."""
    cfg = parse("tpu", cluster__name="", storage__throughputMiBps="0")
    assert cfg.cluster_name == "kimi-k3-1-tpu"
    assert cfg.storage.throughputMiBps is None


def test_unlisted_zone_is_an_explicit_choice():
    """A4X Max zones are unpublished (gke.md §6): a reservation elsewhere in the region needs the override."""
    assert "allowUnlistedZone" in error("gpu", gcp__zone="us-central1-a")
    assert parse("gpu", gcp__zone="us-central1-a", gcp__allowUnlistedZone="true").gcp.zone == "us-central1-a"
    assert "must be a zone of gcp.region" in error("gpu", gcp__zone="europe-west4-a", gcp__allowUnlistedZone="true")


def test_fallback_machine_selectable():
    cfg = parse("gpu", gpu__machine="a4x")
    assert cfg.gpu.spec.machine_type == "a4x-highgpu-4g"
    assert "expected one of 'a4x-max' or 'a4x'" in error("gpu", gpu__machine="a3-ultra")


def test_project_defaults_reach_the_program_like_the_cli_does():
    """The CLI hands a program every Pulumi.yaml default the stack leaves out (pulumi `mergeConfig`), so a
    GPU stack also receives tpu.* defaults and must still validate."""
    config = committed("gpu")
    assert config["tpu.spot"] == "false" and config["tpu.reservation"] == ""
    assert config["storage.throughputMiBps"] == "0" and config["cluster.authorizedNetworks"] == "[]"
    assert parse("gpu").track == "gpu"
