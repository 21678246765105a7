"""docs/architecture.md held: no import cycle among the project's modules, and each layer imports only the
layers below it (above all: the offline preview engine never imports the live-stack commands).

Imports are read with `ast` from every module of components/, stacks/, policy/, tools/ and the program's
`__main__.py`, function-level (lazy) and `TYPE_CHECKING` imports included: a cycle hidden behind a lazy
import is still a cycle between two concepts."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import ROOT

PACKAGES = ("components", "stacks", "policy", "tools")
PROGRAM = "__main__"

ALLOWED: dict[str, set[str]] = {
    # layer -> the layers its modules may import (its own included where listed)
    "components": {"components"},
    "stacks": {"components", "stacks"},
    "policy": {"components", "policy"},
    PROGRAM: {"components", "stacks"},
    "tools.preview": {"components", "stacks", "tools", "tools.preview"},
    "tools.live": {"components", "tools", "tools.preview", "tools.live", "tools.staging"},
    "tools.staging": {"tools.staging"},
    "tools": set(),
    "tools.__main__": {"tools"},
}
"""The one-way rule of docs/architecture.md; keep the two identical."""


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
    """The staging Job runs the copier from the files components/staging.py ships in its ConfigMap: any other
    project module they import would be missing in the pod."""
    from components.staging import SHIPPED

    shipped = {module_name(ROOT / path) for path in SHIPPED if path.endswith(".py")}
    edges = graph()
    assert not {m: sorted(edges[m] - shipped) for m in shipped if edges[m] - shipped}


def test_every_module_is_in_a_layer():
    assert {layer(m) for m in graph()} <= set(ALLOWED)


def test_the_checks_catch_a_cycle_and_a_wrong_way_import(tmp_path):
    """The two checks above on a made-up tree: a preview module importing a live one or the CLI, the tools
    package importing the program's components, and two modules that import each other (one lazily, one under
    TYPE_CHECKING); a preview module importing the tools package's shared helpers is allowed."""
    for package in (*PACKAGES, "tools/preview", "tools/live"):
        (tmp_path / package).mkdir(parents=True, exist_ok=True)
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "__main__.py").write_text("import stacks\n")
    (tmp_path / "components" / "config.py").write_text("from . import contract\n")
    (tmp_path / "components" / "contract.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .config import StackConfig\n")
    (tmp_path / "tools" / "live" / "report.py").write_text("def f():\n    from tools.live import plots\n")
    (tmp_path / "tools" / "live" / "plots.py").write_text("from tools.live.report import f\n")
    (tmp_path / "tools" / "preview" / "plan.py").write_text("from tools.live import report\nfrom tools import prog\n")
    (tmp_path / "tools" / "preview" / "diff.py").write_text("from tools.__main__ import COMMANDS\n")
    (tmp_path / "tools" / "__init__.py").write_text("import components\n")
    (tmp_path / "tools" / "__main__.py").write_text("from tools import prog\n")
    edges = graph(tmp_path)
    assert cycles(edges) == [["components.config", "components.contract"], ["tools.live.plots", "tools.live.report"]]
    assert wrong_way(edges) == [
        "tools imports components (tools may import only the standard library)",
        "tools.preview.diff imports tools.__main__ (tools.preview may import only components, stacks, tools, "
        "tools.preview)",
        "tools.preview.plan imports tools.live.report (tools.preview may import only components, stacks, tools, "
        "tools.preview)"]


def test_the_architecture_doc_lists_the_rule():
    doc = (ROOT / "docs" / "architecture.md").read_text()
    for name, allowed in ALLOWED.items():
        row = f"| `{name}` | {', '.join(f'`{a}`' for a in sorted(allowed)) or 'the standard library only'} |"
        assert row in doc, f"docs/architecture.md lacks the row {row}"


MAPPED = ("components", "tools/preview", "tools/live", "tools/staging", "tests/engine", "tests/engine_tpu")
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
