"""Read engine facts from shared/: parser dumps (engine-flags/*.tsv) and JSON key sets recorded in
engines.md / llm-d.md. Tests compare what the plan generates against these, never against our code."""

from __future__ import annotations

import ast
import json
import re
import shlex
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

BACKTICKED = re.compile(r"`([a-z_][a-z0-9_]*)`")


@dataclass(frozen=True)
class Flag:
    names: tuple[str, ...]
    choices: tuple[str, ...]


@cache
def parser_flags(path: Path) -> dict[str, Flag]:
    """`names<TAB>default=...<TAB>choices=[...]` lines (or one name per line for sglang-jax)."""
    flags: dict[str, Flag] = {}
    for line in path.read_text().splitlines():
        if not line.startswith("-"):
            continue
        fields = line.split("\t")
        names = tuple(n.strip() for n in fields[0].split("|"))
        choices: tuple[str, ...] = ()
        for field in fields[1:]:
            if field.startswith("choices=") and field != "choices=":
                choices = tuple(str(c) for c in ast.literal_eval(field[len("choices="):]))
        for name in names:
            flags[name] = Flag(names, choices)
    return flags


def canonical(flag: str) -> str:
    """vLLM accepts underscores for dashes (engines.md §1.1)."""
    return "--" + flag[2:].replace("_", "-")


def split_flags(argv: list[str]) -> list[tuple[str, str | None]]:
    """(flag, value) pairs; a flag followed by another flag (or nothing) has no value."""
    pairs = []
    for i, token in enumerate(argv):
        if not token.startswith("--"):
            continue
        if "=" in token:
            flag, value = token.split("=", 1)
            pairs.append((flag, value))
            continue
        following = argv[i + 1] if i + 1 < len(argv) else None
        pairs.append((token, None if following is None or following.startswith("--") else following))
    return pairs


def exec_argv(script: str) -> list[str]:
    """The argv of the `exec` line of a generated pod script (shell variables stay as `${NAME}` text)."""
    [line] = [line for line in script.splitlines() if line.startswith("exec ")]
    return shlex.split(line)[1:]


def section(text: str, start: str, end: str) -> str:
    head = text.index(start)
    return text[head:text.index(end, head + len(start))]


@cache
def vllm_kv_transfer_keys(engines_md: Path, version: str) -> frozenset[str]:
    """Top-level KVTransferConfig keys from the engines.md §1.3 table row for `version`."""
    row = next(line for line in engines_md.read_text().splitlines() if line.startswith(f"| {version} |"))
    cell = row.split("|")[2].split("(")[0]
    return frozenset(key.strip() for key in cell.split(",") if key.strip())


@cache
def offloading_extra_keys(engines_md: Path) -> frozenset[str]:
    block = section(engines_md.read_text(), "* **OffloadingConnector**", "* **MultiConnector**")
    return frozenset(BACKTICKED.findall(block))


@cache
def vllm_kv_events_keys(engines_md: Path) -> frozenset[str]:
    """The `* Keys:` bullet of engines.md §1.4 (it wraps over lines); backticked values like `zmq` come along."""
    lines = engines_md.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("* Keys: `enable_kv_cache_events`"))
    end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("* "))
    return frozenset(BACKTICKED.findall(" ".join(lines[start:end])))


@cache
def sglang_kv_events_keys(engines_md: Path) -> frozenset[str]:
    """The key list on the line after "`--kv-events-config` JSON keys [...]:" in engines.md §2.4."""
    lines = engines_md.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if "`--kv-events-config` JSON keys" in line)
    return frozenset(BACKTICKED.findall(lines[start + 1]))


@cache
def vllm_speculative_keys(engines_md: Path) -> frozenset[str]:
    """Keys of the speculative-config JSON examples engines.md §1.5 records."""
    block = section(engines_md.read_text(), "### 1.5", "### 1.6")
    keys: set[str] = set()
    for snippet in re.findall(r"'(\{.*?\})'", block):
        keys |= set(json.loads(snippet))
    return frozenset(keys)


@cache
def sidecar_flags(llm_d_md: Path) -> tuple[frozenset[str], frozenset[str]]:
    """(flags, --kv-connector values) of the routing sidecar (llm-d.md §3.2 "Routing sidecar flags")."""
    block = section(llm_d_md.read_text(), "Routing sidecar flags", "GKE overlay")
    flags = frozenset(re.findall(r"`(--[a-z-]+)`", block))
    connectors_line = next(line for line in block.splitlines() if "`--kv-connector` ∈" in line)
    return flags, frozenset(re.findall(r"`([a-z-]+\d*)`", connectors_line.split("∈", 1)[1]))


def containers(manifest: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(path, container) for every container and init container anywhere in a manifest (a CRD's schema names
    `containers` too, as properties: it has none)."""
    found = []
    if manifest.get("kind") == "CustomResourceDefinition":
        return found

    def walk(node: Any, path: str) -> None:
        if isinstance(node, dict):
            for key in ("containers", "initContainers"):
                for container in node.get(key) or []:
                    found.append((f"{path}.{key}[{container['name']}]", container))
            for key, value in node.items():
                walk(value, f"{path}.{key}")
        elif isinstance(node, list):
            for i, value in enumerate(node):
                walk(value, f"{path}[{i}]")

    walk(manifest, manifest["metadata"]["name"])
    return found


MTP_READINGS: tuple[tuple[dict[str, Any], int], ...] = (
    ({}, 0), ({"num_nextn_predict_layers": 0}, 0), ({"num_nextn_predict_layers": 2}, 2))
"""A Kimi K3 config.json's text_config -> its MTP layer count. tests/engine/test_vllm_mtp.py holds vLLM's own
reading to it (SpeculativeConfig.hf_config_override); tests/checks/test_preflight.py holds
components/weights/geometry.py's."""
