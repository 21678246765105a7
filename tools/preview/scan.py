"""Scan the rendered manifests with checkov, custom resources' pod templates included.

    make checkov plan && python -m tools scan               # every stack in build/plan/, pinned checkov
    python -m tools scan --with-benchmark                   # and each stack with the benchmark Jobs on
    python -m tools scan --write-doc                        # ... and rewrite docs/security.md's scan tables

Kubernetes scanners only read kinds they know, so the pod templates inside custom resources (DisaggregatedSet
roles, LeaderWorkerSet leader and worker templates) are written out as Pods beside the manifests
(`expand()`); tests/platform/test_netpol.py walks pod templates with the same `pod_templates()`. checkov is pinned in
requirements-checkov.txt and lives in its own virtualenv (`make checkov`), because its dependencies pin versions
the project's own .venv cannot take. A failed check not in `EXCEPTIONS` (or, with --with-benchmark, an exception no
scanned failure needs) fails the run; tests/tools/preview/test_scan.py holds docs/security.md's tables to a real run.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tools import prog

ROOT = Path(__file__).resolve().parents[2]
PLAN = ROOT / "build" / "plan"
OUT = ROOT / "build" / "scan"
CHECKOV = ROOT / ".venv-checkov" / "bin" / "checkov"
"""Where `make checkov` installs the pinned checkov (requirements-checkov.txt)."""
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
TPU_ENGINE = "Pod.*.*-vllm-tpu-spec-leaderworkertemplate-*"
ASAPD = "DaemonSet.kube-system.asapd-lite"
STAGING = "Job.*.*-weights-stage-*"
EPP = "Deployment.*.*-epp"
LWS = "Deployment.lws-system.*-lws-controller-manager"
DRA_CONTROLLER = "Deployment.nvidia-dra-driver-gpu.nvidia-dra-driver-gpu-controller"
DRA_PLUGIN = "DaemonSet.nvidia-dra-driver-gpu.nvidia-dra-driver-gpu-kubelet-plugin"
LWS_ROLES = "ClusterRole.default.*-lws-*-role"
KEDA = "Deployment.keda.keda-*"
KEDA_ROLE = "ClusterRole.default.keda-operator-minimal-cluster-role"
ENGINES = (VLLM, TPU_ENGINE)
PRIVILEGED = (VLLM, ASAPD)
CHARTS = (EPP, LWS, DRA_CONTROLLER, DRA_PLUGIN, LWS_ROLES, KEDA, KEDA_ROLE)
"""Resource names as checkov reports them: `<Kind>.<namespace>.<name>` (extracted templates are Pods). CHARTS are
objects the pinned Helm charts render (the router's EPP, the LWS controller, the NVIDIA DRA driver, KEDA): their pod
specs come from the chart's templates, and the values the program sets do not reach these fields."""


@dataclass(frozen=True)
class Allowed:
    """Failed checks a set of resources may have on purpose, and why (docs/security.md shows the same table)."""

    checks: tuple[str, ...]
    who: tuple[str, ...]
    why: str


EXCEPTIONS: tuple[Allowed, ...] = (
    Allowed(("CKV_K8S_10",), (ASAPD,), "CPU requests: asapd-lite requests memory and hugepages only, as Cluster "
            "Toolkit's installer does (hugepages need requests equal to limits)"),
    Allowed(("CKV_K8S_11",), (*ENGINES, ASAPD, STAGING), "CPU limits: engines, the NIC initializer and the weight "
            "copier get CPU requests only; a CFS limit would throttle them"),
    Allowed(("CKV_K8S_16", "CKV_K8S_20", "CKV_K8S_28"), (*PRIVILEGED, TPU_ENGINE),
            "privileged, privilege escalation, NET_RAW: components/checks/declared.py WORKLOADS (DeepEP/NVSHMEM; "
            "MRDMA NIC "
            "setup; the TPU host-setup init container); privileged implies escalation and every capability"),
    Allowed(("CKV_K8S_17",), PRIVILEGED, "host PID namespace: vLLM (CUDA IPC across engines) and asapd-lite, "
            "components/checks/declared.py WORKLOADS"),
    Allowed(("CKV_K8S_18",), (VLLM,), "host IPC namespace: CUDA IPC across engines, components/checks/declared.py "
            "WORKLOADS"),
    Allowed(("CKV_K8S_19",), (ASAPD,), "host network namespace: asapd-lite, components/checks/declared.py WORKLOADS"),
    Allowed(("CKV_K8S_22", "CKV_K8S_23", "CKV_K8S_40"), (*ENGINES, ASAPD), "read-only root, root user, low UID: the "
            "engine images run as root and write to their filesystem (components/platform/hardening.py ROOT_IMAGES); "
            "asapd-lite configures the host"),
    Allowed(("CKV_K8S_29", "CKV_K8S_31"), PRIVILEGED, "pod security context, seccomp: privileged pods, whose "
            "containers run unconfined anyway"),
    Allowed(("CKV_K8S_35",), (STAGING,), "secret in an env var: the weight copier reads HF_TOKEN from the "
            "environment, taken from the llm-d-hf-token Secret; the policy pack's hf-token-via-secret rule keeps it "
            "to that Secret (the engines read no Hub: components/plan/engines.py ENGINE_PRIVACY_ENV)"),
    Allowed(("CKV_K8S_37",), (*PRIVILEGED, TPU_ENGINE), "capabilities: privileged containers hold all; the TPU engine "
            "drops only NET_RAW (which capabilities the TPU runtime uses is not published)"),
    Allowed(("CKV_K8S_25",), (TPU_ENGINE,), "added capability: the TPU engine adds IPC_LOCK, as the released Raiden "
            "recipes run it, so the offload store can pin its host pool (components/platform/hardening.py "
            "TPU_ENGINE_CAPABILITIES; components/checks/declared.py WORKLOADS)"),
    Allowed(("CKV_K8S_8", "CKV_K8S_9"), ("Pod.*.*-vllm-tpu-spec-leaderworkertemplate-workertemplate",),
            "liveness/readiness probes: headless TPU vLLM workers serve no HTTP; the leader's probes speak for the "
            "group and LWS recreates the group on failure (components/serving/modelservers.py)"),
    # ---- chart objects
    Allowed(("CKV_K8S_8",), (EPP, DRA_CONTROLLER), "liveness probe: the router chart probes the EPP but not its "
            "Envoy sidecar; the DRA driver chart's controller has none; neither chart has a value for it"),
    Allowed(("CKV_K8S_9",), (DRA_CONTROLLER, DRA_PLUGIN), "readiness probe: the DRA driver chart defines none for "
            "its controller or kubelet plugin"),
    Allowed(("CKV_K8S_10", "CKV_K8S_12"), (DRA_PLUGIN,), "CPU/memory requests: the DRA driver chart's kubelet plugin "
            "ships without them"),
    Allowed(("CKV_K8S_13",), (DRA_PLUGIN, DRA_CONTROLLER, LWS), "memory limits: the DRA driver and LWS charts ship "
            "their controllers without them; they run on the system pool"),
    Allowed(("CKV_K8S_11",), (EPP, LWS, DRA_CONTROLLER, DRA_PLUGIN), "CPU limits: the router chart leaves the EPP "
            "without one on purpose (its values: burst capacity for scheduling), the controllers as their charts ship"),
    Allowed(("CKV_K8S_16",), (DRA_PLUGIN,), "privileged: the DRA kubelet plugin, components/checks/declared.py "
                                            "WORKLOADS"),
    Allowed(("CKV_K8S_20", "CKV_K8S_28", "CKV_K8S_37"), (EPP, DRA_CONTROLLER, DRA_PLUGIN), "privilege escalation, "
            "NET_RAW, capabilities: the router and DRA driver charts set no capability drop (the kubelet plugin is "
            "privileged on purpose)"),
    Allowed(("CKV_K8S_22", "CKV_K8S_23"), (EPP, DRA_CONTROLLER, DRA_PLUGIN), "read-only root filesystem, root user: "
            "as the router and DRA driver charts render their containers"),
    Allowed(("CKV_K8S_29", "CKV_K8S_30"), (EPP,), "pod and container security context: the router chart has no "
            "security-context values"),
    Allowed(("CKV_K8S_31", "CKV_K8S_38", "CKV_K8S_40"), (EPP, LWS, DRA_CONTROLLER, DRA_PLUGIN), "seccomp, token "
            "mount, UID: as the charts render them; the EPP and the controllers call the Kubernetes API, so they need "
            "their service-account token"),
    Allowed(("CKV_K8S_49", "CKV_K8S_155"), (LWS_ROLES,), "wildcard verbs on disaggregatedsets, admission webhook "
            "configurations: the LWS chart's own roles (its controller manages its webhooks and the "
            "DisaggregatedSet resources it owns); the policy pack's k8s-no-cluster-admin still refuses any "
            "all-wildcard role"),
    Allowed(("CKV_K8S_38", "CKV_K8S_40"), (KEDA,), "token mount, UID: KEDA's operator, metrics API server and "
            "admission webhooks call the Kubernetes API, so they need their token; its chart runs them non-root "
            "(runAsNonRoot) with the image's own UID, below the 10000 this check asks for"),
    Allowed(("CKV_K8S_155",), (KEDA_ROLE,), "admission webhook configurations: KEDA's chart gives its operator "
            "get/patch on validatingwebhookconfigurations and apiservices when KEDA makes its own certificates "
            "(its templates/manager/minimal-rbac.yaml), to write the CA bundle it rotates"),
)
"""The failed checks the stacks have on purpose, each limited to the resources named (docs/security.md shows this
table, `python -m tools scan --write-doc` rewrites it there)."""


def expected(check: str, resource: str) -> bool:
    return any(check in allowed.checks and any(fnmatch.fnmatchcase(resource, p) for p in allowed.who)
               for allowed in EXCEPTIONS)


SHARED_KINDS = {"CustomResourceDefinition"}
"""Kinds whose identical objects every stack holds once, in one shared file, scanned once: KEDA's CRDs are most of a
plan's manifests (its ScaledJob CRD alone 0.75 MB) and parsing them four times was 2.6 s of the four stacks' 7 s
scan. A result checkov reports on the shared file counts for every stack holding that object."""
SHARED = "+shared"
"""The shared file's folder: `+` is in no Pulumi stack name, so it is no stack's folder."""


def checkov_id(manifest: dict[str, Any]) -> str:
    """The name checkov reports an object by: `<Kind>.<namespace>.<name>`, `default` without a namespace."""
    meta = manifest.get("metadata") or {}
    return f"{manifest.get('kind')}.{meta.get('namespace') or 'default'}.{meta.get('name')}"


def write_inputs(stacks: dict[str, Path], out: Path) -> tuple[dict[str, Path], dict[str, set[str]]]:
    """Each stack's manifests plus its custom resources' pod templates, where checkov reads them (read and written
    with libyaml where PyYAML has it: the pure-Python loader and dumper took 1 s of the four stacks' scan); objects
    of SHARED_KINDS go to one shared file instead, each once. Returns the files by name (the shared one under SHARED)
    and, for each object of the shared file (by checkov's name), the stacks holding it. An object of those kinds that
    two stacks hold in different versions stays in each stack's own file."""
    loader, dumper = getattr(yaml, "CSafeLoader", yaml.SafeLoader), getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    expanded = {name: expand([m for m in yaml.load_all((stack / "manifests.yaml").read_text(), Loader=loader) if m])
                for name, stack in stacks.items()}
    versions: dict[str, dict[str, Any]] = {}  # checkov name -> the one version every holder has, or None
    for manifests in expanded.values():
        for manifest in manifests:
            if manifest.get("kind") in SHARED_KINDS:
                key = checkov_id(manifest)
                versions[key] = manifest if versions.get(key, manifest) == manifest else None
    owners: dict[str, set[str]] = {}
    files = {}
    for name, manifests in expanded.items():
        own = []
        for manifest in manifests:
            key = checkov_id(manifest) if manifest.get("kind") in SHARED_KINDS else None
            if key is not None and versions[key] is not None:
                owners.setdefault(key, set()).add(name)
            else:
                own.append(manifest)
        files[name] = _write(out / name / "manifests.yaml", own, dumper)
    if owners:
        files[SHARED] = _write(out / SHARED / "manifests.yaml", [versions[key] for key in owners], dumper)
    return files, owners


def _write(target: Path, manifests: list[dict[str, Any]], dumper: Any) -> Path:
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(yaml.dump_all(manifests, Dumper=dumper, sort_keys=False))
    return target


def run_checkov(checkov: str, files: dict[str, Path], owners: dict[str, set[str]] | None = None
                ) -> tuple[dict[str, dict[str, Any]], str]:
    """One checkov run over every stack's file (its start-up dominates); per stack: passed and failed counts and
    the sorted (check, resource) failures, and the version of the checkov that ran (its report's
    `summary.checkov_version`, so no second checkov start for `--version`). A result on the shared file (`owners`,
    write_inputs) counts for each stack holding its object. A checkov that fails to run raises ScanError."""
    owners = owners or {}
    argv = [checkov, *(a for f in files.values() for a in ("-f", str(f))), "--framework", "kubernetes", "-o", "json",
            "--compact", "--skip-download"]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise ScanError(f"checkov did not run: {err}") from None
    try:
        report = json.loads(proc.stdout or "{}")
    except ValueError:
        raise ScanError(f"checkov printed no JSON report (exit {proc.returncode}): {proc.stderr.strip()[-500:]}") \
            from None
    reports = report if isinstance(report, list) else [report]
    results = {name: {"passed": 0, "failed": 0, "failures": set()} for name in files if name != SHARED}
    by_file = {Path(f).resolve(): name for name, f in files.items()}
    for part in reports:
        for outcome in ("passed_checks", "failed_checks"):
            for item in (part.get("results") or {}).get(outcome, []):
                name = by_file.get(Path(item.get("file_abs_path") or item["file_path"]).resolve())
                if name is None:
                    raise ScanError(f"checkov reported a file it was not given: {item.get('file_path')}")
                holders = [name] if name != SHARED else sorted(owners.get(item["resource"], ()))
                if not holders:
                    raise ScanError(f"checkov reported an object the shared file does not hold: {item['resource']}")
                for holder in holders:
                    results[holder][outcome.split("_")[0]] += 1
                    if outcome == "failed_checks":
                        results[holder]["failures"].add((item["check_id"], item["resource"]))
    versions = {str((part.get("summary") or {}).get("checkov_version")) for part in reports}
    if len(versions) != 1 or versions == {"None"}:
        raise ScanError(f"checkov's report names no single version (summary.checkov_version: {sorted(versions)})")
    return {name: {**r, "failures": sorted(r["failures"])} for name, r in results.items()}, versions.pop()


class ScanError(Exception):
    """checkov could not be run or its report could not be read."""


def scan(stacks: dict[str, Path], checkov: str, out: Path = OUT) -> tuple[dict[str, dict[str, Any]], str]:
    """Scan plan folders (name -> folder): counts, failures, and which failures no exception lists; and the
    version of the checkov that scanned them."""
    results, version = run_checkov(checkov, *write_inputs(stacks, out))
    for result in results.values():
        result["unlisted"] = [(c, r) for c, r in result["failures"] if not expected(c, r)]
    return results, version


def unused(results: dict[str, dict[str, Any]]) -> list[str]:
    """Exception entries (check and pattern) that no scanned failure needs: a stale list fails too."""
    failures = {f for r in results.values() for f in r["failures"]}
    return [f"{check} {pattern}" for allowed in EXCEPTIONS for check in allowed.checks for pattern in allowed.who
            if pattern != "*" and not any(c == check and fnmatch.fnmatchcase(r, pattern) for c, r in failures)]


# --------------------------------------------------------------------------- docs/security.md
DOC = ROOT / "docs" / "security.md"
COUNTS_BEGIN, COUNTS_END = "<!-- scan counts: python -m tools scan --write-doc -->", "<!-- end scan counts -->"
LIST_BEGIN, LIST_END = "<!-- scan exceptions: python -m tools scan --write-doc -->", "<!-- end scan exceptions -->"
BENCHMARK_SUFFIX = "-benchmark"


def counts_table(results: dict[str, dict[str, Any]], version: str) -> str:
    rows = [f"| {name} | {r['passed']} | {r['failed']} | {r['failed'] - len(r['unlisted'])} | {len(r['unlisted'])} |"
            for name, r in sorted(results.items())]
    return "\n".join([f"Result with {version} (chart objects included; `<stack>{BENCHMARK_SUFFIX}` is the stack with "
                      "`benchmark.enabled: true` and `router.calibrate: true`, so the benchmark and calibration Jobs "
                      "are scanned too):", "",
                      "| plan | passed | failed | failed and listed | failed and not listed |",
                      "| --- | --- | --- | --- | --- |", *rows])


def exceptions_table() -> str:
    rows = [f"| {', '.join(a.checks)} | {', '.join(f'`{w}`' for w in a.who)} | {a.why} |" for a in EXCEPTIONS]
    return "\n".join(["| checks | resources | why |", "| --- | --- | --- |", *rows])


def _between(text: str, begin: str, end: str) -> str:
    start, stop = text.index(begin) + len(begin), text.index(end)
    return text[start:stop].strip()


def doc_tables(text: str) -> tuple[str, str]:
    """(counts, exceptions) as docs/security.md has them."""
    return _between(text, COUNTS_BEGIN, COUNTS_END), _between(text, LIST_BEGIN, LIST_END)


def write_doc(counts: str, path: Path = DOC) -> None:
    text = path.read_text()
    for (begin, end), body in (((COUNTS_BEGIN, COUNTS_END), counts), ((LIST_BEGIN, LIST_END), exceptions_table())):
        head, _, rest = text.partition(begin)
        _, _, tail = rest.partition(end)
        text = f"{head}{begin}\n{body}\n{end}{tail}"
    path.write_text(text)


def benchmark_stack(stack_file: Path, folder: Path) -> Path:
    """The stack file with the benchmark and calibration Jobs on, written as `folder/Pulumi.<stack>-benchmark.yaml`
    (tests/conftest.py renders the fixture stacks' with the session's variants)."""
    document = yaml.safe_load(stack_file.read_text()) or {}
    config = dict(document.get("config") or {})
    config.update({"kimi-k3-1:benchmark.enabled": True, "kimi-k3-1:router.calibrate": True})
    name = stack_file.name.removeprefix("Pulumi.").removesuffix(".yaml") + BENCHMARK_SUFFIX
    target = folder / f"Pulumi.{name}.yaml"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(yaml.safe_dump({**document, "config": config}, sort_keys=False))
    return target


def benchmark_plans(stack_files: list[Path], out: Path) -> dict[str, Path]:
    """Render each stack file with the benchmark and calibration Jobs on (`<stack>-benchmark`), into out/."""
    files = [arg for f in stack_files for arg in ("--stack-file", str(benchmark_stack(f, out / "stacks")))]
    proc = subprocess.run([sys.executable, "-m", "tools.preview.plan", "--quiet", "--out", str(out / "plans"),
                           *files], cwd=ROOT, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise ScanError(f"rendering the benchmark plans failed: {proc.stderr.strip()[-500:]}")
    return {p.name: p for p in sorted((out / "plans").iterdir()) if p.is_dir()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=prog("scan"), description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkov", default=str(CHECKOV),
                        help="checkov executable (default: .venv-checkov/bin/checkov, from `make checkov`)")
    parser.add_argument("--plan", type=Path, default=PLAN, help="plan folder (default: build/plan)")
    parser.add_argument("--stack", action="append", metavar="NAME",
                        help="stack folder name in the plan folder (default: all)")
    parser.add_argument("--with-benchmark", action="store_true",
                        help="also render and scan each Pulumi.<stack>.yaml with the benchmark Jobs on")
    parser.add_argument("--write-doc", action="store_true",
                        help="rewrite the counts and exception tables of docs/security.md (implies --with-benchmark)")
    parser.add_argument("--json", action="store_true",
                        help='print one JSON object instead of the lines: {"checkov": version, "stacks": {name: '
                             '{"passed", "failed", "unlisted": [{"check", "resource"}]}}, "unused_exceptions": [...]}')
    args = parser.parse_args(argv)
    names = args.stack or (sorted(p.name for p in args.plan.iterdir() if p.is_dir()) if args.plan.is_dir() else [])
    absent = [name for name in names if not (args.plan / name / "manifests.yaml").is_file()]
    if not names or absent:
        print(f"{parser.prog}: error: no plan of {', '.join(absent) or 'any stack'} in {args.plan}: run "
              f"`{prog('plan')}` first", file=sys.stderr)
        return 2
    if not shutil.which(args.checkov):
        print(f"{parser.prog}: error: no checkov at {args.checkov}: `make checkov` installs the pinned one",
              file=sys.stderr)
        return 2
    stacks = {name: args.plan / name for name in names}
    try:
        if args.with_benchmark or args.write_doc:
            stacks |= benchmark_plans([ROOT / f"Pulumi.{name}.yaml" for name in names], OUT / "benchmark")
        results, version = scan(stacks, args.checkov)
        version = f"checkov {version}"
    except ScanError as err:
        print(f"scan failed: {err}", file=sys.stderr)
        return 1
    unexpected = sum(len(result["unlisted"]) for result in results.values())
    stale = unused(results) if args.with_benchmark or args.write_doc else []
    if args.json:
        print(json.dumps({"checkov": version, "stacks": {
            name: {"passed": result["passed"], "failed": result["failed"],
                   "unlisted": [{"check": check, "resource": resource} for check, resource in result["unlisted"]]}
            for name, result in sorted(results.items())}, "unused_exceptions": stale}, indent=2))
    else:
        for name, result in sorted(results.items()):
            print(f"{name}: {result['passed']} passed, {result['failed']} failed "
                  f"({result['failed'] - len(result['unlisted'])} listed exceptions, {len(result['unlisted'])} "
                  "not listed)")
            for check, resource in result["unlisted"]:
                print(f"  FAILED {check} {resource}")
        for entry in stale:
            print(f"  UNUSED exception {entry}: no scanned failure needs it; remove it from tools/preview/scan.py")
    if args.write_doc:
        write_doc(counts_table(results, version))
        print(f"wrote the scan tables of {DOC.relative_to(ROOT)}", file=sys.stderr if args.json else sys.stdout)
    return 1 if unexpected or stale else 0

if __name__ == "__main__":
    sys.exit(main())
