"""A table of stack-file mistakes and valid-but-unusual settings, through the path users run (the offline plan on a
stack file, under the CLI's reading of it): each mistake exits 1 with one line naming the key the user changed,
each valid setting renders.

Each case starts from a fixture stack (tests/stacks) and adds raw YAML lines, so CLI-level spellings (unquoted
`yes`, duplicate keys, timestamps) reach the plan exactly as written. All cases of a table render in one
offline-plan run (`python -m tools.preview.plan`, one process per stack, as `make plan`)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from tests.conftest import run_plan, stack_document

K = "kimi-k3-1:"
SHA512 = "sha512:" + "ab" * 64

MISTAKES: list[tuple[str, list[str], str]] = [
    # (fixture stack, stack-file lines added or replacing a key, the key the one line must name)
    # Machine types: the table knows every CPU pool type, its shape and boot disk.
    ("gpu", ["systemPool.machineType: e2-standard-8"], "systemPool.machineType"),
    ("gpu", ["transferPool.machineType: n4-standard-32"], "transferPool.machineType"),
    ("tpu", ["systemPool.machineType: n2-standard-7"], "systemPool.machineType"),
    ("tpu", ["transferPool.machineType: c3-highmem-44"], "transferPool.machineType"),
    ("gpu", ["systemPool.machineType: c4-standard-8"], "systemPool.machineType"),
    ("tpu", ["systemPool.machineType: a4x-maxgpu-4g-metal"], "systemPool.machineType"),
    # Address space against the nodes the stack creates.
    ("gpu", ["network.nodesCidr: 10.0.0.0/28"], "network.nodesCidr"),
    ("tpu", ["network.nodesCidr: 10.0.0.0/29"], "network.nodesCidr"),
    ("gpu", ["network.podsCidr: 10.4.0.0/20"], "network.podsCidr"),
    ("tpu", ["network.podsCidr: 10.4.0.0/22"], "network.podsCidr"),
    # Namespaces of the system and of the charts the stack installs.
    ("gpu", ["kubernetes.namespace: kube-system"], "kubernetes.namespace"),
    ("tpu", ["kubernetes.namespace: lws-system"], "kubernetes.namespace"),
    ("gpu", ["kubernetes.namespace: nvidia-dra-driver-gpu"], "kubernetes.namespace"),
    ("tpu", ["kubernetes.namespace: default"], "kubernetes.namespace"),
    ("gpu", ["kubernetes.namespace: gke-managed-inference"], "kubernetes.namespace"),
    ("tpu", ["kubernetes.namespace: gmp-system"], "kubernetes.namespace"),
    ("gpu", ["kubernetes.namespace: kube-llm"], "kubernetes.namespace"),
    # The engine must read the weights volume.
    ("gpu", ["model.path: /weights"], "model.path"),
    ("tpu", ["model.path: /models/Kimi-K3.1-Pro"], "model.path"),
    # Image references Kubernetes cannot pull.
    ("tpu", ["tpu.engine: sglang-torchtpu", "tpu.sglangImage: registry.example/sglang-tpu"], "tpu.sglangImage"),
    ("tpu", ["tpu.engine: sglang-torchtpu", "tpu.sglangImage: registry.example/SGLang-TPU:day0"], "tpu.sglangImage"),
    ("tpu", ["tpu.engine: sglang-torchtpu", "tpu.sglangImage: registry.example/sglang@sha256:abc123"],
     "tpu.sglangImage"),
    ("tpu", ["tpu.engine: sglang-torchtpu", "tpu.sglangImage: registry.example/sglang-tpu:day0"], "tpu.sglangImage"),
    ("tpu", ["tpu.engine: sglang-torchtpu",
             "tpu.sglangImage: 'registry.example/sglang-tpu:day0@sha512:" + "5" * 128 + "'"], "tpu.sglangImage"),
    ("tpu", ["tpu.engine: sglang-torchtpu", "tpu.sglangImage: 'registry.example/sglang:day 0'"],
     "tpu.sglangImage"),
    ("gpu", ["images.eppDigest: sha256:" + "AB" * 32], "images.eppDigest"),
    ("gpu", ["images.lwsDigest: md5:" + "a" * 32], "images.lwsDigest"),
    ("tpu", ["images.stagingDigest: sha512:" + "a" * 64], "images.stagingDigest"),
    ("gpu", [f"images.eppDigest: '{SHA512}'"], "images.eppDigest"),
    # Paths and URLs.
    ("gpu", ["model.speculative: dflash", "model.draftModelPath: /models/../etc/drafter"], "model.draftModelPath"),
    ("gpu", ["model.speculative: dflash", "model.draftModelPath: /models"], "model.draftModelPath"),
    ("tpu", ["storage.checkpointPrefix: gs://my-bucket/models/"], "storage.checkpointPrefix"),
    ("gpu", ["storage.checkpointPrefix: models/../other/"], "storage.checkpointPrefix"),
    ("tpu", ["storage.checkpointPrefix: models//kimi/"], "storage.checkpointPrefix"),
    ("gpu", ["router.mode: gateway", "router.clientUrl: 10.0.0.10:8080"], "router.clientUrl"),
    ("gpu", ["router.mode: gateway", "router.clientUrl: ftp://10.0.0.10"], "router.clientUrl"),
    ("tpu", ["router.mode: gateway", "router.clientUrl: 'http://'"], "router.clientUrl"),
    ("gpu", ["benchmark.runId: Run 1"], "benchmark.runId"),
    ("tpu", ["benchmark.runId: ../escape"], "benchmark.runId"),
    # Zones: unlisted means not in the table, never anything.
    ("gpu", ["gcp.allowUnlistedZone: true", "gcp.zone: us-central1-z"], "gcp.zone"),
    ("tpu", ["gcp.zone: us-central1-d"], "gcp.zone"),
    ("gpu", ["gcp.region: us-central2", "gcp.zone: us-central2-a"], "gcp.region"),
    # Keys with no effect on this track or profile.
    ("gpu", ["tpu.spot: true"], "tpu.spot"),
    ("gpu", ["tpu.slices: 3"], "tpu.slices"),
    ("tpu", ["gpu.prefillGroups: 2"], "gpu.prefillGroups"),
    ("tpu", ["gpu.prefillNodesPerGroup: 5"], "gpu.prefillNodesPerGroup"),
    ("tpu", ["model.replicatedWeightsGB: 10"], "model.replicatedWeightsGB"),  # removed: an unknown key now
    ("tpu", ["tpu.sglangImage: registry.example/sglang-tpu:day0"], "tpu.sglangImage"),
    ("gpu", ["router.gatewayClass: gke-l7-regional-external-managed"], "router.gatewayClass"),
    ("gpu", ["model.speculativeTokens: 5"], "model.speculativeTokens"),
    ("tpu", ["model.draftModelPath: /models/nextn"], "model.draftModelPath"),
    ("gpu", ["'kubernetes:namespace': llm"], "kubernetes:namespace"),
    ("tpu", ["'gcp:project': other-project"], "gcp:project"),
    # Cross-field rules name the key that changed.
    ("gpu", ["gpu.prefillGroups: 4"], "gpu.prefillGroups"),
    ("gpu", ["gpu.decodeNodesPerGroup: 3"], "gpu.decodeNodesPerGroup"),
    ("tpu", ["tpu.tensorParallel: 64"], "tpu.tensorParallel"),
    ("tpu", ["tpu.launch: dp-across-hosts"], "tpu.launch"),
    ("gpu", ["benchmark.enabled: true", "benchmark.outputTokensPerTurn: 200000"], "benchmark.outputTokensPerTurn"),
    ("tpu", ["benchmark.enabled: true", "benchmark.inputTokensPerTurn: 100000"], "benchmark.inputTokensPerTurn"),
    ("gpu", ["gcp.project: goog-weights-team"], "gcp.project"),
    ("tpu", ["cluster.name: kimi-inference-tpu-prod-1"], "cluster.name"),
    ("tpu", ["tpu.topology: 8x8x8"], "tpu.topology"),
    ("tpu", ["tpu.topology: 2x2"], "tpu.topology"),
    ("tpu", ["tpu.topology: 2x4x4", "tpu.tensorParallel: 64"], "tpu.topology"),
    # Values read as the Pulumi CLI reads them.
    ("gpu", ["gcp.allowUnlistedZone: yes"], "gcp.allowUnlistedZone"),
    ("tpu", ["monitoring.enabled: 'on'"], "monitoring.enabled"),
    ("gpu", ["gpu.decodeGroups: 1.5"], "gpu.decodeGroups"),
    ("tpu", ["benchmark.concurrency: .nan"], "benchmark.concurrency"),
    ("gpu", ["storage.bucketExists: 1"], "storage.bucketExists"),
    ("gpu", ["gpu.decodeGroups: 2", "gpu.decodeGroups: 1"], "gpu.decodeGroups"),
    ("tpu", ["cluster.maintenanceExclusionStart: 2026-11-01T00:00:00Z"], "cluster.maintenanceExclusionStart"),
    ("gpu", ["cluster.maintenanceExclusionStart: '2026-11-31T00:00:00Z'"], "cluster.maintenanceExclusionStart"),
    ("tpu", ["cluster.releaseChannel: extended"], "cluster.releaseChannel"),
    ("gpu", ["hfToken: hf_plainTextToken0123456789"], "hfToken"),
    ("tpu", ["gcp.zone:"], "gcp.zone"),
    ("gpu", ["lifecycle.maxLifetimeHours: 0"], "lifecycle.maxLifetimeHours"),
]

VALID: list[tuple[str, list[str]]] = [
    ("gpu", ["cluster.releaseChannel: EXTENDED"]),
    ("tpu", ["cluster.maintenanceExclusionStart: '2026-11-01T09:00:00+09:00'"]),
    ("gpu", ["cluster.maintenanceExclusionStart: '2026-11-01T00:00:00.250Z'"]),
    ("tpu", ["tpu.slices: 1", "tpu.hicacheRatio: 1"]),
    ("gpu", ["lifecycle.maxLifetimeHours: 2160"]),
    ("tpu", ["cluster.maintenanceWindowStart: 13:30"]),
    ("tpu", ["model.contextLength: 8192"]),
    ("gpu", ["gcp.allowUnlistedZone: true", "gcp.zone: us-central1-f"]),
    ("gpu", ["benchmark.concurrency: 0x10", "storage.stagingWorkers: 1e1", "monitoring.enabled: TRUE"]),
    ("tpu", ["kubernetes.namespace: team-a-inference"]),
    ("gpu", ["systemPool.machineType: c3-standard-8", "transferPool.machineType: n2-standard-32"]),
    ("gpu", ["cost.tpuChipHourUsd: '11.20'", "images.tpuEngineDigest: 'sha256:" + "c" * 64 + "'"]),
    ("tpu", ["cost.gpuNodeHourUsd: '98.00'"]),
    ("gpu", ["router.mode: gateway", "router.clientUrl: 'https://gateway.internal.example:8443/'"]),
    ("tpu", ["benchmark.runId: 2026-12-01_run-7"]),
    ("gpu", ["network.nodesCidr: 10.0.0.0/27"]),
    ("tpu", ["storage.bucketName:"]),
    ("tpu", ["tpu.engine: sglang-torchtpu",
             "tpu.sglangImage: 'registry.example:5000/sglang-tpu:day0@sha256:" + "5" * 64 + "'"]),
]


def stack_lines(track: str, lines: list[str]) -> str:
    """The fixture stack with `lines` (project keys unless namespaced) appended; a key already there is dropped
    first unless the case repeats it on purpose (duplicate-key cases list it twice)."""
    config = stack_document(track)["config"]
    keys = [line.split(":", 1)[0] if not line.startswith("'") else line[1:].split("'", 1)[0] for line in lines]
    repeated = {k for k in keys if keys.count(k) > 1}
    added = [(k if ":" in k else f"{K}{k}") for k in keys]
    kept = {k: v for k, v in config.items() if k not in added or k in repeated}
    text = yaml.safe_dump({"config": kept}, sort_keys=False)
    return text + "".join(f"  {line if line.startswith(chr(39)) or ':' in line.split(' ', 1)[0][:-1] else K + line}\n"
                          for line in lines)


def render(tmp_path: Path, prefix: str, cases: list[tuple[str, list[str]]]):
    files = []
    for index, (track, lines) in enumerate(cases):
        path = tmp_path / f"Pulumi.{prefix}{index:02d}.yaml"
        path.write_text(stack_lines(track, lines))
        files += ["--stack-file", str(path)]
    return run_plan(tmp_path / "out", *files)


_NAMED = re.compile(r"^(?:Pulumi\.\S+?\.yaml:(?:\d+:)? ?)?(?:mapping key \"|unknown top-level key ')?"
                    r"(?P<key>[A-Za-z0-9_.:-]+?)\"?(?: = |: | is | already)")


@pytest.fixture(scope="module")
def mistakes(tmp_path_factory):
    return render(tmp_path_factory.mktemp("mistakes"), "m", [(t, lines) for t, lines, _ in MISTAKES])


def test_the_tables_are_big_enough():
    assert len(MISTAKES) >= 60 and len(VALID) >= 15


def test_every_mistake_stops_the_plan_with_one_line_naming_the_key(mistakes):
    assert mistakes.returncode == 1
    assert "Traceback" not in mistakes.stderr
    lines = {m["stack"]: m["message"] for m in re.finditer(r"^plan (?P<stack>m\d\d): error: (?P<message>.*)$",
                                                            mistakes.stderr, re.M)}
    problems = []
    for index, (_, changes, key) in enumerate(MISTAKES):
        message = lines.get(f"m{index:02d}")
        named = _NAMED.match(message or "")
        expected = key if ":" in key else f"{K}{key}"
        if named is None or named["key"] != expected:
            problems.append(f"m{index:02d} {changes}: expected {expected}, got {message!r}")
    assert not problems, "\n".join(problems)
    assert len(mistakes.stderr.strip().splitlines()) == len(MISTAKES), mistakes.stderr


@pytest.mark.parametrize("track,lines", VALID)
def test_every_valid_but_unusual_setting_is_accepted(tmp_path, track, lines):
    """What `__main__.py` runs before any resource exists: the CLI's reading, then config and capacity checks."""
    from components.config import PROJECT, parse_config
    from components.plan.capacity import serving_capacity
    from tools.preview.render import project_file, stack_config

    path = tmp_path / "Pulumi.valid.yaml"
    path.write_text(stack_lines(track, lines))
    config, _ = stack_config(path, project_file())
    cfg = parse_config({k[len(PROJECT) + 1:]: v for k, v in config.items() if k.startswith(f"{PROJECT}:")})
    serving_capacity(cfg)


def test_the_valid_settings_together_render_a_whole_plan(tmp_path):
    """The same settings, all at once per track (two stacks, one plan run), through the whole program."""
    combined = []
    for track in ("gpu", "tpu"):
        lines: dict[str, str] = {}
        for case_track, case_lines in VALID:
            if case_track == track:
                lines.update((line.split(":", 1)[0], line) for line in case_lines)
        combined.append((track, list(lines.values())))
    proc = render(tmp_path, "v", combined)
    assert proc.returncode == 0, proc.stderr
