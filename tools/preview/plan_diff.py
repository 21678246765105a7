"""What a change does to the cloud and the cluster: a Markdown diff of two offline plans.

    python -m tools diff build/plan-old build/plan            # two plan folders (or two stack folders)
    python -m tools diff main HEAD                            # two git refs, each rendered here
    python -m tools diff HEAD^1 build/plan --stack gpu --out build/plan-diff.md

BASE and HEAD are each a plan folder (`build/plan`, holding one folder per stack, or one stack's folder)
or, if no such folder exists, a git ref of --repo: its tree is extracted with `git archive` into a
temporary folder and rendered there by its own `tools.preview.plan` with this interpreter. Per stack the report
lists Pulumi resources created, deleted, updated and replaced (by type and logical name, with the input
paths that differ), Kubernetes objects likewise (by kind, namespace/name and field path), replacements
with the upstream source that forces them (tools/preview/replacements.py), the changed summary figures and
the stack outputs; when the volume's throughput or readers change, what the existing volume gives the groups the
head adds, against the base plan's outputs or (--deployed FILE) the deployed stack's. Secrets stay "[secret]".
Format and limits: docs/plan-diff.md.

Exit status: 0 with the report (also "no changes"); 1 if --exit-code and anything differs; 2 on a usage
error or a plan that could not be loaded or rendered.
"""

from __future__ import annotations

import argparse
import difflib
import json
import marshal
import os
import re
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tools import prog
from tools.preview.replacements import PRESENCE, REJECT, RULES, URN_CHANGE_SOURCE, Rule, kubernetes_type

ROOT = Path(__file__).resolve().parents[2]
RENDER_TIMEOUT_S = 600
WIDTH = 60
"""Longest value shown in a table cell; longer ones are cut around where the two sides differ."""
MAX_ROWS = 40
"""Rows per resource or object before the rest are summed up in one line."""
MANIFEST_FILES = "*.yaml"
"""Every YAML file of a stack folder holds Kubernetes objects (docs/plan-format.md); each is diffed alike."""


class DiffError(Exception):
    """A plan that cannot be read or rendered; the message says which and why."""


class _Absent:
    def __repr__(self) -> str:
        return "ABSENT"


ABSENT: Any = _Absent()


# --- loading ------------------------------------------------------------------------------------------


@dataclass
class KubeObject:
    body: dict[str, Any]
    source: str
    """The file it came from (`manifests.yaml`, or a sibling such as rendered chart objects)."""

    @property
    def kind(self) -> str:
        return str(self.body.get("kind", "?"))

    @property
    def label(self) -> str:
        meta = self.body.get("metadata") or {}
        name = f"{meta['namespace']}/{meta.get('name', '?')}" if meta.get("namespace") else meta.get("name", "?")
        return f"{self.kind} {name}"

    @property
    def rule_type(self) -> str:
        return kubernetes_type(str(self.body.get("apiVersion", "")), self.kind)


@dataclass
class StackPlan:
    name: str
    resources: list[dict[str, Any]]
    objects: dict[str, KubeObject]
    outputs: dict[str, Any]
    summary: str
    charts: dict[str, Any] = field(default_factory=dict)
    """charts.json by chart resource name: which charts this side rendered (`skipped` says why not)."""

    def rendered_charts(self) -> set[str]:
        return {name for name, chart in self.charts.items() if not chart.get("skipped")}

    def urn(self, resource: dict[str, Any]) -> str:
        """URN-like identity: the parents' types, the type and the name (what Pulumi keys state by)."""
        by_name = {r["name"]: r for r in self.resources}
        types = [resource["type"]]
        parent = resource.get("parent")
        while parent and parent in by_name and len(types) < 64:
            types.insert(0, by_name[parent]["type"])
            parent = by_name[parent].get("parent")
        return "$".join(types) + "::" + resource["name"]


_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's safe loader where PyYAML has it: rendered chart objects (CRDs) make large files."""
_LOADED: dict[str, bytes] = {}
"""Each manifest file's documents as read once in this process (marshal bytes, by the file's text): both sides of
a diff mostly hold the same charts' crds.yaml (2.8 MB, 0.17 s to load), and each side gets its own copy."""


def _documents(text: str) -> list[Any]:
    if text in _LOADED:
        return marshal.loads(_LOADED[text])
    documents = list(yaml.load_all(text, Loader=_YAML_LOADER))
    try:
        _LOADED[text] = marshal.dumps(documents)
    except ValueError:  # a value marshal cannot hold (a YAML timestamp): load such a file every time
        pass
    return documents


def _object_key(body: dict[str, Any]) -> str:
    meta = body.get("metadata") or {}
    return f"{body.get('kind')}|{meta.get('namespace', '')}|{meta.get('name', '')}"


def load_stack(folder: Path, name: str | None = None) -> StackPlan:
    try:
        resources = json.loads((folder / "resources.json").read_text())
        outputs_file = folder / "outputs.json"
        outputs = json.loads(outputs_file.read_text()) if outputs_file.is_file() else {}
        summary_file = folder / "summary.txt"
        summary = summary_file.read_text() if summary_file.is_file() else ""
        charts_file = folder / "charts.json"
        charts = {c["resource"]: c for c in json.loads(charts_file.read_text())} if charts_file.is_file() else {}
        objects: dict[str, KubeObject] = {}
        for path in sorted(folder.glob(MANIFEST_FILES), key=lambda p: (p.name != "manifests.yaml", p.name)):
            for body in _documents(path.read_text()):
                if not isinstance(body, dict) or "kind" not in body:
                    continue
                key = _object_key(body)
                if key in objects:  # the same object from two files: keep both, apart
                    key = f"{key}|{path.name}"
                objects[key] = KubeObject(body, path.name)
    except (OSError, ValueError, yaml.YAMLError) as err:
        raise DiffError(f"{folder}: not a readable plan folder ({err})") from None
    return StackPlan(name or folder.name, resources, objects, outputs, summary, charts)


def load_plans(folder: Path) -> dict[str, StackPlan]:
    """A plan root (one folder per stack) or a single stack's folder."""
    if (folder / "resources.json").is_file():
        return {folder.name: load_stack(folder)}
    stacks = {p.name: load_stack(p) for p in sorted(folder.iterdir()) if (p / "resources.json").is_file()}
    if not stacks:
        raise DiffError(f"{folder}: no resources.json in it or in any folder below it (render with `make plan`)")
    return stacks


# --- rendering a git ref ------------------------------------------------------------------------------


def _git(repo: Path, *args: str) -> str:
    proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        raise DiffError(f"git {' '.join(args)}: {proc.stderr.strip() or f'exit {proc.returncode}'}")
    return proc.stdout.strip()


def resolve_ref(repo: Path, ref: str) -> str:
    try:
        return _git(repo, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    except DiffError:
        raise DiffError(f"{ref!r} is neither a plan folder nor a commit of {repo}") from None


def extract(repo: Path, sha: str, source: Path) -> Path:
    """The commit's tree in a temporary folder (`git archive`: no worktree to register or clean up)."""
    source.mkdir(parents=True)
    archive = subprocess.Popen(["git", "-C", str(repo), "archive", "--format=tar", sha], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE)
    try:
        with tarfile.open(fileobj=archive.stdout, mode="r|") as tar:
            tar.extractall(source, filter="data")
    finally:
        _, err = archive.communicate(timeout=60)
    if archive.returncode != 0:
        raise DiffError(f"git archive {sha[:12]}: {err.decode(errors='replace').strip()}")
    if not plan_module(source):
        raise DiffError(f"commit {sha[:12]} has no tools/preview/plan.py (or tools/plan.py) to render its plan with")
    share_chart_sources(source)
    return source


PLAN_MODULES = ("tools.preview.plan", "tools.plan")
"""Where a tree keeps its plan entry point: since the tools/ split, and before it (older commits)."""


def plan_module(source: Path) -> str:
    """The tree's own plan module, so a commit from before the tools/ split still renders."""
    return next((m for m in PLAN_MODULES if (source / (m.replace(".", "/") + ".py")).is_file()), "")


def share_chart_sources(source: Path) -> None:
    """Let the extracted tree find the charts this checkout renders with (tools/preview/helm_render.py search order), so
    both sides of a diff render the same chart objects: this checkout's fetched charts become the tree's, and
    the shared facts folder beside this checkout is named in KIMI_SHARED_DIR (set for the renders only)."""
    from tools.preview import helm_render

    fetched = helm_render.FETCH_DIR
    if fetched.is_dir() and not (source / "build" / "charts").exists():
        (source / "build").mkdir(exist_ok=True)
        (source / "build" / "charts").symlink_to(fetched.resolve(), target_is_directory=True)


def _chart_env() -> dict[str, str]:
    """KIMI_SHARED_DIR as this checkout resolves it: an extracted tree has no shared folder beside it."""
    shared = Path(os.environ.get("KIMI_SHARED_DIR", ROOT.parent / "shared"))
    return {"KIMI_SHARED_DIR": str(shared.resolve())} if shared.is_dir() else {}


def plan_args(source: Path, out: Path, stacks: list[str]) -> list[str] | None:
    """`tools.preview.plan` arguments for the requested stacks the tree has; None if it has none of them."""
    present = [s for s in stacks if (source / f"Pulumi.{s}.yaml").is_file()]
    if stacks and not present:
        return None
    return ["--quiet", "--out", str(out), *[arg for s in present for arg in ("--stack", s)]]


def render_trees(trees: list[tuple[Path, Path, list[str] | None]]) -> list[str]:
    """Render each (source, out, plan args) with the tree's own plan module; one error text each ("" = ok).

    Where the OS can fork, the provider modules are imported once here and each tree renders in a forked
    child that drops this checkout's modules and imports the tree's own (its plan module then forks per
    stack, as `make plan` does); otherwise each tree renders in a fresh interpreter."""
    errors = [""] * len(trees)
    jobs = [(i, source, args) for i, (source, out, args) in enumerate(trees) if args is not None]
    for _, out, args in trees:
        if args is None:
            out.mkdir(parents=True, exist_ok=True)
    if not jobs:  # both sides are plan folders: nothing to render, nothing to preload
        return errors
    if not hasattr(os, "fork"):
        for i, source, args in jobs:
            try:
                proc = subprocess.run([sys.executable, "-m", plan_module(source), *args], cwd=source,
                                      capture_output=True, text=True, timeout=RENDER_TIMEOUT_S,
                                      env={**os.environ, **_chart_env()})
                errors[i] = "" if proc.returncode == 0 else proc.stderr.strip() or f"exit {proc.returncode}"
            except subprocess.TimeoutExpired:
                errors[i] = f"took longer than {RENDER_TIMEOUT_S} s"
        return errors
    _preload()
    running = {}
    for i, source, args in jobs:
        log = source.parent / "render.log"
        running[_fork_plan(source, args, log)] = (i, log)
    deadline = time.monotonic() + RENDER_TIMEOUT_S
    while running:
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid in running:
            i, log = running.pop(pid)
            code = os.waitstatus_to_exitcode(status)
            errors[i] = "" if code == 0 else log.read_text(errors="replace").strip() or f"exit {code}"
        elif time.monotonic() > deadline:
            for child, (i, _) in running.items():
                os.kill(child, signal.SIGKILL)
                os.waitpid(child, 0)
                errors[i] = f"took longer than {RENDER_TIMEOUT_S} s"
            break
        else:
            time.sleep(0.05)
    return errors


def _preload() -> None:
    from tools.preview.render import preload_providers

    preload_providers()


PROJECT_PACKAGES = ("tools", "stacks", "components", "policy", "tests")
"""Top-level packages of a checkout: a forked renderer forgets this checkout's and imports the tree's own."""


def _fork_plan(source: Path, args: list[str], log: Path) -> int:
    from tools.preview.plan import fork_call

    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        return fork_call(lambda: _plan_of_tree(source, args), fd, fd)
    finally:
        os.close(fd)


def _plan_of_tree(source: Path, args: list[str]) -> int:
    """In the forked child: forget this checkout's modules, become `python -m tools plan` of the tree."""
    import importlib

    os.environ.update(_chart_env())  # computed before this checkout's modules are forgotten

    for name in list(sys.modules):
        if name.split(".")[0] in PROJECT_PACKAGES:
            del sys.modules[name]
    os.chdir(source)
    sys.path[:] = [str(source)] + [p for p in sys.path if p not in ("", ".", str(ROOT))]
    return importlib.import_module(plan_module(source)).main(args)


@dataclass
class Side:
    label: str
    stacks: dict[str, StackPlan]
    stack_folder: bool = False
    """The argument was one stack's folder (not a plan root): compared with the other side whatever its name."""


def load_sides(args: list[str], repo: Path, stacks: list[str], workdir: Path) -> list[Side]:
    """Each argument as a plan folder, else as a git ref whose tree is extracted and rendered here."""
    sides: dict[int, Side] = {}
    trees, rendered = [], []
    for index, arg in enumerate(args):
        if Path(arg).is_dir():
            sides[index] = Side(arg, load_plans(Path(arg)), (Path(arg) / "resources.json").is_file())
            continue
        sha = resolve_ref(repo, arg)
        source = extract(repo, sha, workdir / f"side{index}" / "src")
        out = workdir / f"side{index}" / "plan"
        trees.append((source, out, plan_args(source, out, stacks)))
        rendered.append((index, f"{arg} ({sha[:12]})", out))
    for (index, label, out), error in zip(rendered, render_trees(trees), strict=True):
        if error:
            raise DiffError(f"rendering {label} failed: {error}")
        sides[index] = Side(label, {p.name: load_stack(p) for p in sorted(out.iterdir())
                                    if (p / "resources.json").is_file()})
    return [sides[i] for i in range(len(args))]


# --- value diff ---------------------------------------------------------------------------------------


@dataclass
class Change:
    path: str
    old: Any
    new: Any
    note: str = ""
    replaces: Rule | None = None


_IDENT = re.compile(r"^[A-Za-z_$][\w$-]*$")


def _key(path: str, key: str) -> str:
    if _IDENT.match(key):
        return f"{path}.{key}" if path else key
    return f"{path}[{json.dumps(key)}]"


def _named(items: list[Any]) -> list[str] | None:
    """Names of a list of objects that each carry a distinct string `name` (containers, env, ports...)."""
    if not items or not all(isinstance(i, dict) and isinstance(i.get("name"), str) for i in items):
        return None
    names = [i["name"] for i in items]
    return names if len(set(names)) == len(names) else None


def diff_values(old: Any, new: Any, path: str = "") -> list[Change]:
    """Every leaf-level difference: objects key by key, lists of named objects by name, other lists by position."""
    if old == new and type(old) is type(new):
        return []
    if isinstance(old, dict) and isinstance(new, dict):
        changes: list[Change] = []
        for key in list(old) + [k for k in new if k not in old]:
            changes += diff_values(old.get(key, ABSENT), new.get(key, ABSENT), _key(path, key))
        return changes
    if isinstance(old, list) and isinstance(new, list):
        return _diff_lists(old, new, path)
    return [Change(path, old, new)]


def _diff_lists(old: list[Any], new: list[Any], path: str) -> list[Change]:
    old_names, new_names = _named(old), _named(new)
    if old_names is not None and new_names is not None:
        changes = []
        by_name = dict(zip(new_names, new, strict=True))
        for name, item in zip(old_names, old, strict=True):
            changes += diff_values(item, by_name.get(name, ABSENT), f"{path}[name={name}]")
        for name, item in zip(new_names, new, strict=True):
            if name not in old_names:
                changes.append(Change(f"{path}[name={name}]", ABSENT, item))
        common = [n for n in old_names if n in new_names]
        if common != [n for n in new_names if n in old_names]:
            changes.append(Change(path, old_names, new_names, note="order changed"))
        return changes
    if len(old) == len(new):
        return [c for i, (a, b) in enumerate(zip(old, new, strict=True)) for c in diff_values(a, b, f"{path}[{i}]")]
    # Different lengths: align equal elements (flags in an args list, scopes) and report what differs around them.
    changes = []
    matcher = difflib.SequenceMatcher(a=[_canonical(v) for v in old], b=[_canonical(v) for v in new], autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        if tag == "replace" and i2 - i1 == j2 - j1:
            for k in range(i2 - i1):
                changes += diff_values(old[i1 + k], new[j1 + k], f"{path}[{i1 + k}]")
            continue
        where = f"{path}[{i1}]" if i2 - i1 <= 1 and tag != "insert" else f"{path}[{i1}:{max(i2, i1)}]"
        removed, added = old[i1:i2], new[j1:j2]
        changes.append(Change(where, _one(removed), _one(added)))
    return changes


def _one(items: list[Any]) -> Any:
    return ABSENT if not items else items[0] if len(items) == 1 else items


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


# --- replacement and ignoreChanges rules --------------------------------------------------------------


_SEGMENT = re.compile(r'\.?([A-Za-z_$][\w$-]*)|\["((?:[^"\\]|\\.)*)"\]|\[([^\]]*)\]')


def segments(path: str) -> list[tuple[str, str]]:
    """`a.b["c.d"][0][name=x]` -> [(k,a), (k,b), (k,c.d), (i,0), (i,name=x)]."""
    out, pos = [], 0
    while pos < len(path):
        match = _SEGMENT.match(path, pos)
        if not match or match.end() == pos:
            return out + [("k", path[pos:])]
        key, quoted, index = match.groups()
        out.append(("k", key) if key is not None else ("k", json.loads(f'"{quoted}"')) if quoted is not None
                   else ("i", index))
        pos = match.end()
    return out


def _prefix(pattern: list[tuple[str, str]], path: list[tuple[str, str]]) -> bool:
    """`pattern` is `path` or above it; `[]`/`[*]` in the pattern match any index."""
    if len(pattern) > len(path):
        return False
    return all(p == q or (p[0] == q[0] == "i" and p[1] in ("", "*")) for p, q in zip(pattern, path, strict=False))


def replacing_rule(rule_type: str, change: Change) -> Rule | None:
    changed = segments(change.path)
    added_or_removed = change.old is ABSENT or change.new is ABSENT
    for rule in RULES:
        if rule.type not in (rule_type, "k8s:*") or (rule.type == "k8s:*" and not rule_type.startswith("k8s:")):
            continue
        pattern = segments(rule.path)
        if rule.scope == PRESENCE:
            exact = len(changed) == len(pattern) and _prefix(pattern, changed)
            element = (len(changed) == len(pattern) + 1 and changed[-1][0] == "i"
                       and _prefix(pattern, changed))
            if added_or_removed and (exact or element):
                return rule
        elif _prefix(pattern, changed):
            return rule
    return None


def ignored(ignore_changes: list[str], change: Change) -> bool:
    changed = segments(change.path)
    return any(_prefix(segments(path), changed) for path in ignore_changes)


# --- per-stack diff -----------------------------------------------------------------------------------


@dataclass
class Entry:
    """One resource or object that differs: action create, delete, update or replace."""

    action: str
    title: str
    changes: list[Change] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass
class Figure:
    label: str
    old: float | None
    new: float | None
    unit: str = ""
    note: str = ""
    """What the figure leaves out (an estimate's unpriced items); when the sides leave out different things the
    change is not a percentage of anything and is not shown as one."""
    comparable: bool = True


@dataclass
class StackDiff:
    name: str
    resources: list[Entry] = field(default_factory=list)
    objects: list[Entry] = field(default_factory=list)
    figures: list[Figure] = field(default_factory=list)
    summary_lines: list[str] = field(default_factory=list)
    outputs: list[Change] = field(default_factory=list)
    only_in: str = ""
    notes: list[str] = field(default_factory=list)
    """What was left out of the comparison, and why (chart objects one side did not render)."""
    in_place: list[str] = field(default_factory=list)
    """The head applied to a stack deployed as the base: what the existing volume gives the groups it adds, the
    startup budget against it, and the cost of each added slice (grown_in_place)."""

    @property
    def empty(self) -> bool:
        return not (self.resources or self.objects or self.figures or self.summary_lines or self.outputs
                    or self.only_in or self.in_place)

    def counts(self) -> dict[str, int]:
        counts = dict.fromkeys(("create", "update", "replace", "delete"), 0)
        for entry in self.resources + self.objects:
            counts[entry.action] += 1
        return counts


def _is_object_resource(resource: dict[str, Any]) -> bool:
    """Kubernetes objects the program creates itself: they show under Kubernetes objects (docs/plan-format.md)."""
    from tools.preview.render import COMPONENT_KUBERNETES_TYPES

    token = resource["type"]
    return token.startswith("kubernetes:") and not token.startswith(COMPONENT_KUBERNETES_TYPES)


def _resource_title(resource: dict[str, Any]) -> str:
    return f"`{resource['type']}` **{resource['name']}**"


def _resource_notes(resource: dict[str, Any], action: str) -> list[str]:
    options = resource.get("options") or {}
    notes = []
    if action == "delete" and options.get("retainOnDelete"):
        notes.append("retainOnDelete: Pulumi forgets it, the cloud resource stays")
    if action in ("delete", "replace") and options.get("protect"):
        notes.append("protect is set: `pulumi up` stops until it is unprotected")
    if action == "replace" and options.get("deleteBeforeReplace"):
        notes.append("deleteBeforeReplace: the old one is deleted before the new one exists")
    if options.get("read"):
        notes.append("read, not managed: nothing changes in the cloud")
    return notes


def _mark(changes: list[Change], rule_type: str, ignore: list[str]) -> bool:
    """Annotate ignored, replacing and rejected changes; True if any forces a replacement."""
    replaces = False
    for change in changes:
        if ignore and ignored(ignore, change):
            change.note = "ignoreChanges: not applied"
            continue
        rule = replacing_rule(rule_type, change)
        if rule is not None and rule.effect == REJECT:
            change.note = f"immutable: the API server rejects this update ([source]({rule.source}))"
        elif rule is not None:
            change.replaces, replaces = rule, True
    return replaces


def _rejected(changes: list[Change]) -> list[str]:
    if not any(c.note.startswith("immutable") for c in changes):
        return []
    return ["an immutable field changes: `pulumi up` fails on this object unless it is replaced (renamed, or "
            "deleted first)"]


def _depends_change(old: list[str], new: list[str]) -> list[Change]:
    removed, added = sorted(set(old) - set(new)), sorted(set(new) - set(old))
    if not removed and not added:
        return []
    return [Change("dependsOn", removed or ABSENT, added or ABSENT, note="left: no longer; right: newly")]


def _resource_changes(old: dict[str, Any], new: dict[str, Any], with_inputs: bool) -> list[Change]:
    changes = diff_values(old.get("inputs", {}), new.get("inputs", {})) if with_inputs else []
    changes += diff_values(old.get("options", {}), new.get("options", {}), "(options)")
    changes += _depends_change(old.get("dependsOn", []), new.get("dependsOn", []))
    if old.get("parent") != new.get("parent"):
        changes.append(Change("(parent)", old.get("parent"), new.get("parent")))
    return changes


def one_sided_charts(base: StackPlan, head: StackPlan) -> tuple[set[str], list[str]]:
    """Charts only one side rendered (a missing chart copy, not a change): their objects are not compared."""
    charts = (base.rendered_charts() ^ head.rendered_charts()) & (set(base.charts) & set(head.charts))
    notes = []
    for chart in sorted(charts):
        side, entry = ("base", base.charts[chart]) if chart not in base.rendered_charts() else \
            ("head", head.charts[chart])
        notes.append(f"chart {chart} was not rendered on the {side} side ({entry.get('skipped')}): its objects are "
                     f"compared only when both sides render it")
    return charts, notes


def _without_charts(plan: StackPlan, charts: set[str]) -> StackPlan:
    if not charts:
        return plan
    children = [r for r in plan.resources if r.get("parent") in charts]
    keys = {_object_key(r.get("inputs", {})) for r in children}
    return StackPlan(plan.name, [r for r in plan.resources if r.get("parent") not in charts],
                     {k: o for k, o in plan.objects.items() if "|".join(k.split("|")[:3]) not in keys},
                     plan.outputs, plan.summary, plan.charts)


def diff_stack(name: str, base: StackPlan, head: StackPlan, deployed: dict[str, Any] | None = None) -> StackDiff:
    """`deployed`: the real stack's outputs (`pulumi stack output --json`), when given the state the head applies
    to instead of the base plan's outputs (grown_in_place)."""
    skipped, notes = one_sided_charts(base, head)
    base, head = _without_charts(base, skipped), _without_charts(head, skipped)
    result = StackDiff(name, notes=notes)
    old_by_urn = {base.urn(r): r for r in base.resources}
    new_by_urn = {head.urn(r): r for r in head.resources}
    moved = {(r["type"], r["name"]) for u, r in old_by_urn.items() if u not in new_by_urn} & {
        (r["type"], r["name"]) for u, r in new_by_urn.items() if u not in old_by_urn}
    object_resources: dict[str, tuple[dict[str, Any] | None, dict[str, Any] | None]] = {}

    for urn, resource in new_by_urn.items():
        old = old_by_urn.get(urn)
        if _is_object_resource(resource):
            object_resources.setdefault(_object_key(resource.get("inputs", {})), (old, resource))
            if old is not None:
                continue
        if old is None:
            notes = _resource_notes(resource, "create")
            if (resource["type"], resource["name"]) in moved:
                notes.append(f"moved under another parent type: a new URN, so Pulumi deletes the old one and "
                             f"creates this one unless the program sets `aliases` ([Pulumi]({URN_CHANGE_SOURCE}))")
            if not _is_object_resource(resource):
                result.resources.append(Entry("create", _resource_title(resource), notes=notes))
            continue
        changes = _resource_changes(old, resource, with_inputs=True)
        if not changes:
            continue
        ignore = (resource.get("options") or {}).get("ignoreChanges", [])
        action = "replace" if _mark(changes, resource["type"], ignore) else "update"
        if all(c.note.startswith("ignoreChanges") for c in changes):
            action = "update"
        result.resources.append(Entry(action, _resource_title(resource), changes, _resource_notes(resource, action)))
    for urn, resource in old_by_urn.items():
        if urn in new_by_urn:
            continue
        if _is_object_resource(resource):
            object_resources.setdefault(_object_key(resource.get("inputs", {})), (resource, None))
        else:
            result.resources.append(Entry("delete", _resource_title(resource),
                                          notes=_resource_notes(resource, "delete")))

    for key, obj in head.objects.items():
        owner = object_resources.get("|".join(key.split("|")[:3])) if obj.source == "manifests.yaml" else None
        result.objects += _object_entry(base.objects.get(key), obj, owner)
    for key, obj in base.objects.items():
        if key not in head.objects:
            result.objects.append(Entry("delete", f"`{obj.label}`" + _from(obj)))

    result.figures = diff_figures(base.summary, head.summary)
    lines = difflib.unified_diff(base.summary.splitlines(), head.summary.splitlines(), lineterm="", n=0)
    result.summary_lines = [line for line in lines if not line.startswith(("---", "+++", "@@"))]
    result.outputs = diff_values(base.outputs, head.outputs)
    result.in_place = grown_in_place(base.outputs if deployed is None else deployed, head, result.figures,
                                     "the base plan's outputs" if deployed is None else "the deployed stack's outputs")
    return result


def grown_in_place(state: dict[str, Any], head: StackPlan, changed: list[Figure],
                   source: str = "the base plan's outputs") -> list[str]:
    """The head `pulumi up` onto a stack whose outputs are `state` (the base plan's, or the deployed stack's). The
    volume keeps the throughput it has (`weightLoad.throughputMiBps` there) until the driver applies the head's
    VolumeAttributesClass; the groups the head adds load at the old share for up to loading.HDML_MODIFY_LAG_S."""
    from components.plan import loading

    old, new = state.get("weightLoad"), head.outputs.get("weightLoad")
    if not (isinstance(old, dict) and isinstance(new, dict)) or (
            old.get("throughputMiBps"), old.get("readers")) == (new.get("throughputMiBps"), new.get("readers")):
        return []
    had, has, readers = int(old["throughputMiBps"]), int(new["throughputMiBps"]), int(new["readers"])
    reads = loading.reads_from_output(new)
    grown = loading.grown_load_s(reads, readers, had, has)
    stuck = loading.grown_load_s(reads, readers, had, had)
    budget, rest = float(new["startupBudgetSeconds"]), float(new["startSecondsBesidesLoad"])
    lag = loading.HDML_MODIFY_LAG_S / 60
    holds = "covers it" if grown + rest <= budget else "DOES NOT cover it: groups restart mid-load"
    lines = [
        f"volume throughput {had:,} -> {has:,} MiB/s for {readers} reader nodes, on the existing volume ({source}): "
        "the claim "
        f"moves to the VolumeAttributesClass of {has:,} MiB/s and `pulumi up` grows the serving set at once (it waits "
        f"only for the claim's Bound; a change within {loading.HDML_MODIFY_INTERVAL_S // 3600} h of the last one is "
        f"refused by the driver and the volume keeps {had:,} MiB/s)",
        f"groups this up adds load in at most {grown / 60:.1f} min (the old {had:,} MiB/s shared by {readers} nodes "
        f"for up to {lag:.0f} min while the change takes effect, then {has:,}); {float(new['loadSeconds']) / 60:.1f} "
        f"min on a new volume; {stuck / 60:.1f} min if it kept {had:,} MiB/s",
        f"startup probe budget {budget / 60:.1f} min vs load {grown / 60:.1f} + start besides the load "
        f"{rest / 60:.1f} = {(grown + rest) / 60:.1f} min: {holds}",
    ]
    figures_by_label = {f.label: f for f in changed}
    slices, hourly = figures_by_label.get("serving slices"), figures_by_label.get("hourly cost")
    if slices and hourly and slices.old is not None and slices.new is not None and slices.new != slices.old \
            and hourly.old is not None and hourly.new is not None:
        added = slices.new - slices.old
        left_out = unpriced(head.summary)
        note = f" (priced items only; the head leaves out {', '.join(left_out)})" if left_out else ""
        lines.append(f"cost: {hourly.new - hourly.old:+,.2f} USD/h for {added:+,.0f} slice(s), "
                     f"{(hourly.new - hourly.old) / added:+,.2f} USD/h per added slice{note}")
    return lines


def _from(obj: KubeObject) -> str:
    return "" if obj.source == "manifests.yaml" else f" (from {obj.source})"


def _object_entry(old: KubeObject | None, new: KubeObject,
                  resources: tuple[dict[str, Any] | None, dict[str, Any] | None] | None) -> list[Entry]:
    old_resource, new_resource = resources or (None, None)
    title = f"`{new.label}`" + (f" (`{new_resource['name']}`)" if new_resource else "") + _from(new)
    if old is None:
        return [Entry("create", title)]
    changes = diff_values(old.body, new.body)
    if old_resource is not None and new_resource is not None:
        changes += _resource_changes(old_resource, new_resource, with_inputs=False)
    if not changes:
        return []
    ignore = ((new_resource or {}).get("options") or {}).get("ignoreChanges", [])
    replaces = _mark(changes, new.rule_type, ignore)
    notes = []
    if new_resource is not None and old_resource is None:
        notes.append("a new Pulumi resource for an existing object: the old resource is deleted and this one "
                     f"created ([Pulumi]({URN_CHANGE_SOURCE}))")
        replaces = True
    action = "replace" if replaces else "update"
    notes += _rejected(changes) if action == "update" else []
    return [Entry(action, title, changes, notes + (_resource_notes(new_resource, action) if new_resource else []))]


# --- summary figures ----------------------------------------------------------------------------------


FIGURES: tuple[tuple[str, str, str], ...] = (
    # (label, pattern with one number group, unit) searched in summary.txt; a figure missing on either side
    # is skipped, so summary lines other changes add or reword do not break the diff (docs/plan-diff.md).
    ("accelerator nodes", r"^accelerators:.*?([\d,]+) x \S+ \(", ""),
    ("accelerator devices", r"^accelerators:.*?\(([\d,]+) [^)]*\)", ""),
    ("CPU nodes", r"([\d,]+) CPU nodes", ""),
    ("system pool nodes", r"^\s*([\d,]+) x \S+ \(system\)", ""),
    ("weights-transfer pool nodes", r"^\s*([\d,]+) x \S+ \(weights-transfer\)", ""),
    ("weight load time", r"load their copies in ([\d.,]+) min", " min"),
    ("volume hydration time", r"hydration >= ([\d.,]+) min", " min"),
    ("Hyperdisk ML throughput", r"Hyperdisk ML [\d,]+ GiB at ([\d,]+) MiB/s", " MiB/s"),
    ("model replicas", r"([\d,]+) replicas on [\d,]+ nodes", ""),
    ("serving slices", r"^total \(([\d,]+) slices", ""),
    ("sessions in HBM (all slices)", r"^total \([^)]*\): ([\d,]+) sessions in HBM", ""),
    ("KV tokens in HBM per replica", r"([\d,]+) tokens in HBM", ""),
    ("lruCapacityPerServer", r"lruCapacityPerServer ([\d,]+)", " blocks"),
    ("hourly cost", r"^cost estimate[^:\n]*:\s*\$([\d,]+(?:\.\d+)?)\s*/\s*h(?:ou)?r?", " USD/h"),
)


def figures(summary: str) -> dict[str, float]:
    found = {}
    for label, pattern, _ in FIGURES:
        match = re.search(pattern, summary, flags=re.M)
        if match:
            found[label] = float(match.group(1).replace(",", ""))
    return found


UNPRICED = re.compile(r" \+ (.+?) unpriced: set \S+")
"""An item the cost estimate has no price for, as its headline names it (components/plan/cost.py headline)."""


def unpriced(summary: str) -> tuple[str, ...]:
    line = next((line for line in summary.splitlines() if line.startswith("cost estimate")), "")
    return tuple(UNPRICED.findall(line))


def _cost_note(old_summary: str, new_summary: str) -> tuple[str, bool]:
    """(what the hourly figures leave out, whether the two cover the same items)."""
    old, new = unpriced(old_summary), unpriced(new_summary)
    if old == new:
        return (f"priced items only; unpriced on both: {', '.join(old)}" if old else ""), True
    return (f"not comparable: base leaves out {', '.join(old) or 'nothing'}, head leaves out "
            f"{', '.join(new) or 'nothing'}"), False


def diff_figures(old_summary: str, new_summary: str) -> list[Figure]:
    old, new = figures(old_summary), figures(new_summary)
    found = []
    for label, _, unit in FIGURES:
        if label not in old or label not in new:
            continue
        note, comparable = _cost_note(old_summary, new_summary) if label == "hourly cost" else ("", True)
        if old[label] != new[label] or not comparable:
            found.append(Figure(label, old[label], new[label], unit, note, comparable))
    return found


# --- report -------------------------------------------------------------------------------------------


SYMBOL = {"create": "+ create", "delete": "- delete", "update": "~ update", "replace": "+- replace"}


def _code(text: str) -> str:
    text = text.replace("|", "\\|")
    fence = "``" if "`" in text else "`"
    pad = " " if fence == "``" else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _show(value: Any) -> str:
    if value is ABSENT:
        return "*absent*"
    return _canonical(value) if not isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def shorten_pair(old: Any, new: Any, width: int = WIDTH) -> tuple[str, str]:
    """Both sides as text; a long pair is cut to the part that differs, with a little context."""
    a, b = _show(old), _show(new)
    if max(len(a), len(b)) <= width:
        return a, b
    if old is ABSENT or new is ABSENT or not (isinstance(old, str) and isinstance(new, str)):
        return _cut(a, width), _cut(b, width)
    start = 0
    while start < min(len(a), len(b)) and a[start] == b[start]:
        start += 1
    end = 0
    while end < min(len(a), len(b)) - start and a[-1 - end] == b[-1 - end]:
        end += 1
    context = max(12, (width - (max(len(a), len(b)) - start - end)) // 2)
    lo = max(0, start - context)

    def window(text: str) -> str:
        hi = min(len(text), len(text) - end + context)
        middle = text[lo:hi]
        if len(middle) > width:
            middle = middle[:width - 1] + "…"
        return ("…" if lo > 0 else "") + middle + ("…" if hi < len(text) else "")

    return window(a), window(b)


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[:width - 1] + "…"


def _change_row(change: Change) -> str:
    old, new = shorten_pair(change.old, change.new)
    note = change.note
    if change.replaces is not None:
        note = f"forces replacement ([source]({change.replaces.source}))"
    return f"| {_code(change.path or '(whole)')} | {_code(old) if change.old is not ABSENT else old} | " \
           f"{_code(new) if change.new is not ABSENT else new} | {note} |"


def _entries(title: str, entries: list[Entry], max_rows: int) -> list[str]:
    if not entries:
        return []
    lines = [f"### {title}", ""]
    for entry in entries:
        lines.append(f"**{SYMBOL[entry.action]}** {entry.title}")
        lines += [f"- {note}" for note in entry.notes]
        if entry.changes:
            # Past max_rows (a chart version bump can change hundreds of CRD schema paths) only the rows that
            # carry a note (replacement, rejection, ignoreChanges) are kept.
            shown = [c for i, c in enumerate(entry.changes) if not max_rows or i < max_rows or c.note or c.replaces]
            lines += ["", "| path | base | head | note |", "| --- | --- | --- | --- |"]
            lines += [_change_row(c) for c in shown]
            if len(shown) < len(entry.changes):
                lines += ["", f"*… and {len(entry.changes) - len(shown)} more paths (`--max-rows 0` shows all)*"]
        lines.append("")
    return lines


def _number(value: float | None, unit: str) -> str:
    if value is None:
        return "*absent*"
    text = f"{value:,.2f}".rstrip("0").rstrip(".") if not float(value).is_integer() else f"{int(value):,}"
    return text + unit


def _delta(figure: Figure) -> str:
    if figure.old is None or figure.new is None:
        return ""
    if not figure.comparable:
        return figure.note
    delta = figure.new - figure.old
    sign = "+" if delta > 0 else "-"
    text = f"{sign}{_number(abs(delta), figure.unit)}"
    text += f" ({sign}{abs(delta) / figure.old:.0%})" if figure.old else ""
    return text + (f"; {figure.note}" if figure.note else "")


def stack_report(diff: StackDiff, max_rows: int = MAX_ROWS) -> list[str]:
    lines = [f"## Stack `{diff.name}`", ""]
    if diff.only_in:
        return lines + [diff.only_in, ""]
    lines += [f"*{note}*" for note in diff.notes] + ([""] if diff.notes else [])
    if diff.empty:
        return lines + ["no changes", ""]
    replaced = [e for e in diff.resources + diff.objects if e.action == "replace"]
    if replaced:
        lines += ["### Replacements", ""]
        for entry in replaced:
            causes = sorted({c.path for c in entry.changes if c.replaces is not None})
            lines.append(f"- {entry.title}: " + (", ".join(_code(c) for c in causes) or "a new resource identity"))
        lines.append("")
    rejected = [e for e in diff.objects if e.action == "update" and _rejected(e.changes)]
    if rejected:
        lines += ["### Updates the API server rejects", ""]
        for entry in rejected:
            causes = sorted({c.path for c in entry.changes if c.note.startswith("immutable")})
            lines.append(f"- {entry.title}: " + ", ".join(_code(c) for c in causes))
        lines.append("")
    if diff.in_place:
        lines += ["### Applied to the existing stack", ""] + [f"- {line}" for line in diff.in_place] + [""]
    if diff.figures:
        lines += ["### Summary figures", "", "| figure | base | head | change |", "| --- | ---: | ---: | ---: |"]
        lines += [f"| {f.label} | {_number(f.old, f.unit)} | {_number(f.new, f.unit)} | {_delta(f)} |"
                  for f in diff.figures]
        lines.append("")
    lines += _entries("Pulumi resources", diff.resources, max_rows)
    lines += _entries("Kubernetes objects", diff.objects, max_rows)
    if diff.outputs:
        lines += ["### Stack outputs", "", "| path | base | head | note |", "| --- | --- | --- | --- |"]
        lines += [_change_row(c) for c in diff.outputs] + [""]
    if diff.summary_lines:
        lines += ["<details><summary>summary.txt lines that changed</summary>", "", "```diff", *diff.summary_lines,
                  "```", "", "</details>", ""]
    return lines


def report(base: Side, head: Side, diffs: list[StackDiff], max_rows: int = MAX_ROWS) -> str:
    lines = [f"# Offline plan diff: {_code(base.label)} → {_code(head.label)}", ""]
    notes = [f"- {d.name}: {note}" for d in diffs for note in d.notes]
    if all(d.empty for d in diffs):
        names = ", ".join(d.name for d in diffs) or "none"
        return "\n".join(lines + [f"no changes (stacks: {names})"] + ([""] + notes if notes else [])) + "\n"
    lines += ["| stack | create | update | replace | delete | summary figures changed |",
              "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for d in diffs:
        c = d.counts()
        lines.append(f"| {d.name} | {c['create']} | {c['update']} | {c['replace']} | {c['delete']} | "
                     f"{len(d.figures)} |" if not d.only_in else f"| {d.name} | {d.only_in} |||||")
    lines.append("")
    for d in diffs:
        lines += stack_report(d, max_rows)
    return "\n".join(lines).rstrip("\n") + "\n"


def diff_sides(base: Side, head: Side, deployed: dict[str, Any] | None = None) -> list[StackDiff]:
    if base.stack_folder and head.stack_folder:  # two stack folders: compare them whatever their names
        (old_name, old), (new_name, new) = next(iter(base.stacks.items())), next(iter(head.stacks.items()))
        return [diff_stack(new_name if old_name == new_name else f"{old_name} → {new_name}", old, new, deployed)]
    if deployed is not None:
        [name] = set(base.stacks) & set(head.stacks)
        return [diff_stack(name, base.stacks[name], head.stacks[name], deployed)]
    diffs = []
    for name in sorted(set(base.stacks) | set(head.stacks)):
        if name not in head.stacks:
            diffs.append(StackDiff(name, only_in=f"stack removed ({len(base.stacks[name].resources)} resources)"))
        elif name not in base.stacks:
            diffs.append(StackDiff(name, only_in=f"new stack ({len(head.stacks[name].resources)} resources)"))
        else:
            diffs.append(diff_stack(name, base.stacks[name], head.stacks[name]))
    return diffs


COMMENT_MARKER = "<!-- kimi-k3-1 offline plan diff -->"
"""First line of the pull-request comment; .github/workflows/preview.yml edits the comment that starts with it."""
COMMENT_LIMIT = 65_000
"""GitHub refuses comment bodies longer than 65,536 characters."""


def truncate(text: str, limit: int) -> str:
    if limit <= 0 or len(text) <= limit:
        return text
    note = "\n\n*… cut at {limit:,} characters; the job summary or `python -m tools diff` has all of it.*\n"
    return text[:max(0, limit - len(note) - 10)].rsplit("\n", 1)[0] + note.format(limit=limit)


def read_deployed(path: Path) -> dict[str, Any]:
    """A stack's outputs as `pulumi stack output --json` prints them; it must hold `weightLoad`."""
    try:
        outputs = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise DiffError(f"--deployed {path}: not a readable JSON file ({err})") from None
    if not isinstance(outputs, dict) or not isinstance(outputs.get("weightLoad"), dict):
        raise DiffError(f"--deployed {path}: no `weightLoad` output (the stack was deployed by a version that did "
                        "not export it; compare with the plan of the commit it was deployed from instead)")
    return outputs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=prog("diff"), description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("base", help="plan folder or git ref of the state before the change")
    parser.add_argument("head", help="plan folder or git ref of the state after the change")
    parser.add_argument("--stack", action="append", default=[], metavar="NAME",
                        help="compare only this stack (repeatable)")
    parser.add_argument("--repo", type=Path, default=ROOT, help="git repository the refs are in (default: this one)")
    parser.add_argument("--out", type=Path, metavar="FILE", help="write the report to this file instead of stdout")
    parser.add_argument("--max-chars", type=int, default=0, help="cut the report to this length (a job summary "
                        "holds 1 MiB)")
    parser.add_argument("--comment", type=Path, help="also write a copy for a pull-request comment: cut to "
                        f"{COMMENT_LIMIT:,} characters, first line the marker the workflow finds it by")
    parser.add_argument("--exit-code", action="store_true", help="exit 1 when the plans differ")
    parser.add_argument("--max-rows", type=int, default=MAX_ROWS, help=f"paths shown per resource or object "
                        f"(default {MAX_ROWS}; 0: all)")
    parser.add_argument("--deployed", type=Path, metavar="FILE",
                        help="the deployed stack's outputs (`pulumi stack output --json > FILE`): what the head is "
                        "applied to, in place of the base plan's outputs (one stack; docs/plan-diff.md)")
    args = parser.parse_args(argv)
    try:
        deployed = read_deployed(args.deployed) if args.deployed else None
        with tempfile.TemporaryDirectory(prefix="plan-diff-") as workdir:
            base, head = load_sides([args.base, args.head], args.repo, args.stack, Path(workdir))
        if args.stack:
            base.stacks = {k: v for k, v in base.stacks.items() if k in args.stack}
            head.stacks = {k: v for k, v in head.stacks.items() if k in args.stack}
            if not base.stacks and not head.stacks:
                raise DiffError(f"no stack {', '.join(args.stack)} on either side")
        if deployed is not None and len(set(base.stacks) & set(head.stacks)) != 1 and not (
                base.stack_folder and head.stack_folder):
            raise DiffError("--deployed is one stack's outputs: name the stack with --stack")
    except DiffError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    diffs = diff_sides(base, head, deployed)
    text = truncate(report(base, head, diffs, args.max_rows), args.max_chars)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
    else:
        sys.stdout.write(text)
    if args.comment:
        args.comment.parent.mkdir(parents=True, exist_ok=True)
        args.comment.write_text(f"{COMMENT_MARKER}\n{truncate(text, COMMENT_LIMIT - len(COMMENT_MARKER) - 1)}")
    changed = not all(d.empty for d in diffs)
    return 1 if args.exit_code and changed else 0


if __name__ == "__main__":
    sys.exit(main())
