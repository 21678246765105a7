"""Offline plan: render stacks with the real program under Pulumi's mock engine, no cloud needed.

    python -m tools plan                 # every Pulumi.<stack>.yaml beside Pulumi.yaml
    python -m tools plan --stack gpu     # one stack
    python -m tools plan --stack-file path/to/Pulumi.x.yaml   # a stack file kept elsewhere

Writes build/plan/<stack>/{resources.json, manifests.yaml, crds.yaml, charts.json, outputs.json,
summary.txt, overview.txt} (format: docs/plan-format.md) and prints each stack's overview: a screen grouped into
what will be created, capacity, time, cost, limits and warnings; `--detail` prints the full summary instead, every
figure with the terms and sources it comes from. All stacks render first. A stack
that fails (a config error in its file, say) is named with its error and keeps its previous plan folder
untouched; every other stack is still written, each folder swapped in whole, so no stack ever has
partial output. The exit code is 1 if any stack failed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml

from tools import prog
from tools.preview.collector import without_cyclic_gc

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUT = ROOT / "build" / "plan"
DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def discover_stacks() -> list[Path]:
    return sorted(ROOT.glob("Pulumi.*.yaml"))


def stack_name(path: Path) -> str:
    return path.name[len("Pulumi."):-len(".yaml")]


Result = tuple[str, "dict[str, Any] | None", str]
PARALLEL = 2
"""Stacks rendered at once (the machines this runs on have 2 cores)."""


def render_all(stack_files: list[Path]) -> list[Result]:
    """Render each stack in its own process: the Pulumi runtime keeps one program per process.

    Where the OS can fork, each stack renders in a forked copy of this process (no second interpreter to start);
    for several stacks the provider modules are imported here first (tools.preview.render.preload), once, so
    every child starts with them in memory, which saves most of a render's time; the same holds when a caller
    has imported them already (tools.preview.plan_diff renders two commits this way). Otherwise each stack
    gets a fresh interpreter importing only what it uses."""
    if not hasattr(os, "fork"):
        with ThreadPoolExecutor(max_workers=PARALLEL) as pool:
            return list(pool.map(_subprocess_render, stack_files))
    from tools.preview import helm_render, render

    if len(stack_files) > 1:
        render.preload()
    results: dict[Path, Result] = {}
    running: dict[int, tuple[Path, Any, Any]] = {}
    pending = list(stack_files)
    with tempfile.TemporaryDirectory(prefix="kimi-plan-charts-") as charts:
        # The children share their chart renders for this run (helm_render.RUN_CACHE).
        outer, helm_render.RUN_CACHE = helm_render.RUN_CACHE, Path(charts)
        try:
            while pending or running:
                while pending and len(running) < PARALLEL:
                    stack_file = pending.pop(0)
                    out, err = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")
                    running[_fork_render(render, stack_file, out, err)] = (stack_file, out, err)
                pid, status = os.wait()
                stack_file, out, err = running.pop(pid)
                with out, err:
                    out.seek(0)
                    err.seek(0)
                    results[stack_file] = _result(stack_file, os.waitstatus_to_exitcode(status), out.read(),
                                                  err.read())
        finally:
            helm_render.RUN_CACHE = outer
    return [results[f] for f in stack_files]


def _fork_render(render: Any, stack_file: Path, out: Any, err: Any) -> int:
    return fork_call(lambda: render.run(stack_file), out.fileno(), err.fileno())


def fork_call(func: Callable[[], int], out: int, err: int) -> int:
    """Run `func` in a forked copy of this process with stdout and stderr on the given file descriptors;
    returns the child's pid. The child exits with func's result (1 and a traceback on an exception) without
    interpreter teardown."""
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        os.dup2(out, 1)
        os.dup2(err, 2)
        sys.stdout = os.fdopen(1, "w", closefd=False)
        sys.stderr = os.fdopen(2, "w", closefd=False)
        code = func()
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _subprocess_render(stack_file: Path) -> Result:
    proc = subprocess.run([sys.executable, "-m", "tools.preview.render", str(stack_file)], cwd=ROOT,
                          capture_output=True, text=True)
    return _result(stack_file, proc.returncode, proc.stdout, proc.stderr)


def _result(stack_file: Path, code: int, out: str, err: str) -> Result:
    stack = stack_name(stack_file)
    if code != 0:
        return stack, None, err.strip() or f"render exited {code}"
    return stack, json.loads(out), err.strip()


def _json(data: Any) -> str:
    return json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def _json_list(items: list[Any], memo: dict[str, str]) -> str:
    """`_json(items)` of a list, byte for byte, each distinct item indented once per run: the stacks of one run
    share most of their resources, and the indenting encoder is pure Python (json's C encoder only writes compact
    text, which here serves as the item's key)."""
    if not items:
        return _json(items)
    parts = []
    for item in items:
        key = json.dumps(item, sort_keys=True, ensure_ascii=False)
        text = memo.get(key)
        if text is None:
            text = memo[key] = "  " + json.dumps(item, indent=2, sort_keys=True, ensure_ascii=False).replace(
                "\n", "\n  ")
        parts.append(text)
    return "[\n" + ",\n".join(parts) + "\n]\n"


def write_stack(folder: Path, document: dict[str, Any], memo: dict[str, str] | None = None) -> None:
    """A stack's plan files; `memo` carries encoded objects from one stack to the next (write_plans)."""
    memo = {} if memo is None else memo
    folder.mkdir(parents=True)
    (folder / "resources.json").write_text(_json_list(document["resources"], memo))
    (folder / "manifests.yaml").write_text(manifests_text(document, memo))
    (folder / "crds.yaml").write_text("---\n".join(
        f"# chart {resource}: {file}\n{text.removeprefix('---').lstrip(chr(10))}"
        for resource, file, text in document["crds"]))
    (folder / "charts.json").write_text(_json(document["charts"]))
    (folder / "outputs.json").write_text(_json(document["outputs"]))
    (folder / "summary.txt").write_text("\n".join(document["summary"]) + "\n")
    (folder / "overview.txt").write_text("\n".join(overview_lines(folder.name, document)) + "\n")


def write_plans(out: Path, results: list[Result]) -> None:
    """Write every rendered stack into a staging folder first, then swap each stack's folder in whole."""
    out.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=out))
    try:
        memo: dict[str, str] = {}
        for stack, document, _ in results:
            write_stack(staging / stack, document, memo)
        for stack, _, _ in results:
            target = out / stack
            if target.exists():
                shutil.rmtree(target)
            (staging / stack).rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def manifests_text(document: dict[str, Any], memo: dict[str, str] | None = None) -> str:
    """Multi-document YAML; an object from a chart is preceded by a `# chart <resource>: <chart> <version>` line.
    `memo`: each distinct object is dumped once per run (PyYAML represents in pure Python; the stacks of one run
    share most objects), keyed by its compact JSON."""
    memo = {} if memo is None else memo
    charts = {c["resource"]: f"{c['chart']} {c['version']}" for c in document["charts"]}
    docs = []
    for chart, manifest in zip(document["manifestCharts"], document["manifests"], strict=True):
        key = "yaml:" + json.dumps(manifest, sort_keys=True, ensure_ascii=False)
        text = memo.get(key)
        if text is None:
            text = memo[key] = yaml.dump(manifest, Dumper=DUMPER, sort_keys=True, default_flow_style=False,
                                         width=120)
        docs.append(f"# chart {chart}: {charts[chart]}\n{text}" if chart else text)
    return "---\n".join(docs)


def summarize(stack: str, document: dict[str, Any]) -> list[str]:
    resources = document["resources"]
    custom = sum(1 for r in resources if not r["type"].startswith("kimi:"))
    lines = [f"{stack}: {len(resources)} resources ({custom} cloud/provider objects, "
             f"{len(resources) - custom} components), {len(document['manifests'])} Kubernetes manifests"]
    return lines + [f"  {line}" for line in document["summary"]]


def overview_lines(stack: str, document: dict[str, Any]) -> list[str]:
    """The reader's view of one stack (components/plan/overview.py), its title led by the stack's name."""
    from components.plan.overview import Overview

    lines = Overview.from_json(document["overview"]).lines()
    return [f"{stack}: {lines[0]}", *lines[1:]]


def main(argv: list[str] | None = None) -> int:
    """The command; the cyclic garbage collector is off while it runs (see without_cyclic_gc)."""
    with without_cyclic_gc():
        return _main(argv)


def _main(argv: list[str] | None) -> int:
    parser = argparse.ArgumentParser(prog=prog("plan"), description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stack", action="append", default=[], metavar="NAME",
                        help="stack to render (repeatable; default: all)")
    parser.add_argument("--stack-file", action="append", default=[], type=Path, help="stack file to render")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, metavar="FOLDER",
                        help="output folder (default: build/plan)")
    parser.add_argument("--quiet", action="store_true", help="print errors only")
    parser.add_argument("--detail", action="store_true",
                        help="print the full summary (summary.txt: every figure with its terms and sources) instead "
                             "of the overview")
    args = parser.parse_args(argv)
    stacks = [ROOT / f"Pulumi.{name}.yaml" for name in args.stack] + [p.resolve() for p in args.stack_file]
    stacks = stacks or discover_stacks()
    missing = [p for p in stacks if not p.is_file()]
    if missing or not stacks:
        print(f"error: no stack file {missing[0] if missing else 'Pulumi.<stack>.yaml'}", file=sys.stderr)
        return 2

    results = render_all(stacks)
    failed = [(stack, message) for stack, document, message in results if document is None]
    for stack, message in failed:
        print(f"plan {stack}: {message}", file=sys.stderr)
    results = [result for result in results if result[1] is not None]

    if results:
        write_plans(args.out, results)

    if not args.quiet:
        for stack, document, _ in results:
            print("\n".join(summarize(stack, document) if args.detail else overview_lines(stack, document)))
        if results:
            print(f"plan written to {args.out.relative_to(ROOT) if args.out.is_relative_to(ROOT) else args.out}/")
        if failed:
            print(f"not rendered: {', '.join(stack for stack, _ in failed)} (errors above); the other stacks were")
        missing = missing_charts(results)
        if missing:
            print(f"chart objects missing from the plan: no verified copy of {', '.join(missing)}, so their objects "
                  "are not in it and not checked; run `make charts` (.venv/bin/python -m tools charts --fetch) "
                  "to pull the pinned charts, or set KIMI_CHARTS_DIR to a folder holding them")
    return 1 if failed else 0


def missing_charts(results: list[Result]) -> list[str]:
    """`<chart> <version>` of every chart some rendered stack could not render (no verified copy found)."""
    return sorted({f"{c['chart'].rsplit('/', 1)[-1]} {c['version']}" for _, document, _ in results
                   for c in document["charts"] if c["skipped"]})


if __name__ == "__main__":
    exit_code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # The provider modules are loaded here; skipping interpreter teardown saves about a second.
    os._exit(exit_code)
