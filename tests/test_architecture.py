"""docs/architecture.md held: no import cycle among the project's modules, each layer imports only the layers its
row allows (above all: components/ from the bottom up, and the offline preview engine never imports the live-stack
commands), facts and plan import no Pulumi, only the preflight and the copier reach the network, every module of
components/ sits in exactly one layer, and every repository path cited in docs, comments and messages exists.

Imports are read with `ast` from every module of components/, stacks/, policy/, tools/ and the program's
`__main__.py`, function-level (lazy) and `TYPE_CHECKING` imports included: a cycle hidden behind a lazy
import is still a cycle between two concepts."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT

PACKAGES = ("components", "stacks", "policy", "tools")
PROGRAM = "__main__"

LAYERS = ("facts", "config", "plan", "cloud", "observe", "platform", "weights", "router", "serving", "checks")
"""components/'s layers, bottom up (each a folder with an `__init__.py` that says what it is)."""
COPIER = "components.weights.copier"
"""The weight copier: the staging Job runs it from its ConfigMap (components/weights/shipped.py), so it imports only
itself; the `stage` command (tools.live.stage_weights) is the one module that imports it."""
_BASE = {"components.facts", "components.config", "components.plan", "components.cloud", "components.platform"}
_COMPONENTS = {f"components.{name}" for name in LAYERS}

ALLOWED: dict[str, set[str]] = {
    # layer -> the layers its modules may import (its own included where listed)
    "components": set(),
    "components.facts": {"components.facts"},
    "components.config": {"components.facts", "components.config"},
    "components.plan": {"components.facts", "components.config", "components.plan"},
    "components.cloud": {"components.facts", "components.config", "components.plan", "components.cloud"},
    "components.observe": {"components.facts", "components.config", "components.plan", "components.cloud",
                           "components.observe"},
    "components.platform": {"components.facts", "components.config", "components.plan", "components.cloud",
                            "components.observe", "components.platform"},
    "components.weights": _BASE | {"components.weights"},
    COPIER: {COPIER},
    "components.router": _BASE | {"components.router"},
    "components.serving": _BASE | {"components.serving"},
    "components.checks": _COMPONENTS,
    "stacks": _COMPONENTS | {"stacks"},
    PROGRAM: _COMPONENTS | {"stacks"},
    "policy": _COMPONENTS | {"policy"},
    "tools.preview": _COMPONENTS | {"stacks", "tools", "tools.preview"},
    "tools.live": _COMPONENTS | {COPIER, "tools", "tools.preview", "tools.live"},
    "tools": set(),
    "tools.__main__": {"tools"},
}
"""The one-way rule of docs/architecture.md; keep the two identical."""

NO_PULUMI = ("components.facts", "components.plan")
"""Layers that are data and arithmetic: importing them costs no Pulumi SDK, and they can run anywhere."""
NETWORK_CLIENTS = ("requests", "httpx", "httpx2", "urllib3", "aiohttp", "huggingface_hub", "hf_xet", "google.cloud",
                   "google.api_core", "google.auth", "googleapiclient", "grpc", "socket", "http.client",
                   "urllib.request", "ftplib", "smtplib")
"""Modules that open connections (a client library, or the standard library's own)."""
NETWORK_ALLOWED = {
    "components.checks.preflight": "the read-only questions to Google Cloud and the Hub before `up`",
    "components.checks.registry": "the digest of each pinned image tag, from its registry, before any resource",
    COPIER: "the staging Job's copy from the Hub to Cloud Storage",
    "components.weights.revision": "a dynamic provider: asks the Hub for `main`'s commit inside `pulumi up`",
    "components.weights.geometry": "a dynamic provider: reads the staged config.json inside `pulumi up`",
}
"""The program's modules that may reach the network, and why (the offline plan never runs them: the providers'
create runs only in a real `up`). tools.live's commands talk to live stacks and are outside this rule."""
PROGRAM_PACKAGES = ("components", "stacks", "policy")


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def project_modules(root: Path = ROOT) -> dict[str, Path]:
    modules = {module_name(p, root): p for package in PACKAGES for p in sorted((root / package).rglob("*.py"))}
    modules[PROGRAM] = root / "__main__.py"
    return modules


def imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The project modules `path` imports: `from pkg import sub` counts as importing pkg.sub where sub is a module."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            found.update(f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names)
    return {m for m in found if m.split(".")[0] in PACKAGES and m != name}


def layer(module: str) -> str:
    if module == PROGRAM:
        return PROGRAM
    parts = module.split(".")
    if module == COPIER or module.startswith(COPIER + "."):
        return COPIER
    if parts[0] == "components" and len(parts) > 1:
        return f"components.{parts[1]}"
    if parts[0] == "tools" and len(parts) > 1 and f"tools.{parts[1]}" in ALLOWED:
        return f"tools.{parts[1]}"
    return parts[0]


_graphs: dict[tuple[tuple[str, int, int], ...], dict[str, set[str]]] = {}
"""Each tree's import graph as read once in this process, keyed by its modules' files, sizes and modification
times: the checks below each read the whole project's graph, and parsing every module is most of their time."""


def graph(root: Path = ROOT) -> dict[str, set[str]]:
    modules = project_modules(root)
    key = tuple((str(path), (stat := path.stat()).st_size, stat.st_mtime_ns) for path in modules.values())
    if key not in _graphs:
        _graphs[key] = {name: imports(name, path, modules) for name, path in modules.items()}
    return {name: set(targets) for name, targets in _graphs[key].items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        top = stack.pop()
                        on_stack.discard(top)
                        component.append(top)
                        if top == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(edges.get(child, ())))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return found


def wrong_way(edges: dict[str, set[str]]) -> list[str]:
    return sorted(f"{m} imports {target} ({layer(m)} may import only "
                  f"{', '.join(sorted(ALLOWED[layer(m)])) or 'the standard library'})"
                  for m, targets in edges.items() for target in targets if layer(target) not in ALLOWED[layer(m)])


def test_no_import_cycles():
    assert not cycles(graph()), "import cycles (docs/architecture.md): " + "; ".join(
        " <-> ".join(c) for c in cycles(graph()))


def test_imports_go_one_way():
    assert not wrong_way(graph())


def test_the_staging_jobs_files_import_only_each_other():
    """The staging Job runs the files components/weights/shipped.py lists, under their in-pod names: read as the pod
    holds them, any project module they import that the pod lacks would fail there."""
    from components.weights import shipped

    in_pod = {module_name(Path(path), Path()): text for path, text in
              ((path, shipped.pod_text(source)) for path, source in shipped.APP.items()) if path.endswith(".py")}
    modules = {name: Path(path) for name, path in ((module_name(Path(p), Path()), p) for p in shipped.APP)}
    missing = {}
    for name, text in in_pod.items():
        path = modules[name]
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found = set()
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = (".".join(package.split(".")[:len(package.split(".")) - node.level + 1]
                                 + ([node.module] if node.module else [])) if node.level else node.module or "")
                found.update(f"{base}.{a.name}" if f"{base}.{a.name}" in in_pod else base for a in node.names)
        project = {m for m in found if m.split(".")[0] in PACKAGES}
        if project - set(in_pod):
            missing[name] = sorted(project - set(in_pod))
    assert not missing, f"the staging Job's files import modules the pod does not have: {missing}"


def test_the_staging_job_runs_from_its_in_pod_files(tmp_path):
    """The pod's working folder rebuilt from the ConfigMap's data and items: the Job's module imports there, with
    the copier, from nothing but those files and the locked libraries (`python -m tools.live.stage_weights --help`
    needs neither, so the copier's own modules are imported explicitly)."""
    from components.weights import shipped

    data = shipped.shipped_code()
    for path in shipped.APP:
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(data[shipped.key(path)])
    probe = ("import sys, tools.live.stage_weights, tools.staging.copy; "
             "print(all(m.__file__.startswith(sys.argv[1]) for m in "
             "(tools.live.stage_weights, tools.staging.copy, tools.staging.hub, tools)))")
    done = subprocess.run([sys.executable, "-c", probe, str(tmp_path)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60, env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0 and done.stdout.strip() == "True", done.stderr


def test_every_module_is_in_a_layer():
    assert {layer(m) for m in graph()} <= set(ALLOWED)


def test_every_module_of_components_is_in_exactly_one_layer():
    """components/ holds only its face and the layers' folders, each a package with a docstring saying what it is
    and what it may import; no module sits outside them."""
    top = sorted(p.name for p in (ROOT / "components").glob("*.py"))
    assert top == ["__init__.py"], f"modules outside a layer: {top}"
    folders = sorted(p.name for p in (ROOT / "components").iterdir()
                     if p.is_dir() and p.name not in {"__pycache__", "locks"})
    assert folders == sorted(LAYERS), folders
    for name in LAYERS:
        face = ROOT / "components" / name / "__init__.py"
        assert face.is_file() and ast.get_docstring(ast.parse(face.read_text())), f"{face} has no docstring"
        assert "Import" in face.read_text() or "import" in face.read_text(), f"{face} does not say what it may import"
    assert {layer(m) for m in graph() if m.startswith("components.")} <= {*(f"components.{n}" for n in LAYERS), COPIER}


def third_party(path: Path) -> set[str]:
    """The absolute imports of a module that are not the project's, as written (`google.cloud.storage`)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.add(node.module)
    return {m for m in found if m.split(".")[0] not in PACKAGES}


def test_facts_and_plan_import_no_pulumi():
    modules = project_modules()
    found = {name: sorted(m for m in third_party(path) if m.split(".")[0].startswith("pulumi"))
             for name, path in modules.items() if layer(name) in NO_PULUMI}
    assert not {name: hits for name, hits in found.items() if hits}


def network_imports(modules: dict[str, Path]) -> dict[str, list[str]]:
    found = {}
    for name, path in modules.items():
        if name.split(".")[0] not in PROGRAM_PACKAGES and name != PROGRAM:
            continue
        if name in NETWORK_ALLOWED or layer(name) in NETWORK_ALLOWED:
            continue
        hits = sorted(m for m in third_party(path) if any(m == c or m.startswith(c + ".") for c in NETWORK_CLIENTS))
        if hits:
            found[name] = hits
    return found


def test_only_the_preflight_and_the_copier_reach_the_network():
    assert not network_imports(project_modules()), "network clients outside components/checks/preflight.py and " \
        "components/weights/copier/ (the rule's exceptions: NETWORK_ALLOWED)"


def test_the_checks_catch_a_cycle_and_a_wrong_way_import(tmp_path):
    """The checks above on a made-up tree: a plan module importing the serving layer, a fact importing config
    (under TYPE_CHECKING, and so also a cycle with config, which imports it), the copier importing a fact, a preview
    module importing a live one or the CLI, the tools package importing the program's components, and two live
    modules that import each other (one lazily); a preview module importing the tools package's shared helpers and
    the stage command importing the copier are allowed."""
    for package in (*PACKAGES, "tools/preview", "tools/live", *(f"components/{name}" for name in LAYERS),
                    "components/weights/copier"):
        (tmp_path / package).mkdir(parents=True, exist_ok=True)
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "__main__.py").write_text("import stacks\n")
    (tmp_path / "components" / "config" / "__init__.py").write_text("from ..facts import contract\n")
    (tmp_path / "components" / "facts" / "contract.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..config import StackConfig\n")
    (tmp_path / "components" / "plan" / "cost.py").write_text("from ..serving import modelservers\n")
    (tmp_path / "components" / "serving" / "modelservers.py").write_text("from ..plan import cost\n")
    (tmp_path / "components" / "weights" / "copier" / "hub.py").write_text("from ...facts import contract\n")
    (tmp_path / "tools" / "live" / "report.py").write_text("def f():\n    from tools.live import plots\n")
    (tmp_path / "tools" / "live" / "plots.py").write_text("from tools.live.report import f\n")
    (tmp_path / "tools" / "live" / "stage.py").write_text("from components.weights.copier import hub\n")
    (tmp_path / "tools" / "preview" / "plan.py").write_text("from tools.live import report\nfrom tools import prog\n")
    (tmp_path / "tools" / "preview" / "diff.py").write_text("from tools.__main__ import COMMANDS\n")
    (tmp_path / "tools" / "__init__.py").write_text("import components\n")
    (tmp_path / "tools" / "__main__.py").write_text("from tools import prog\n")
    edges = graph(tmp_path)
    assert cycles(edges) == [["components.config", "components.facts.contract"],
                             ["components.plan.cost", "components.serving.modelservers"],
                             ["tools.live.plots", "tools.live.report"]]
    assert wrong_way(edges) == [
        "components.facts.contract imports components.config (components.facts may import only components.facts)",
        "components.plan.cost imports components.serving.modelservers (components.plan may import only "
        "components.config, components.facts, components.plan)",
        "components.weights.copier.hub imports components.facts.contract (components.weights.copier may import "
        "only components.weights.copier)",
        "tools imports components (tools may import only the standard library)",
        "tools.preview.diff imports tools.__main__ (tools.preview may import only components.checks, "
        "components.cloud, components.config, components.facts, components.observe, components.plan, "
        "components.platform, components.router, components.serving, components.weights, stacks, tools, tools.preview)",
        "tools.preview.plan imports tools.live.report (tools.preview may import only components.checks, "
        "components.cloud, components.config, components.facts, components.observe, components.plan, "
        "components.platform, components.router, components.serving, components.weights, stacks, tools, tools.preview)"]


def test_the_network_and_pulumi_checks_catch_an_import(tmp_path):
    """A plan module importing requests or the Pulumi SDK, and a platform module importing the standard library's
    HTTP client, are caught; the preflight's own import of requests is not."""
    for package in ("components", "components/plan", "components/platform", "components/checks"):
        (tmp_path / package).mkdir(parents=True, exist_ok=True)
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "components" / "plan" / "cost.py").write_text("import pulumi\ndef f():\n    import requests\n")
    (tmp_path / "components" / "platform" / "dra.py").write_text("from http.client import HTTPSConnection\n")
    (tmp_path / "components" / "checks" / "preflight.py").write_text("import requests\n")
    modules = {module_name(p, tmp_path): p for p in sorted(tmp_path.rglob("*.py"))}
    assert network_imports(modules) == {"components.plan.cost": ["requests"],
                                        "components.platform.dra": ["http.client"]}
    assert [sorted(third_party(path)) for name, path in modules.items() if layer(name) in NO_PULUMI
            and any(m.startswith("pulumi") for m in third_party(path))] == [["pulumi", "requests"]]


def doc_row(name: str, allowed: set[str]) -> str:
    """A layer's row of docs/architecture.md's table; `components.*` stands for every layer of components/."""
    shown = sorted(allowed - _COMPONENTS) if _COMPONENTS <= allowed else sorted(allowed)
    cells = (["components.*"] if _COMPONENTS <= allowed else []) + shown
    return f"| `{name}` | {', '.join(f'`{a}`' for a in cells) or 'the standard library only'} |"


def test_the_architecture_doc_lists_the_rule():
    doc = (ROOT / "docs" / "architecture.md").read_text()
    for name, allowed in ALLOWED.items():
        assert doc_row(name, allowed) in doc, f"docs/architecture.md lacks the row {doc_row(name, allowed)}"


MAPPED = (*(f"components/{name}" for name in LAYERS), "components/weights/copier", "tools/preview", "tools/live",
          "tests/engine", "tests/engine_tpu")
"""The folders whose every module docs/architecture.md names (its module map, the rooms' lists, the engine tiers)."""


def test_the_architecture_doc_names_every_module_and_command():
    """A module added without a line in docs/architecture.md, or a command missing from its CLI table, fails here."""
    from tools.__main__ import COMMANDS

    doc = (ROOT / "docs" / "architecture.md").read_text()
    unnamed = [f"{folder}/{path.name}" for folder in MAPPED for path in sorted((ROOT / folder).glob("*.py"))
               if path.stem not in {"__init__", "conftest"} and f"`{path.stem}`" not in doc]
    assert not unnamed, f"docs/architecture.md does not name {unnamed}"
    missing = [name for name, command in COMMANDS.items() if f"| `{name}` | `{command.module}` |" not in doc]
    assert not missing, f"docs/architecture.md's CLI table lacks {missing}"


CITED = re.compile(r"(?<![\w./:-])((?:components|stacks|tools|policy|tests|docs|\.github|\.ci)/[\w./-]*[\w/])")
"""A repository path as docs, comments and messages cite it (`components/plan/capacity.py`, `tests/stacks/`)."""
CITING = ("components", "stacks", "tools", "policy", "tests", "docs", ".github", ".ci")
CITING_FILES = ("README.md", "__main__.py", "Pulumi.yaml", "Makefile", "pyproject.toml", *(
    p.name for p in sorted(ROOT.glob("requirements*.txt"))))
NOT_OURS = {
    "docs/disaggregation.md": "llm-d's guide (ROUTER-0.10 tag)",
    "docs/infrastructure/providers/gke/README.md": "llm-d's GKE provider guide",
    "docs/kubernetes/fast-model-loading.md": "ai-dynamo/dynamo's loading guide",
    "tests/models/jax/test_kimi_k3_real_shapes.py": "vllm-project/tpu-inference's test of the released shapes",
    ".github/workflows/publish-on-release.yml": "kubernetes-sigs/inference-perf's release workflow",
    "docs/access-control": "a cloud.google.com address broken over two lines",
    "tools/plan.py": "where an older commit of this repository kept the plan (tools diff renders old commits)",
}
"""Paths cited from other repositories (the citation names the repository beside the path)."""
DEPLOYED = {
    ("components/locks/Dockerfile", "components/engineimage.py"): "the engine image's tag is this file's sha256",
    ("components/locks/cloudbuild.yaml", "components/engineimage.py"): "the engine image's tag is its sha256",
    ("components/observe/observability.py", "components/metrics.py"): "a note the deployed dashboard shows",
}
"""Texts that already live in the cloud with the path they were written with: changing them would rebuild the TPU
engine image or update the user's dashboard, for a comment (the modules are components/serving/engineimage.py and
components/facts/metrics.py now)."""


def cited_paths(root: Path = ROOT) -> dict[tuple[str, str], list[int]]:
    files = [p for folder in CITING for p in sorted((root / folder).rglob("*"))
             if p.is_file() and "__pycache__" not in p.parts and p.suffix not in {".pyc", ".lock", ".tgz"}]
    found: dict[tuple[str, str], list[int]] = {}
    for path in [*files, *(root / name for name in CITING_FILES if (root / name).is_file())]:
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            for match in CITED.finditer(line):
                if set(line[match.end():match.end() + 2]) & {"<", "{", "*", "["}:
                    continue  # a pattern (`tests/stacks/Pulumi.<stack>.yaml`), not one path
                found.setdefault((str(path.relative_to(root)), match.group(1).rstrip(".")), []).append(number)
    return found


def exists(path: Path) -> bool:
    """A file, or a folder holding one: a folder left with only compiled files (after a move) is not there in a clean
    checkout."""
    return path.is_file() or path.is_dir() and any(
        p.is_file() and "__pycache__" not in p.parts for p in path.rglob("*"))


def test_every_cited_repository_path_exists():
    """A path in a doc, a comment or a message that names no file or folder here sends a reader nowhere (after a
    move, say): cite what exists, or name the other repository the path is in (NOT_OURS)."""
    from components.weights import shipped

    dead = [f"{where}:{lines[0]}: {cited}" for (where, cited), lines in cited_paths().items()
            if not exists(ROOT / cited) and cited not in NOT_OURS and (where, cited) not in DEPLOYED
            and not (where == "components/weights/shipped.py" and cited in shipped.APP)  # the pod's names
            and where != "tests/test_architecture.py"]  # its tables and made-up trees
    assert not dead, "cited paths that do not exist:\n" + "\n".join(dead)


def test_the_path_check_catches_a_dead_citation(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "components" / "plan").mkdir(parents=True)
    (tmp_path / "components" / "plan" / "cost.py").write_text("")
    (tmp_path / "docs" / "x.md").write_text("see components/plan/cost.py and components/cost.py, "
                                            "https://example.com/docs/y.md\n")
    assert cited_paths(tmp_path) == {("docs/x.md", "components/plan/cost.py"): [1],
                                     ("docs/x.md", "components/cost.py"): [1]}


TEST_FOLDERS = {*LAYERS, "policy", "tools/preview", "tools/live"}
"""Where a test of one part sits: the folder named after its layer of components/, the policy pack or a room of
tools/."""
WHOLE_PROGRAM = {"test_architecture.py", "test_citations.py", "test_cli.py", "test_crd_cel.py",
                 "test_manifest_schemas.py", "test_user_path.py", "test_workflows.py", "test_fuzz.py",
                 "test_locks.py"}
"""Tests of the whole program, at the top of tests/."""


def test_tests_are_laid_out_like_the_code():
    tests = ROOT / "tests"
    misplaced = [str(p.relative_to(tests)) for p in sorted(tests.rglob("test_*.py"))
                 if p.parent == tests and p.name not in WHOLE_PROGRAM
                 or p.parent != tests and str(p.parent.relative_to(tests)) not in TEST_FOLDERS
                 and p.parent.relative_to(tests).parts[0] not in {"engine", "engine_tpu"}]
    assert not misplaced, f"tests outside the folder of what they test (docs/architecture.md, Tests): {misplaced}"
    fakes = [str(p.relative_to(tests)) for p in sorted(tests.rglob("fake*.py")) if p.parent.name != "fakes"]
    assert not fakes, f"fakes outside tests/fakes/: {fakes}"
