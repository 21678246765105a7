"""Mistakes a user makes in a stack file stop before any resource exists, with one line naming the key.

Each case starts from a small valid config of its own (not the committed stack files) and changes one thing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from components.config import ConfigError, check_namespaces, parse_config
from tests.conftest import run_plan
from tools.preview.stack_file import StackFileError, load_yaml

BASE = {
    "gpu": {"track": "gpu", "gcp.project": "my-gcp-project", "gcp.zone": "us-central1-b",
            "gpu.reservation": "my-a4x-max-reservation"},
    "tpu": {"track": "tpu", "gcp.project": "my-gcp-project", "gcp.zone": "us-central1-c",
            "tpu.reservation": "my-tpu7x-reservation"},
}
GCE = "(https://cloud.google.com/compute/docs/naming-resources)"
PROJECT_RULES = "(https://cloud.google.com/resource-manager/docs/creating-managing-projects)"
BUCKET_RULES = "(https://cloud.google.com/storage/docs/naming-buckets)"
GKE_RULES = "(https://cloud.google.com/kubernetes-engine/docs/reference/rest/v1/projects.locations.clusters)"


def error(track: str, drop: tuple[str, ...] = (), **changes: Any) -> str:
    """The one-line error of BASE[track] with `changes` (keys with `__` for `.`) and without the keys in `drop`."""
    raw = {key: value for key, value in BASE[track].items() if key not in drop}
    for key, value in changes.items():
        raw[key.replace("__", ".")] = value if isinstance(value, str) else json.dumps(value)
    with pytest.raises(ConfigError) as info:
        parse_config(raw)
    message = str(info.value)
    assert "\n" not in message, message
    return message


def test_base_configs_are_valid():
    for track in BASE:
        parse_config(BASE[track])


NAME = "must be 1-63 characters of a-z, 0-9 and '-', start with a letter and not end with '-'"


@pytest.mark.parametrize("track,changes,expected", [
    # Reservation names go into projects/P/reservations/R/reservationBlocks/B/...: one Compute Engine name each.
    ("gpu", {"gpu__reservation": "My-Reservation"}, f"kimi-k3-1:gpu.reservation = 'My-Reservation': {NAME} {GCE}"),
    ("gpu", {"gpu__reservation": "my reservation"}, f"kimi-k3-1:gpu.reservation = 'my reservation': {NAME} {GCE}"),
    ("gpu", {"gpu__reservation": ["res-a", "res-b"]},
     "kimi-k3-1:gpu.reservation = '[\"res-a\", \"res-b\"]': expected a single value, not a YAML list or map"),
    ("tpu", {"tpu__reservation": "res_1"}, f"kimi-k3-1:tpu.reservation = 'res_1': {NAME} {GCE}"),
    ("gpu", {"gpu__reservationProject": "Shared_Project"},
     "kimi-k3-1:gpu.reservationProject = 'Shared_Project': a project ID is 6-30 characters of a-z, 0-9 and '-', "
     f"starting with a letter and not ending with '-' {PROJECT_RULES}"),
    ("tpu", {"tpu__reservationProject": "proj"},
     "kimi-k3-1:tpu.reservationProject = 'proj': a project ID is 6-30 characters of a-z, 0-9 and '-', "
     f"starting with a letter and not ending with '-' {PROJECT_RULES}"),
    ("gpu", {"gpu__reservationBlock": "Block A"}, f"kimi-k3-1:gpu.reservationBlock = 'Block A': {NAME} {GCE}"),
    ("gpu", {"gpu__reservationBlock": "block-a", "gpu__reservationSubBlocks": ["sub-"]},
     f"kimi-k3-1:gpu.reservationSubBlocks = 'sub-': {NAME} {GCE}"),
    # Machine types are Compute Engine names too.
    ("gpu", {"systemPool__machineType": "N2-standard-8"},
     f"kimi-k3-1:systemPool.machineType = 'N2-standard-8': {NAME} {GCE}"),
    ("tpu", {"transferPool__machineType": "c3 standard 44"},
     f"kimi-k3-1:transferPool.machineType = 'c3 standard 44': {NAME} {GCE}"),
    # Cluster names (the network, node account and workload policies derive from them).
    ("gpu", {"cluster__name": "Kimi"},
     f"kimi-k3-1:cluster.name = 'Kimi': must be 1-40 characters of a-z, 0-9 and '-', start with a letter and not "
     f"end with '-' {GKE_RULES}"),
    ("gpu", {"cluster__name": "kimi-"},
     f"kimi-k3-1:cluster.name = 'kimi-': must be 1-40 characters of a-z, 0-9 and '-', start with a letter and not "
     f"end with '-' {GKE_RULES}"),
    ("gpu", {"kubernetes__namespace": "Kimi"},
     "kimi-k3-1:kubernetes.namespace = 'Kimi': a namespace is 1-63 characters of a-z, 0-9 and '-' "
     "(https://kubernetes.io/docs/concepts/overview/working-with-objects/names/#dns-label-names)"),
    # Every Cloud Storage bucket name rule.
    ("gpu", {"storage__bucketName": "Weights"},
     "kimi-k3-1:storage.bucketName = 'Weights': not a valid bucket name: only a-z, 0-9, '-', '_' and '.', "
     f"starting and ending with a letter or digit {BUCKET_RULES}"),
    ("gpu", {"storage__bucketName": "ab"},
     "kimi-k3-1:storage.bucketName = 'ab': not a valid bucket name: 3-63 characters (up to 222 with dots, each "
     f"dot-separated part 1-63) {BUCKET_RULES}"),
    ("gpu", {"storage__bucketName": "w" * 64},
     f"kimi-k3-1:storage.bucketName = '{'w' * 64}': not a valid bucket name: 3-63 characters (up to 222 with dots, "
     f"each dot-separated part 1-63) {BUCKET_RULES}"),
    ("gpu", {"storage__bucketName": "weights..example.com"},
     "kimi-k3-1:storage.bucketName = 'weights..example.com': not a valid bucket name: 3-63 characters (up to 222 "
     f"with dots, each dot-separated part 1-63) {BUCKET_RULES}"),
    ("gpu", {"storage__bucketName": "192.168.5.4"},
     f"kimi-k3-1:storage.bucketName = '192.168.5.4': not a valid bucket name: must not look like an IP address "
     f"{BUCKET_RULES}"),
    ("gpu", {"storage__bucketName": "goog-weights"},
     "kimi-k3-1:storage.bucketName = 'goog-weights': not a valid bucket name: must not begin with 'goog' or "
     f"contain 'google' or a close misspelling {BUCKET_RULES}"),
    ("gpu", {"storage__bucketName": "my-g00gle-weights"},
     "kimi-k3-1:storage.bucketName = 'my-g00gle-weights': not a valid bucket name: must not begin with 'goog' or "
     f"contain 'google' or a close misspelling {BUCKET_RULES}"),
    # Numbers that are not finite.
    ("gpu", {"cost__gpuNodeHourUsd": "inf"}, "kimi-k3-1:cost.gpuNodeHourUsd = 'inf': expected a finite number"),
    ("gpu", {"cost__cpuNodeHourUsd": "nan"}, "kimi-k3-1:cost.cpuNodeHourUsd = 'nan': expected a finite number"),
    ("tpu", {"cost__tpuChipHourUsd": "1e999"}, "kimi-k3-1:cost.tpuChipHourUsd = '1e999': expected a finite number"),
    ("gpu", {"benchmark__conversations": "inf"}, "kimi-k3-1:benchmark.conversations = 'inf': expected a finite number"),
    ("tpu", {"model__contextLength": ".inf"}, "kimi-k3-1:model.contextLength = '.inf': expected a finite number"),
    # A benchmark session must fit the served context; the key the user changed is named.
    ("tpu", {"benchmark__enabled": "true", "model__contextLength": 49152},
     "kimi-k3-1:model.contextLength = 49152: a benchmark session of 32768 system + 8 turns x (2048 in + 512 out) = "
     "53,248 tokens exceeds the served context of 49,152 tokens (model.contextLength)"),
    ("gpu", {"benchmark__enabled": "true", "benchmark__systemPromptTokens": 1_100_000},
     "kimi-k3-1:benchmark.systemPromptTokens = 1100000: a benchmark session of 1100000 system + 8 turns x (2048 in + "
     "512 out) = 1,120,480 tokens exceeds the served context of 1,048,576 tokens (model.contextLength's gpu default)"),
    ("gpu", {"benchmark__enabled": "true", "benchmark__turnsPerConversation": 500},
     "kimi-k3-1:benchmark.turnsPerConversation = 500: a benchmark session of 32768 system + 500 turns x (2048 in + "
     "512 out) = 1,312,768 tokens exceeds the served context of 1,048,576 tokens (model.contextLength's gpu default)"),
    # A benchmark the stack configures is checked with benchmark.enabled false too (issue 45): the bench driver
    # turns it on for its second `up`, when the cluster already exists.
    ("gpu", {"benchmark__turnsPerConversation": 500},
     "kimi-k3-1:benchmark.turnsPerConversation = 500: a benchmark session of 32768 system + 500 turns x (2048 in + "
     "512 out) = 1,312,768 tokens exceeds the served context of 1,048,576 tokens (model.contextLength's gpu default); "
     "checked with benchmark.enabled false too: `python -m tools bench` turns it on once the cluster exists"),
])
def test_mistake_rejected_with_one_line(track, changes, expected):
    assert error(track, **changes) == expected


def test_names_that_read_as_numbers_are_names():
    parse_config({**BASE["gpu"], "cluster.name": "nan", "gpu.reservation": "inf"})


def test_session_that_fits_is_accepted():
    # 32768 + 8 x 2560 = 53,248 tokens fit 65,536; with 49,152 they fit once the turns are fewer.
    parse_config({**BASE["tpu"], "benchmark.enabled": "true", "model.contextLength": "65536"})
    parse_config({**BASE["tpu"], "benchmark.enabled": "true", "model.contextLength": "49152",
                  "benchmark.turnsPerConversation": "6"})
    # With the benchmark off, its session defaults do not bound the served context.
    parse_config({**BASE["tpu"], "model.contextLength": "8192"})


@pytest.mark.parametrize("keys,expected", [
    (["kimi-k31:gcp.zone"], "kimi-k31:gcp.zone = (unset): unknown namespace 'kimi-k31'; did you mean "
                            "kimi-k3-1:gcp.zone?"),
    (["gpc:project"], "gpc:project = (unset): unknown namespace 'gpc'; did you mean gcp:project?"),
    (["kubernetse:context"], "kubernetse:context = (unset): unknown namespace 'kubernetse'; did you mean "
                             "kubernetes:context?"),
    (["kubernetes:namespace"], "kubernetes:namespace = (unset): has no effect: stack settings of a provider configure "
                               "only its default provider (https://www.pulumi.com/docs/iac/concepts/resources/"
                               "providers/#default-provider-configuration), and this program gives every resource an "
                               "explicit one (kubernetes from the kubeconfig of the cluster the stack creates); "
                               "remove it"),
    (["gcp:project"], "gcp:project = (unset): has no effect: stack settings of a provider configure only its default "
                      "provider (https://www.pulumi.com/docs/iac/concepts/resources/providers/"
                      "#default-provider-configuration), and this program gives every resource an explicit one (gcp "
                      "from kimi-k3-1:gcp.project and kimi-k3-1:gcp.region); remove it"),
    (["aws:region"], "aws:region = (unset): unknown namespace 'aws'; this program reads kimi-k3-1:, gcp:, "
                     "kubernetes:, pulumi: keys only"),
])
def test_unknown_namespace_rejected_with_did_you_mean(keys, expected):
    with pytest.raises(ConfigError) as info:
        check_namespaces(["kimi-k3-1:track", "pulumi:tags", *keys])
    assert str(info.value) == expected


def test_known_namespaces_pass():
    check_namespaces(["kimi-k3-1:track", "pulumi:tags", "pulumi:disable-default-providers"])


def test_every_resource_has_an_explicit_provider(plans):
    """Why gcp:* and kubernetes:* stack keys are refused: no resource of either plan uses a default provider."""
    for plan in plans.values():
        providers = {r["name"] for r in plan.resources if r["type"].startswith("pulumi:providers:")}
        charts = {r["name"] for r in plan.of_type("kubernetes:helm.sh/v4:Chart")}
        for resource in plan.resources:
            if resource["type"].startswith(("gcp:", "kubernetes:")) and resource["parent"] not in charts:
                assert resource.get("options", {}).get("provider") in providers, resource["name"]


def test_yaml_syntax_error_names_file_and_line(tmp_path: Path):
    bad = tmp_path / "Pulumi.typo.yaml"
    bad.write_text("config:\n  kimi-k3-1:track: gpu\n  kimi-k3-1:gcp.zone: [us-central1-b\n")
    with pytest.raises(StackFileError) as info:
        load_yaml(bad)
    line = str(info.value)
    assert line.startswith("Pulumi.typo.yaml:4:1: not valid YAML: "), line
    proc = run_plan(tmp_path / "out", "--stack-file", str(bad))
    assert proc.returncode != 0
    assert proc.stderr.strip().splitlines() == [f"plan typo: error: {line}"], proc.stderr


# ------------------------------------------------------------------------ the last corners (new users' stack files)
@pytest.mark.parametrize("track,changes,expected", [
    # A CIDR without its prefix length is a single address: named as such, not "a /32 holds -3 node addresses".
    ("gpu", {"network__nodesCidr": "10.0.0.0"},
     "kimi-k3-1:network.nodesCidr = '10.0.0.0': give the prefix length, e.g. '10.0.0.0/20': an address alone is a "
     "single address (/32)"),
    ("gpu", {"cluster__controlPlaneAccess": "ip", "cluster__authorizedNetworks": ["203.0.113.7"]},
     "kimi-k3-1:cluster.authorizedNetworks = '203.0.113.7': give the prefix length, e.g. '203.0.113.7/32'"),
    # An overlap names the range the user changed, not the default it runs into.
    ("gpu", {"network__nodesCidr": "10.4.0.0/20"},
     "kimi-k3-1:network.nodesCidr = '10.4.0.0/20': overlaps network.podsCidr '10.4.0.0/14'"),
    ("gpu", {"network__stagingPodsCidr": "10.0.0.0/20"},
     "kimi-k3-1:network.stagingPodsCidr = '10.0.0.0/20': overlaps network.nodesCidr '10.0.0.0/20'"),
    # A zone error suggests a zone the track's accelerator check then accepts.
    ("gpu", {"gcp__zone": "us-east1-b"},
     "kimi-k3-1:gcp.zone = 'us-east1-b': must be a zone of gcp.region 'us-central1'; a4x-maxgpu-4g-metal is known "
     "in us-central1-b"),
    ("tpu", {"gcp__zone": "us-east1-b"},
     "kimi-k3-1:gcp.zone = 'us-east1-b': must be a zone of gcp.region 'us-central1'; tpu7x-standard-4t is known in "
     "us-central1-c, us-central1-ai1a"),
    # Benchmark settings that cannot run as written.
    ("gpu", {"benchmark__concurrency": 100},
     "kimi-k3-1:benchmark.concurrency = 100: benchmark.concurrency (100) exceeds benchmark.conversations (64)"),
    ("gpu", {"benchmark__conversations": 8},
     "kimi-k3-1:benchmark.conversations = 8: benchmark.concurrency (32) exceeds benchmark.conversations (8)"),
    # Spot capacity takes no reservation, so a reservation's project would be dropped without a word.
    ("tpu", {"tpu__reservation": None, "tpu__spot": True, "tpu__reservationProject": "shared-project"},
     "kimi-k3-1:tpu.reservationProject = 'shared-project': tpu.spot=true uses no reservation"),
    # The populator's transfer Job (created by GKE, outside the plan's scheduling proof) requests 24 vCPU.
    ("gpu", {"transferPool__machineType": "n2-standard-16"},
     "kimi-k3-1:transferPool.machineType = 'n2-standard-16': the Volume Populator's transfer Job requests 24 vCPU "
     "and a n2-standard-16 node offers"),
])
def test_last_corners_rejected_with_one_line(track, changes, expected):
    drop = tuple(key.replace("__", ".") for key, value in changes.items() if value is None)
    message = error(track, drop, **{k: v for k, v in changes.items() if v is not None})
    assert message.startswith(expected), message


def test_a_transfer_pool_of_zero_nodes_needs_no_size():
    raw = dict(BASE["gpu"], **{"transferPool.nodeCount": "0", "transferPool.machineType": "n2-standard-8"})
    parse_config(raw)


@pytest.mark.parametrize("field,value", [("kdaHeads", "64"), ("mlaLatentDim", "640"), ("kdaLayers", "68")])
def test_geometry_other_than_the_published_one_is_named_with_what_the_engines_do(field, value):
    """The engines read the checkpoint's config.json, never these keys: a value other than Kimi K3's published one
    only moves the plan's figures, so the plan says so (and `pulumi up` checks the staged config.json)."""
    cfg = parse_config(dict(BASE["gpu"], **{f"model.{field}": value}))
    [line] = [w for w in cfg.warnings if f"model.{field}" in w]
    assert line.startswith(f"warning: kimi-k3-1:model.{field} = {value} is not Kimi K3's published ")
    assert "the engines read the checkpoint's config.json, not this key" in line
    assert not [w for w in parse_config(BASE["gpu"]).warnings if "model." in w]


def test_an_absurd_cache_geometry_is_blamed_on_the_key_changed_not_the_context():
    from components.plan.capacity import serving_capacity

    cfg = parse_config(dict(BASE["gpu"], **{"model.mlaLatentDim": "100000"}))
    with pytest.raises(ConfigError) as info:
        serving_capacity(cfg)
    assert str(info.value).startswith("kimi-k3-1:model.mlaLatentDim = 100000: one sequence of 1,048,576 tokens")
