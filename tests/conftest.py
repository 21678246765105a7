"""Fixtures: the offline plan of the fixture stacks, rendered once per session, and shared/ facts.

The tests render their own stack files (tests/stacks/Pulumi.<stack>.yaml), never the committed ones in
the project root: users put their own project, zone and reservation there (or add stacks), and that must
not change what the tests see."""

from __future__ import annotations

import hashlib
import json
import marshal
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests import background

ROOT = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("KIMI_SHARED_DIR", ROOT.parent / "shared"))
STACKS = ("gpu", "tpu")
FIXTURE_STACKS = ROOT / "tests" / "stacks"


def run_plan(out: Path, *args: str) -> subprocess.CompletedProcess:
    """`python -m tools plan --quiet --out OUT ARGS`, run by the session's preloaded plan process
    (tests/plan_server.py: the same code as the CLI's several-stack path, without importing the providers again)."""
    from tests import plan_server

    return plan_server.run(["--quiet", "--out", str(out), *args], dict(os.environ))


def run_plan_cli(out: Path, *args: str) -> subprocess.CompletedProcess:
    """`python -m tools plan` in a fresh interpreter, exactly as users start it."""
    return subprocess.run([sys.executable, "-m", "tools", "plan", "--quiet", "--out", str(out), *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=900)


PLAN_FILES = ("resources.json", "manifests.yaml", "charts.json", "outputs.json", "summary.txt")
_parsed: dict[tuple[Any, ...], bytes] = {}
"""Each plan folder's files as parsed once in this process (marshal bytes, keyed by the files' identity): a plan
is read by many tests (every `variants[...]`), and libyaml's parse of manifests.yaml is most of a read."""


def _read_plan(folder: Path) -> tuple[Any, ...]:
    resources = json.loads((folder / "resources.json").read_text())
    manifest_charts, manifests = [], []
    # Documents start at a line of their own: a chart's text may hold "---" inside a line (KEDA's CRDs do).
    for doc in re.split(r"^---\n", (folder / "manifests.yaml").read_text(), flags=re.MULTILINE):
        obj = yaml.load(doc, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        if obj:
            chart = re.match(r"# chart (\S+):", doc)
            manifest_charts.append(chart.group(1) if chart else None)
            manifests.append(obj)
    return (resources, manifest_charts, manifests, json.loads((folder / "charts.json").read_text()),
            json.loads((folder / "outputs.json").read_text()), (folder / "summary.txt").read_text())


def _plan_data(folder: Path) -> tuple[Any, ...]:
    """The folder's parsed files, every call a fresh copy (a test may change what it got): the first read parses,
    later ones unmarshal what it parsed while the files are the same ones (inode, size, modification time). The
    parse is shared with the session's other processes too (pytest-xdist workers read the same session plans): kept
    in the session's shared folder (tests/background.py) under a name made of that key."""
    stats = [(folder / name).stat() for name in PLAN_FILES]
    key = (str(folder.resolve()), *((s.st_ino, s.st_size, s.st_mtime_ns) for s in stats))
    if key in _parsed:
        return marshal.loads(_parsed[key])
    kept = _kept_parse(key)
    if kept is not None and kept.is_file():
        _parsed[key] = kept.read_bytes()
        return marshal.loads(_parsed[key])
    data = _read_plan(folder)
    try:
        _parsed[key] = marshal.dumps(data)
    except ValueError:  # a value marshal cannot hold (a YAML timestamp): read such a plan every time
        return data
    if kept is not None:  # written whole, then renamed into place: a reader finds all of it or nothing
        kept.parent.mkdir(parents=True, exist_ok=True)
        partial = kept.with_name(f"{kept.name}.{os.getpid()}.tmp")
        partial.write_bytes(_parsed[key])
        partial.rename(kept)
    return data


def _kept_parse(key: tuple[Any, ...]) -> Path | None:
    shared = os.environ.get(background.SHARED_ENV)
    if not shared:
        return None
    return Path(shared) / "parsed" / (hashlib.sha256(repr(key).encode()).hexdigest() + ".marshal")


class Plan:
    """One rendered stack: resources.json, manifests.yaml and outputs.json, with lookups."""

    def __init__(self, folder: Path):
        self.folder = folder
        data = _plan_data(folder)
        self.resources: list[dict[str, Any]] = data[0]
        self.manifest_charts: list[str | None] = data[1]
        """For each manifest, the chart resource it was rendered from (its `# chart` line), or None."""
        self.manifests: list[dict[str, Any]] = data[2]
        self.charts: list[dict[str, Any]] = data[3]
        self.outputs: dict[str, Any] = data[4]
        self.summary: str = data[5]

    @property
    def program_manifests(self) -> list[dict[str, Any]]:
        """Objects the program creates itself (not rendered from a chart)."""
        return [m for m, chart in zip(self.manifests, self.manifest_charts, strict=True) if chart is None]

    def chart_manifests(self, chart: str | None = None) -> list[dict[str, Any]]:
        """Objects rendered from the charts (or from one chart resource)."""
        pairs = zip(self.manifests, self.manifest_charts, strict=True)
        return [m for m, c in pairs if c and (chart is None or c == chart)]

    def of_type(self, type_token: str) -> list[dict[str, Any]]:
        return [r for r in self.resources if r["type"] == type_token]

    def one(self, type_token: str, name: str | None = None) -> dict[str, Any]:
        found = [r for r in self.of_type(type_token) if name is None or r["name"] == name]
        assert len(found) == 1, f"expected one {type_token} {name or ''}, found {[r['name'] for r in found]}"
        return found[0]

    def named(self, name: str) -> dict[str, Any]:
        return next(r for r in self.resources if r["name"] == name)

    def closure(self, name: str) -> set[str]:
        """Every resource `name` waits for, directly or through its parents' and dependencies' chains."""
        seen: set[str] = set()
        todo = [name]
        while todo:
            current = self.named(todo.pop())
            for dep in current["dependsOn"] + ([current["parent"]] if current["parent"] else []):
                if dep not in seen:
                    seen.add(dep)
                    todo.append(dep)
        return seen


def rendered(plan: Plan) -> Plan:
    """The plan, or a skip naming why its charts were not rendered (never a silent pass): every test that needs
    chart objects asks for them here. Without a chart copy (no shared folder, nothing fetched) the plan holds no
    chart objects; `python -m tools charts --fetch` pulls the pinned charts (README)."""
    skipped = [f"{c['resource']}: {c['skipped']}" for c in plan.charts if c["skipped"]]
    if skipped:
        pytest.skip("charts not rendered: " + "; ".join(skipped))
    return plan


PLAN_JOB, VARIANTS_JOB = "plan", "variants"
PLAN_FIXTURES = {"plan_root", "plans", "gpu", "tpu"}


def start_fixture_plan() -> None:
    """`python -m tools plan` of the fixture stacks, in a fresh interpreter exactly as users start it, once per
    session (tests/background.py)."""
    job = background.Job(PLAN_JOB)
    job.start_once([sys.executable, "-m", "tools", "plan", "--quiet", "--out", str(job.folder / "out"),
                    *fixture_stack_args()], cwd=ROOT)


@pytest.fixture(scope="session")
def plan_root() -> Path:
    start_fixture_plan()  # a no-op when collection started it
    job = background.Job(PLAN_JOB)
    proc = job.wait()
    assert proc.returncode == 0, proc.stderr
    return job.folder / "out"


@pytest.fixture(scope="session")
def plans(plan_root) -> dict[str, Plan]:
    return {stack: Plan(plan_root / stack) for stack in STACKS}


@pytest.fixture(scope="session")
def gpu(plans) -> Plan:
    return plans["gpu"]


@pytest.fixture(scope="session")
def tpu(plans) -> Plan:
    return plans["tpu"]


@pytest.fixture(scope="session")
def shared() -> Path:
    if not (SHARED / "crds").is_dir():
        pytest.skip(f"shared facts folder not found at {SHARED} (set KIMI_SHARED_DIR)")
    return SHARED


def required_tool(present: bool, message: str) -> None:
    """A test needs a pinned tool `make test` builds: without it the test skips saying how to get it, and fails
    in CI (which sets CI), where a missing tool is a broken build, not a choice."""
    if not present:
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)


def fixture_stack(stack: str) -> Path:
    return FIXTURE_STACKS / f"Pulumi.{stack}.yaml"


def fixture_stack_args() -> list[str]:
    """`tools.preview.plan` arguments that render every fixture stack."""
    return [arg for stack in STACKS for arg in ("--stack-file", str(fixture_stack(stack)))]


def stack_document(stack: str) -> dict[str, Any]:
    return yaml.safe_load(fixture_stack(stack).read_text())


def write_stack(folder: Path, name: str, config: dict[str, Any]) -> Path:
    path = folder / f"Pulumi.{name}.yaml"
    path.write_text(yaml.safe_dump({"config": config}, sort_keys=False))
    return path


LEAKY_TOKEN = "hf_plaintextTokenThatMustNotLeak0123456789"
SGLANG_IMAGE = "registry.example/sglang-tpu:k31@sha256:" + "5" * 64
"""The `sglang` variant's user-named engine image (every image runs by digest)."""

VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    # name: (fixture stack it starts from, config keys changed). Rendered together, once per session.
    "gpu-staging": ("gpu", {}),
    "bad": ("gpu", {}),
    # GB200 (186 GB) cannot hold the non-expert part whole at TP=1 (components/plan/capacity.py
    # weights_held_per_device);
    # at TP=4 the MLP, shared experts and replicated tensors stay whole (sequence parallel), so a 4-node prefill
    # engine keeps 212 blocks of 2,944 tokens: 524,288 tokens (188 blocks) fit, 1,048,576 (366) do not.
    "gpu2": ("gpu", {"gpu.prefillGroups": 2, "gpu.decodeNodesPerGroup": 8, "gpu.machine": "a4x",
                     "gpu.tensorParallel": 4, "model.contextLength": 524288,
                     "monitoring.notificationChannels": ["projects/my-gcp-project/notificationChannels/42"],
                     "monitoring.alertKvCachePercent": 90}),
    "throwaway": ("tpu", {"storage.deleteCheckpointOnDestroy": True}),
    "quiet": ("tpu", {"monitoring.enabled": False, "kubernetes.namespace": "llm-d-kimi"}),
    # A `secure:` token (a plain-text one the CLI refuses: tests/tools/preview/test_stack_file.py).
    "leaky": ("gpu", {"hfToken": {"secure": LEAKY_TOKEN}}),
    "gateway": ("gpu", {"router.mode": "gateway", "router.calibrate": True, "router.clientUrl": "http://10.0.0.10"}),
    "sglang": ("tpu", {"tpu.engine": "sglang-torchtpu", "tpu.sglangImage": SGLANG_IMAGE}),
    "spec": ("gpu", {"model.speculative": "dflash", "model.draftModelPath": "/models/dflash",
                     "model.kvCacheDtype": "bf16", "gpu.tensorParallel": 2}),
    "tpu-bf16": ("tpu", {"model.kvCacheDtype": "bf16", "model.contextLength": 131072}),
    "adopt": ("gpu", {"storage.bucketExists": True}),
    # A stack that names its cluster (and so every cloud name) itself (tests/cloud/test_side_by_side.py).
    "named": ("gpu", {"cluster.name": "my-cluster"}),
    # A node that reads the volume at half the assumed rate (tests/plan/test_loading.py).
    "slow-disk": ("gpu", {"storage.nodeReadMiBps": 1200}),
    "pinned": ("tpu", {"model.revision": "5f1c0ffee0ddba11c0de5eed0123456789abcdef", "storage.stagingWorkers": 4}),
    "bench": ("gpu", {"benchmark.enabled": True, "router.calibrate": True,
                      "cost.gpuNodeHourUsd": "42.50", "cost.cpuNodeHourUsd": "0.50",
                      "lifecycle.maxLifetimeHours": 6}),
    # Every image digest key set (tests/serving/test_supply_chain.py), with the Jobs on so their images render too.
    "gpu-pinned": ("gpu", {**{f"images.{key}": f"sha256:{index:064x}" for index, key in enumerate(
        ("vllmDigest", "routingSidecarDigest", "eppDigest", "envoyDigest", "asapdLiteDigest", "calibrationDigest",
         "inferencePerfDigest", "lwsDigest", "draDriverDigest", "stagingDigest", "kedaDigest",
         "kedaMetricsApiServerDigest", "kedaWebhooksDigest"), 1)},
        "benchmark.enabled": True, "router.calibrate": True}),
    # Scale-out (tests/cloud/test_scale.py): 3 GPU slices on 3 named racks, 4 TPU slices.
    "gpu3": ("gpu3", {}),
    # 8 slices (tests/checks/test_preflight.py: the DRA driver's critical-pod quota grows with the GPU nodes).
    "gpu8": ("gpu3", {"gpu.slices": 8, "gpu.reservationSubBlocks": [f"rack-{i}" for i in range(8)]}),
    "tpu4": ("tpu4", {}),
    # Every image the TPU stack pulls, the router chart's Envoy sidecar included (visible once charts are rendered).
    "tpu-pinned": ("tpu", {"images.tpuEngineDigest": "sha256:" + "a" * 64, "images.lwsDigest": "sha256:" + "b" * 64,
                           "images.eppDigest": "sha256:" + "c" * 64, "images.envoyDigest": "sha256:" + "d" * 64,
                           "images.stagingDigest": "sha256:" + "e" * 64, "images.kedaDigest": "sha256:" + "f" * 64,
                           "images.kedaMetricsApiServerDigest": "sha256:" + "1" * 64,
                           "images.kedaWebhooksDigest": "sha256:" + "2" * 64}),
}


class Variants:
    def __init__(self, out: Path, proc: subprocess.CompletedProcess):
        self.out, self.proc = out, proc

    def __getitem__(self, name: str) -> Plan:
        return Plan(self.out / name)


SCAN_BENCHMARKS = tuple(f"{stack}-benchmark" for stack in STACKS)
"""Rendered with the variants too: each fixture stack as `python -m tools scan --with-benchmark` renders it, from
the stack file tools/preview/scan.py writes (tests/tools/preview/test_scan.py scans them; a plan process of their
own cost 2 s)."""


def _write_variant_stacks(folder: Path) -> None:
    from tools.preview import scan

    for name, (base, changes) in VARIANTS.items():
        config = dict(stack_document(base)["config"])
        config.update({f"kimi-k3-1:{key}": value for key, value in changes.items()})
        write_stack(folder, name, config)
    written = [scan.benchmark_stack(fixture_stack(stack), folder) for stack in STACKS]
    assert [path.name for path in written] == [f"Pulumi.{name}.yaml" for name in SCAN_BENCHMARKS], written


def start_variants() -> None:
    """Every variant in one `python -m tools plan` (a forked child per stack), once per session, run by the
    session's plan server (tests/plan_server.py: its preload serves this too, instead of a second one)."""
    job = background.Job(VARIANTS_JOB)
    files = [arg for name in (*VARIANTS, *SCAN_BENCHMARKS)
             for arg in ("--stack-file", str(job.folder / f"Pulumi.{name}.yaml"))]
    job.start_once([sys.executable, "-m", "tests.plan_server", "--quiet", "--out", str(job.folder / "out"), *files],
                   prepare=_write_variant_stacks, cwd=ROOT)


@pytest.fixture(scope="session")
def variants() -> Variants:
    start_variants()  # a no-op when collection started it
    job = background.Job(VARIANTS_JOB)
    proc = job.wait()
    assert proc.returncode == 0, proc.stderr
    return Variants(job.folder / "out", proc)


def pytest_configure(config: pytest.Config) -> None:
    """The session's first process makes the folder its background jobs share (tests/background.py); pytest-xdist
    workers, started after this, inherit it through the environment."""
    if not hasattr(config, "workerinput"):  # the controller (or a run without xdist), never a worker
        folder = tempfile.mkdtemp(prefix="kimi-tests-")
        os.environ[background.SHARED_ENV] = folder
        config.add_cleanup(lambda: _remove_detached(folder))


def _remove_detached(folder: str) -> None:
    """Remove the session's shared folder in a process of its own that outlives the session: the variants' and
    the inference-perf run's thousands of files took 3-7 s to unlink after the last test, with both workers done
    (`.ci/figures.py measure` still waits for that process and counts its CPU)."""
    subprocess.Popen([sys.executable, "-c", "import shutil, sys; shutil.rmtree(sys.argv[1], ignore_errors=True)",
                      folder], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                     start_new_session=True)


SHARED_FIXTURES = PLAN_FIXTURES | {"variants"}


LONG_FILES = {"test_scan.py", "test_bench_cli.py", "test_benchmark_config.py", "test_plan_diff.py",
              "test_lazy_packages.py", "test_workflows.py", "test_stage_weights.py", "test_bench.py"}
"""Files of few tests that take long (checkov, actionlint, two-commit renders, whole-command deadlines; `.ci/run`
prints the slowest tests): each goes first in its group, since a long file taken last by one worker is the wall
while the other worker has nothing left. Order only: every test runs either way."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Files that need none of the session's plans run first, so the background renders (tests/background.py)
    finish while the workers run the servers, signals and deadlines of the live commands' tests, instead of a
    worker waiting on them from its first test; within each group the LONG_FILES, then the files with the most
    tests go first (as pytest-xdist's own reordering would place them), so the last file a worker takes is a short
    one. pytest-xdist keeps this order only with `--no-loadscope-reorder` (pyproject.toml): by default `--dist
    loadfile` sorts every file by its number of tests alone, which put tests/checks/test_preflight.py (104 tests, all
    waiting for the variants) first on one worker and left it idle for the whole render."""
    needs = {item.path for item in items if SHARED_FIXTURES & set(getattr(item, "fixturenames", ()))}
    count: dict[Path, int] = {}
    for item in items:
        count[item.path] = count.get(item.path, 0) + 1
    items.sort(key=lambda item: (item.path in needs, item.path.name not in LONG_FILES, -count[item.path]))


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start the session's shared background work (tests/background.py) the tests about to run need: the fixture
    plan, the variants and tests/tools/live/test_report.py's real inference-perf run, so they overlap the first
    tests."""
    if session.config.option.collectonly:
        return
    needed = {name for item in session.items for name in getattr(item, "fixturenames", ())}
    if needed & PLAN_FIXTURES:
        start_fixture_plan()
    if "variants" in needed:
        start_variants()
    if any(item.nodeid.startswith("tests/tools/live/test_report.py") for item in session.items):
        from tests.tools.live import test_report

        test_report.start_run()


def pytest_terminal_summary(terminalreporter) -> None:
    """The fuzz tier's counts (tests/test_fuzz.py records them per surface), so every run shows what was tried."""
    properties = [(name, value) for reports in terminalreporter.stats.values() for report in reports
                  if getattr(report, "when", "") == "call" for name, value in getattr(report, "user_properties", ())]
    mutations = sorted((v for n, v in properties if n == "mutation-summary"), key=lambda v: v["plan"])
    if mutations:
        terminalreporter.write_line("policy pack, generated mutations (tests/mutations.py): refused / generated")
        for row in mutations:
            fields, images = row.get("field_sites", (0, 0)), row.get("image_sites", (0, 0))
            terminalreporter.write_line(f"  {row['plan']}: sites {row['sites_refused']}/{row['sites']}, kinds "
                                        f"{row['kinds_refused']}/{row['kinds']}; every field walked "
                                        f"({row.get('fields', 0)}), its security fields (images apart) "
                                        f"{fields[1]}/{fields[0]}; "
                                        f"image sites {images[1]}/{images[0]}")
    rows = [value for name, value in properties if name == "fuzz"]
    if not rows:
        return
    terminalreporter.write_line("fuzz tier (Hypothesis, derandomized, fixed budget): inputs tried per surface")
    for row in sorted(rows, key=lambda r: r["surface"]):
        outcomes = ", ".join(f"{n} {k}" for k, n in sorted(row["outcomes"].items(), key=lambda kv: -kv[1]))
        terminalreporter.write_line(f"  {row['surface']}: {row['inputs']} inputs, {row['tracebacks']} tracebacks, "
                                    f"{row['hangs']} hangs (slowest {row['slowest_cpu_s']} CPU s); {outcomes}")
