"""What README.md, docs/ and the committed stack files say about the engines, their shape, cost, quota and pools is
what the plan renders: the generated blocks equal a fresh generation from the session's plans, and the statements
written by hand are held against the plan's summary and manifests.

The session renders the fixture stacks (tests/stacks/), not the committed ones; the first test proves the two differ
only in the names a user replaces (project, reservation), none of which moves a figure."""

from __future__ import annotations

import re

import pytest

from tests.conftest import ROOT, STACKS, fixture_stack
from tools.preview import doc_figures, stack_file

USER_NAMES = {"gcp.project", "gpu.reservation", "tpu.reservation"}
"""Keys whose committed placeholder the fixture replaces with a test name; no figure of the summary depends on them."""

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _config(path) -> dict[str, str]:
    """The stack's config as the Pulumi CLI hands it to the program (tools/preview/stack_file.py)."""
    project, schema = stack_file.project_config(ROOT / "Pulumi.yaml")
    return stack_file.load_stack(path, project, schema).values


@pytest.mark.parametrize("stack", STACKS)
def test_the_fixture_stacks_are_the_committed_ones_but_for_user_names(stack):
    committed, fixture = _config(ROOT / f"Pulumi.{stack}.yaml"), _config(fixture_stack(stack))
    differ = {key.removeprefix("kimi-k3-1:") for key in committed.keys() | fixture.keys()
              if committed.get(key) != fixture.get(key)}
    assert differ <= USER_NAMES, f"Pulumi.{stack}.yaml and tests/stacks differ in {sorted(differ - USER_NAMES)}"


@pytest.mark.parametrize("block", doc_figures.BLOCKS, ids=lambda b: b.doc)
def test_generated_blocks_are_the_plans(plans, block):
    text = (ROOT / block.doc).read_text()
    fresh = doc_figures.rewrite(text, block, {stack: plans[stack].summary for stack in STACKS})
    assert fresh is not None, f"{block.doc} has no {block.marker} block"
    assert fresh == text, (f"{block.doc}'s {block.marker} block differs from the plan: run `make plan && "
                           f"python -m tools doc-figures`")


SUMMARY_LINE = re.compile(r"^\s*((?:accelerators|weight load|per device|router cache|cost estimate|time to serving"
                          r"|staging|weights)\b[^\n]*:.*)$", flags=re.M)


def _fenced(text: str, languages: set[str]) -> list[str]:
    """The contents of the fenced blocks of a Markdown text whose info string is one of `languages`."""
    blocks, current, language = [], None, ""
    for line in text.splitlines():
        if line.startswith("```"):
            if current is None:
                current, language = [], line[3:].strip()
            else:
                if language in languages:
                    blocks.append("\n".join(current))
                current = None
        elif current is not None:
            current.append(line)
    return blocks


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_quoted_summary_line_is_in_a_plan(plans, doc):
    """A summary line quoted anywhere in the docs (in a fenced block) is one the plan prints today: no stale copies."""
    printed = {line.strip() for stack in STACKS for line in plans[stack].summary.splitlines()}
    blocks = _fenced(doc.read_text(), {"", "text"})
    stale = [m.group(1).strip() for block in blocks for m in SUMMARY_LINE.finditer(block)
             if m.group(1).strip() not in printed]
    assert not stale, f"{doc.name} quotes summary lines the plan no longer prints: {stale}"


def _track_row(track: str) -> list[str]:
    readme = (ROOT / "README.md").read_text()
    row = re.search(rf"^\| `{track}` \| (.*) \|$", readme, flags=re.M)
    assert row, f"README's track table has no {track} row"
    return [cell.strip() for cell in row.group(1).split(" | ")]


@pytest.mark.parametrize("stack", STACKS)
def test_the_track_table_names_the_engine_that_runs(plans, stack):
    hardware, engine, shape = _track_row(stack)
    load = next(line for line in plans[stack].summary.splitlines() if line.startswith("weight load:"))
    assert load.startswith(f"weight load: {engine} "), f"README says {engine!r}; the plan: {load!r}"
    machine = re.search(r"`([a-z0-9-]+)`", hardware).group(1)
    accelerators = next(line for line in plans[stack].summary.splitlines() if line.startswith("accelerators:"))
    assert f"x {machine}" in accelerators, f"README's {stack} hardware {machine!r}; the plan: {accelerators!r}"


def _engine_args(plan) -> str:
    """Every engine container's command and args of a plan, as one string."""
    parts = []
    for obj in plan.manifests:
        text = repr(obj)
        if obj.get("kind") in {"LeaderWorkerSet", "DisaggregatedSet"}:
            parts.append(text)
    return "\n".join(parts)


def test_the_track_table_names_the_kv_paths_the_engines_get(gpu, tpu):
    """"NIXL KV transfer, CPU KV offload" (GPU) and "Raiden host-DRAM KV offload" (TPU) are the connectors the
    rendered engines are started with."""
    _, _, gpu_shape = _track_row("gpu")
    _, _, tpu_shape = _track_row("tpu")
    gpu_args, tpu_args = _engine_args(gpu), _engine_args(tpu)
    assert "NIXL" in gpu_shape and "NixlConnector" in gpu_args
    assert "CPU KV offload" in gpu_shape and "OffloadingConnector" in gpu_args
    assert "DisaggregatedSet" in gpu_shape and "DisaggregatedSet" in {o.get("kind") for o in gpu.manifests}
    assert "Raiden" in tpu_shape and "TPURaidenOffloadingConnector" in tpu_args
    assert "expert parallelism" in tpu_shape and "--enable-expert-parallel" in tpu_args


def test_the_quota_table_counts_the_plans_nodes(plans):
    """README's capacity table: the accelerator counts per slice are the plan's, and the CPU families it names are
    the families of the plan's CPU pools."""
    readme = (ROOT / "README.md").read_text()
    gpu_row = re.search(r"^\| `gpu` \| (\d+) `([a-z0-9-]+)` nodes \(([^)]*)\) per slice", readme, flags=re.M)
    assert gpu_row, "README's capacity table has no gpu row of the form `N `machine` nodes (shape) per slice`"
    accelerators = next(line for line in plans["gpu"].summary.splitlines() if line.startswith("accelerators:"))
    assert f"{gpu_row.group(3)} = {gpu_row.group(1)} nodes per slice" in accelerators, accelerators
    tpu_row = re.search(r"^\| `tpu` \| (\d+) slices .*?(\d+) hosts and (\d+) chips each", readme, flags=re.M)
    assert tpu_row
    tpu_accelerators = next(line for line in plans["tpu"].summary.splitlines() if line.startswith("accelerators:"))
    slices, hosts, chips = map(int, tpu_row.groups())
    assert tpu_accelerators.startswith(f"accelerators: {slices} x 2x2x4 tpu7x slices = {slices * hosts} x ")
    assert f"({slices * chips} chips)" in tpu_accelerators
    cpu_cell = gpu_row.string[gpu_row.start():].splitlines()[0].rsplit(" | ", 1)[1]
    for stack in STACKS:
        for m in map(doc_figures.POOL.match, plans[stack].summary.splitlines()):
            if m and m.group(3).startswith(("n2-", "c3-", "e2-", "n4-", "c4-")):
                family = m.group(3).split("-")[0].upper()
                assert f"{family} for" in cpu_cell and f"`{m.group(1)}`" in cpu_cell, (
                    f"README's quota cell does not name pool {m.group(1)} ({m.group(3)}): {cpu_cell}")


@pytest.mark.parametrize("path", ["Pulumi.yaml", "Pulumi.tpu.yaml", "Pulumi.gpu.yaml"])
def test_stack_file_headers_name_the_engines_that_run(plans, path):
    head = (ROOT / path).read_text().split("config:")[0]
    engines = {stack: _track_row(stack)[1].split()[0] for stack in STACKS}
    if path == "Pulumi.yaml" or path == "Pulumi.tpu.yaml":
        assert engines["tpu"] in head, f"{path} does not name the TPU engine {engines['tpu']!r}"
    assert "SGLang" not in head, f"{path} names SGLang, which the committed stacks do not run"


def _pins(path) -> int:
    """Requirement lines of a pip requirements file: each package once (`name==version` or `name @ url`)."""
    return sum(1 for line in (ROOT / path).read_text().splitlines() if re.match(r"[A-Za-z0-9][\w.-]* ?(==|@)", line))


@pytest.mark.parametrize(("doc", "stated", "path"), [
    ("docs/architecture.md", r"`requirements-engines\.txt` \((\d+) pins", "requirements-engines.txt"),
    ("docs/architecture.md", r"`requirements-engines-tpu\.txt` \((\d+) pins", "requirements-engines-tpu.txt"),
    ("docs/versions.md", r"\| vLLM-TorchTPU and dependencies \| (\d+) packages", "components/locks/vllm-torchtpu.txt"),
])
def test_stated_pin_counts_are_the_files(doc, stated, path):
    """Package counts written by hand next to a requirements file or lock are that file's."""
    m = re.search(stated, (ROOT / doc).read_text())
    assert m, f"{doc} no longer states the count of {path} in the form the test reads"
    assert int(m.group(1)) == _pins(path), f"{doc} says {m.group(1)} for {path}, which has {_pins(path)}"


def _capacity_row(label: str) -> tuple[str, str]:
    """(GPU cell, TPU cell) of docs/capacity.md's "Per replica" table row that starts with `label`."""
    text = (ROOT / "docs" / "capacity.md").read_text().split("## Per replica", 1)[1]
    row = next((line for line in text.splitlines() if line.startswith(f"| {label}")), None)
    assert row, f"docs/capacity.md's per-replica table has no row {label!r}"
    cells = [cell.strip() for cell in row.strip("|").split(" | ")]
    return cells[1], cells[2]


def _number(text: str) -> int:
    return int(text.replace(",", ""))


def test_the_capacity_tables_hand_figures_are_the_models():
    """docs/capacity.md writes the per-replica figures out with their arithmetic; the results are the capacity
    model's on the committed shape (the fixture stacks' config): blocks per engine, blocks of one full-context
    request, lruCapacityPerServer, and --max-num-seqs."""
    from components.plan import capacity, prefixcache
    from tests.config.test_config import parse

    gpu, tpu = capacity.serving_capacity(parse("gpu")), capacity.serving_capacity(parse("tpu"))
    gpu_cell, tpu_cell = _capacity_row("blocks per engine")
    assert _number(re.match(r"([\d,]+) of", gpu_cell).group(1)) == gpu.blocks_per_engine, gpu_cell
    assert _number(re.match(r"([\d,]+) of", tpu_cell).group(1)) == tpu.blocks_per_engine, tpu_cell
    gpu_cell, tpu_cell = _capacity_row("one full-context request")
    assert _number(re.search(r"= ([\d,]+) blocks", gpu_cell).group(1)) == gpu.blocks_per_sequence, gpu_cell
    assert _number(re.search(r"= ([\d,]+) blocks", tpu_cell).group(1)) == tpu.blocks_per_sequence, tpu_cell
    gpu_cell, tpu_cell = _capacity_row("`lruCapacityPerServer`")
    for cell, stack in ((gpu_cell, "gpu"), (tpu_cell, "tpu")):
        stated = _number(re.search(r"\*\*([\d,]+)\*\*", cell).group(1))
        assert stated == prefixcache.lru_capacity_per_server(parse(stack)), cell
    doc = (ROOT / "docs" / "capacity.md").read_text()
    stated = re.search(r"\*\*`--max-num-seqs` \(GPU, both roles\): (\d+)\*\* = ([\d,]+) blocks // (\d+) groups", doc)
    assert stated, "docs/capacity.md no longer states GPU --max-num-seqs in the form the test reads"
    decode = capacity.decode_capacity(parse("gpu"))
    assert (int(stated.group(1)), _number(stated.group(2))) == (gpu.max_running, gpu.blocks_per_engine)
    assert decode.max_running == gpu.max_running
    assert gpu.max_running == gpu.blocks_per_engine // int(stated.group(3))


def test_the_seeds_32_sessions_figures_are_the_models():
    """The GPU figures docs/capacity.md and docs/seed-vs-reality.md repeat in prose (blocks per engine and per
    request, the blocks to spare, the non-weight HBM above which an engine admits one request fewer)."""
    from components.plan import capacity
    from tests.config.test_config import parse

    gpu = capacity.serving_capacity(parse("gpu"))
    spare = gpu.blocks_per_engine - gpu.sequences_per_engine * gpu.blocks_per_sequence
    ceiling = f"{gpu.non_weight_ceiling_bytes / 1e9:.1f} GB"
    cap = " ".join((ROOT / "docs" / "capacity.md").read_text().split())
    seed = " ".join((ROOT / "docs" / "seed-vs-reality.md").read_text().split())
    assert f"with {spare} blocks to spare per engine: a non-weight reservation above about {ceiling} per GPU" in cap
    assert f"({gpu.blocks_per_engine} blocks, {gpu.blocks_per_sequence} per request)" in seed
    assert f"with {spare} blocks to spare" in seed and f"non-weight HBM stays under ~{ceiling} per GPU" in seed
