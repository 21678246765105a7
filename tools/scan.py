"""Scan the rendered manifests with checkov, custom resources' pod templates included.

    make plan && python -m tools.scan --checkov /path/to/checkov     # every stack in build/plan/

Kubernetes scanners only read kinds they know, so the pod templates inside custom resources (DisaggregatedSet
roles, LeaderWorkerSet leader and worker templates) are written out as Pods beside the manifests
(`expand()`); tests/test_netpol.py walks pod templates with the same `pod_templates()`. checkov is not a project
dependency: install it anywhere (docs/security.md) and pass its path. A failed check not in `EXCEPTIONS` (or
an exception no longer needed) fails the run.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
PLAN = ROOT / "build" / "plan"
OUT = ROOT / "build" / "scan"
CORE_POD_KINDS = {"Pod", "Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "CronJob"}


def pod_templates(manifest: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(path, metadata, pod spec) of every pod template inside an object: any mapping whose `spec` holds
    `containers` (pod templates of workloads and of custom resources alike)."""
    todo: list[tuple[str, Any]] = [("", manifest)]
    while todo:
        path, node = todo.pop(0)
        if isinstance(node, dict):
            if isinstance(node.get("spec"), dict) and isinstance(node["spec"].get("containers"), list):
                yield path, node.get("metadata") or {}, node["spec"]
            todo += [(f"{path}.{k}" if path else k, v) for k, v in node.items()]
        elif isinstance(node, list):
            todo += [(f"{path}[{i}]", v) for i, v in enumerate(node)]


def expand(manifests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The manifests plus one Pod per pod template of each custom resource (named after the resource and path)."""
    extracted = []
    for manifest in manifests:
        if manifest.get("kind") in CORE_POD_KINDS or manifest.get("kind") == "PodTemplate":
            continue
        meta = manifest.get("metadata") or {}
        for path, template_meta, spec in pod_templates(manifest):
            suffix = "".join(c if c.isalnum() else "-" for c in path.lower()).strip("-")
            origin = f"{manifest['kind']}/{meta.get('name')}:{path}"
            extracted.append({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": f"{meta.get('name')}-{suffix}"[:253], "namespace": meta.get("namespace"),
                             "labels": template_meta.get("labels") or {},
                             "annotations": {"kimi-k3-1/extracted-from": origin}},
                "spec": spec,
            })
    return manifests + extracted


VLLM = "Pod.*.*-vllm-spec-roles-*"
SGLANG = "Pod.*.*-sglang-spec-leaderworkertemplate-*"
ASAPD = "DaemonSet.kube-system.asapd-lite"
ENGINES = (VLLM, SGLANG)
PRIVILEGED = (VLLM, ASAPD)
"""Resource names as checkov reports them: `<Kind>.<namespace>.<name>` (extracted templates are Pods)."""

EXCEPTIONS: dict[str, tuple[str, tuple[str, ...]]] = {
    "CKV_K8S_10": ("CPU requests: asapd-lite requests memory and hugepages only, as Cluster Toolkit's installer "
                   "does (hugepages need requests equal to limits)", (ASAPD,)),
    "CKV_K8S_11": ("CPU limits: engines and the NIC initializer get CPU requests only; a CFS limit would throttle "
                   "them", (*ENGINES, ASAPD)),
    "CKV_K8S_15": ("imagePullPolicy Always: the images are pinned by tag and, with images.*Digest, by digest; "
                   "IfNotPresent starts a replaced accelerator pod without a registry round trip", (*ENGINES, ASAPD)),
    "CKV_K8S_16": ("privileged: components/hardening.py EXCEPTIONS (DeepEP/NVSHMEM; MRDMA NIC setup)", PRIVILEGED),
    "CKV_K8S_17": ("host PID namespace: asapd-lite, components/hardening.py EXCEPTIONS", (ASAPD,)),
    "CKV_K8S_18": ("host IPC namespace: CUDA IPC across engines, components/hardening.py EXCEPTIONS", (VLLM,)),
    "CKV_K8S_19": ("host network namespace: asapd-lite, components/hardening.py EXCEPTIONS", (ASAPD,)),
    "CKV_K8S_20": ("allowPrivilegeEscalation: implied by privileged (the API rejects false with privileged)",
                   PRIVILEGED),
    "CKV_K8S_22": ("read-only root filesystem: the engines write to their images (vLLM caches; the sglang-jax "
                   "install), asapd-lite configures the host; components/hardening.py ROOT_IMAGES",
                   (*ENGINES, ASAPD)),
    "CKV_K8S_23": ("root user: the engine images run as root (ROOT_IMAGES); asapd-lite is privileged",
                   (*ENGINES, ASAPD)),
    "CKV_K8S_28": ("NET_RAW: privileged containers hold every capability", PRIVILEGED),
    "CKV_K8S_29": ("pod security context: privileged pods, whose containers run unconfined anyway", PRIVILEGED),
    "CKV_K8S_31": ("seccomp: privileged pods run unconfined; RuntimeDefault is not asserted for them", PRIVILEGED),
    "CKV_K8S_35": ("secret in an env var: llm-d's guides pass HF_TOKEN from the llm-d-hf-token Secret; the policy "
                   "pack's hf-token-via-secret rule keeps it to that Secret", ENGINES),
    "CKV_K8S_37": ("capabilities: privileged containers hold all; the TPU engine drops only NET_RAW (which "
                   "capabilities the TPU runtime uses is not published)", (*PRIVILEGED, SGLANG)),
    "CKV_K8S_40": ("low UID: the engine images and asapd-lite run as root", (*ENGINES, ASAPD)),
    "CKV_K8S_43": ("image digest: set by config (images.*Digest; docs/security.md); the committed stacks pull by "
                   "pinned tag because a digest is read from the registry when the operator pins it", ("*",)),
}
"""checkov check id -> (why the stacks fail it on purpose, the resources that may fail it). docs/security.md
lists the same."""


def expected(check: str, resource: str) -> bool:
    reason_patterns = EXCEPTIONS.get(check)
    return bool(reason_patterns) and any(fnmatch.fnmatchcase(resource, p) for p in reason_patterns[1])


def scan(stack: Path, checkov: str) -> dict[str, Any]:
    manifests = [m for m in yaml.safe_load_all((stack / "manifests.yaml").read_text()) if m]
    out = OUT / stack.name
    out.mkdir(parents=True, exist_ok=True)
    target = out / "manifests.yaml"
    target.write_text(yaml.safe_dump_all(expand(manifests), sort_keys=False))
    proc = subprocess.run([checkov, "-f", str(target), "--framework", "kubernetes", "-o", "json", "--compact",
                           "--skip-download"], capture_output=True, text=True, timeout=600)
    report = json.loads(proc.stdout or "{}")
    results = report.get("results", {}) if isinstance(report, dict) else {}
    failed = results.get("failed_checks", [])
    return {"passed": len(results.get("passed_checks", [])), "failed": len(failed),
            "failures": sorted({(f["check_id"], f["resource"]) for f in failed})}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkov", required=True, help="path of a checkov executable")
    parser.add_argument("--plan", type=Path, default=PLAN, help="plan folder (default: build/plan)")
    parser.add_argument("--stack", action="append", help="stack folder name in the plan folder (default: all)")
    args = parser.parse_args()
    stacks = [args.plan / s for s in args.stack] if args.stack else sorted(p for p in args.plan.iterdir() if p.is_dir())
    unexpected = 0
    for stack in stacks:
        result = scan(stack, args.checkov)
        failures = result["failures"]
        bad = [(c, r) for c, r in failures if not expected(c, r)]
        unexpected += len(bad)
        print(f"{stack.name}: {result['passed']} passed, {result['failed']} failed "
              f"({result['failed'] - len(bad)} listed exceptions, {len(bad)} not listed)")
        for check, resource in bad:
            print(f"  FAILED {check} {resource}")
    sys.exit(1 if unexpected else 0)


if __name__ == "__main__":
    main()
