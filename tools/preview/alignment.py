"""The side-by-side of docs/upstream-alignment.md, made repeatable: every setting of the generated model-server
pods and router configs, flattened to `key -> value`, held against the tables there.

    python -m tools alignment                # after `make plan`: list rows that are missing, stale or unexplained
    python -m tools alignment --write        # rewrite each table's `ours` column from build/plan, keeping
                                             # upstream values and verdicts; new settings get an UNEXPLAINED row
    python -m tools alignment --against 'GPU decode pod' rendered-overlay.yaml Deployment/NAME   # raw diff

A row is `| setting | ours | upstream | verdict |`; the verdict starts with `same`, `adopted`, `differs`,
`ours only` or `upstream only` and then says why and from which upstream file (ids in the doc's source table).
tests/tools/preview/test_upstream_alignment.py fails on any row this prints, so a new unexplained difference, or an
adopted
setting deleted from the generated objects, fails the suite.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tools import prog

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "upstream-alignment.md"
ABSENT = "—"
VERDICTS = ("same", "adopted", "differs", "ours only", "upstream only")
UNEXPLAINED = "UNEXPLAINED"


# --------------------------------------------------------------------------- flattening
def flatten(prefix: str, value: Any, out: dict[str, str]) -> None:
    """Nested maps and lists become dotted keys; scalars become their JSON spelling (strings bare)."""
    if isinstance(value, Mapping):
        for key in sorted(value):
            flatten(f"{prefix}.{key}" if prefix else str(key), value[key], out)
    elif isinstance(value, list) and any(isinstance(v, (Mapping, list)) for v in value):
        for i, item in enumerate(value):
            flatten(f"{prefix}[{i}]", item, out)
    elif isinstance(value, list):
        out[prefix] = ",".join(scalar(v) for v in value)
    else:
        out[prefix] = scalar(value)


def scalar(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def engine_flags(container: Mapping[str, Any]) -> dict[str, str]:
    """`flag.--name` for every option of the engine's command line (our pods run it as the `exec` line of a bash
    script, upstream overlays mostly as command + args); JSON values are flattened one key per row."""
    args = container.get("args", [])
    if args and any(ln.startswith("exec ") for ln in args[0].splitlines()):
        [line] = [ln for ln in args[0].splitlines() if ln.startswith("exec ")]
        tokens = shlex.split(line)[1:]
    else:
        tokens = [*container.get("command", []), *args]
    out: dict[str, str] = {"command": " ".join(t for t in tokens[:3] if not t.startswith("--"))}
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if not token.startswith("--"):
            i += 1
            continue
        name, eq, inline = token.partition("=")
        if eq:
            value, i = inline, i + 1
        elif i + 1 < len(tokens) and not tokens[i + 1].startswith("--"):
            value, i = tokens[i + 1], i + 2
        else:
            value, i = "true", i + 1
        if value.startswith("{"):
            flatten(f"flag.{name}", json.loads(value), out)
        else:
            out[f"flag.{name}"] = value
    return out


def image_setting(reference: str) -> str:
    """An image as the table shows it: the TPU engine the stack builds by its shape (region, project, cluster and
    the build's digest are the stack's own), every other by its tag and a placeholder for the digest its registry
    names at `pulumi preview` and `up` (components/checks/registry.py; the offline plan's is a stand-in)."""
    from components.plan import images

    if images.is_built_tpu_engine(reference):
        return "<region>-docker.pkg.dev/<project>/<cluster>-engine/vllm-torchtpu@sha256:<the build's digest>"
    tag, _, digest = reference.partition("@")
    return f"{tag}@sha256:<its registry's digest>" if digest else reference


def container_settings(prefix: str, container: Mapping[str, Any], out: dict[str, str]) -> None:
    out[f"{prefix}image"] = image_setting(container["image"])
    for env in container.get("env", []):
        source = env.get("valueFrom")
        if source is None:
            out[f"{prefix}env.{env['name']}"] = env.get("value", "")
        elif "fieldRef" in source:
            out[f"{prefix}env.{env['name']}"] = f"fieldRef:{source['fieldRef']['fieldPath']}"
        else:
            ref = source["secretKeyRef"]
            out[f"{prefix}env.{env['name']}"] = f"secret:{ref['name']}/{ref['key']}"
    flatten(f"{prefix}securityContext", container.get("securityContext", {}), out)
    for kind in ("startup", "readiness", "liveness"):
        probe = container.get(f"{kind}Probe")
        if probe:
            flatten(f"{prefix}probe.{kind}", probe, out)
    for key in ("requests", "limits"):
        flatten(f"{prefix}resources.{key}", container.get("resources", {}).get(key, {}), out)
    claims = [c["name"] for c in container.get("resources", {}).get("claims", [])]
    if claims:
        out[f"{prefix}resources.claims"] = ",".join(claims)
    for mount in container.get("volumeMounts", []):
        out[f"{prefix}mount.{mount['mountPath']}"] = mount["name"] + (" (ro)" if mount.get("readOnly") else "")


def pod_settings(template: Mapping[str, Any]) -> dict[str, str]:
    """Everything the side-by-side compares for one pod template: engine flags, env, host namespaces,
    security contexts, probes, volumes, resource claims, init containers and sidecar flags, labels."""
    spec = template["spec"]
    out: dict[str, str] = {}
    for key, value in sorted(template.get("metadata", {}).get("labels", {}).items()):
        out[f"label.{key}"] = value
    for key in ("hostIPC", "hostPID", "hostNetwork"):
        if spec.get(key):
            out[key] = "true"
    flatten("podSecurityContext", spec.get("securityContext", {}), out)
    claims = [f"{c['name']}={c['resourceClaimTemplateName']}" for c in spec.get("resourceClaims", [])]
    if claims:
        out["resourceClaims"] = ",".join(claims)
    for volume in spec.get("volumes", []):
        kind = next(k for k in volume if k != "name")
        detail = volume[kind] or {}
        out[f"volume.{volume['name']}"] = f"{kind} " + ",".join(f"{k}={scalar(v)}" for k, v in sorted(detail.items()))
    main = spec["containers"][0]
    out.update(engine_flags(main))
    container_settings("", main, out)
    for init in spec.get("initContainers", []):
        prefix = f"init.{init['name']}."
        if init.get("restartPolicy") == "Always":
            out[f"{prefix}sidecar"] = "true"
        for arg in init.get("args", []):
            name, _, value = arg.partition("=")
            if name.startswith("--"):
                out[f"{prefix}flag.{name}"] = value or "true"
            else:
                out[f"{prefix}script"] = "; ".join(line for line in arg.splitlines() if line.strip())
        if init.get("command"):
            out[f"{prefix}command"] = " ".join(init["command"])
        container_settings(prefix, {k: v for k, v in init.items() if k != "args"}, out)
    return out


def router_settings(values: Mapping[str, Any]) -> dict[str, str]:
    """The EPP's flags, model-server selection and every plugin and profile of its EndpointPickerConfig."""
    router = values["router"]
    epp = router["epp"]
    out: dict[str, str] = {}
    flatten("epp.flags", epp.get("flags", {}), out)
    flatten("modelServers", router["modelServers"], out)
    config = yaml.safe_load(epp["pluginsCustomConfig"][epp["pluginsConfigFile"]])
    out["apiVersion"] = config["apiVersion"]
    for plugin in config["plugins"]:
        name = plugin.get("name", plugin["type"])
        out[f"plugin.{name}"] = plugin["type"]
        flatten(f"plugin.{name}", plugin.get("parameters", {}), out)
    for profile in config["schedulingProfiles"]:
        out[f"profile.{profile['name']}"] = ",".join(
            ref["pluginRef"] + (f"*{ref['weight']}" if "weight" in ref else "") for ref in profile["plugins"])
    return out


# --------------------------------------------------------------------------- the generated objects
@dataclass(frozen=True)
class Subject:
    heading: str
    stack: str
    extract: Callable[[list[dict[str, Any]], list[dict[str, Any]]], dict[str, str]]


def _ds_role(role: str) -> Callable[[list[dict[str, Any]], list[dict[str, Any]]], dict[str, str]]:
    def extract(manifests: list[dict[str, Any]], _: list[dict[str, Any]]) -> dict[str, str]:
        [ds] = [m for m in manifests if m["kind"] == "DisaggregatedSet"]
        [spec] = [r["spec"] for r in ds["spec"]["roles"] if r["name"] == role]
        return pod_settings(spec["leaderWorkerTemplate"]["workerTemplate"])
    return extract


def _lws(template: str) -> Callable[[list[dict[str, Any]], list[dict[str, Any]]], dict[str, str]]:
    def extract(manifests: list[dict[str, Any]], _: list[dict[str, Any]]) -> dict[str, str]:
        [lws] = [m for m in manifests if m["kind"] == "LeaderWorkerSet"]
        return pod_settings(lws["spec"]["leaderWorkerTemplate"][template])
    return extract


def _router(_: list[dict[str, Any]], resources: list[dict[str, Any]]) -> dict[str, str]:
    [chart] = [r for r in resources if r["type"] == "kubernetes:helm.sh/v4:Chart" and r["name"] == "router-chart"]
    return router_settings(chart["inputs"]["values"])


SUBJECTS = (
    Subject("GPU prefill pod", "gpu", _ds_role("prefill")),
    Subject("GPU decode pod", "gpu", _ds_role("decode")),
    Subject("TPU leader pod", "tpu", _lws("leaderTemplate")),
    Subject("TPU worker pod", "tpu", _lws("workerTemplate")),
    Subject("Router, GPU (P/D DisaggregatedSet)", "gpu", _router),
    Subject("Router, TPU (single profile)", "tpu", _router),
)


_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def generated(plan_root: Path) -> dict[str, dict[str, str]]:
    """Each subject's settings; a stack's plan files are read once for all its subjects (the extractors only
    read them), with libyaml where PyYAML has it."""
    out = {}
    read: dict[str, tuple[list[Any], Any]] = {}
    for subject in SUBJECTS:
        if subject.stack not in read:
            folder = plan_root / subject.stack
            read[subject.stack] = ([m for m in yaml.load_all((folder / "manifests.yaml").read_text(), Loader=_LOADER)
                                    if m], json.loads((folder / "resources.json").read_text()))
        out[subject.heading] = subject.extract(*read[subject.stack])
    return out


# --------------------------------------------------------------------------- the doc's tables
@dataclass
class Row:
    setting: str
    ours: str
    upstream: str
    verdict: str


def _cell(text: str) -> str:
    text = text.strip()
    if text.startswith("`") and text.endswith("`") and len(text) >= 2:
        text = text[1:-1]
    return text.replace("\\|", "|")


def _code(value: str) -> str:
    return ABSENT if value == ABSENT else "`" + value.replace("|", "\\|") + "`"


_SPLIT = re.compile(r"(?<!\\)\|")


def read_tables(text: str) -> dict[str, list[Row]]:
    """The table under each `### <subject heading>` of the doc."""
    tables: dict[str, list[Row]] = {}
    current = None
    for line in text.splitlines():
        if line.startswith("### "):
            current = line[4:].strip() if line[4:].strip() in {s.heading for s in SUBJECTS} else None
            if current:
                tables[current] = []
        elif current and line.startswith("| ") and not line.startswith("| setting") and not line.startswith("| ---"):
            cells = [c for c in _SPLIT.split(line.strip())[1:-1]]
            if len(cells) != 4:
                raise ValueError(f"{DOC.name}: a row of '{current}' needs 4 cells: {line}")
            tables[current].append(Row(*(_cell(c) for c in cells)))
    return tables


def problems(tables: Mapping[str, list[Row]], ours: Mapping[str, Mapping[str, str]]) -> list[str]:
    found = []
    for subject in SUBJECTS:
        rows = tables.get(subject.heading)
        if rows is None:
            found.append(f"{subject.heading}: no table under '### {subject.heading}'")
            continue
        settings = dict(ours[subject.heading])
        seen = set()
        for row in rows:
            where = f"{subject.heading}: `{row.setting}`"
            if row.setting in seen:
                found.append(f"{where}: listed twice")
            seen.add(row.setting)
            actual = settings.get(row.setting, ABSENT)
            if actual == row.upstream == ABSENT:
                found.append(f"{where}: neither the generated object nor upstream has it: remove the row")
                continue
            if actual != row.ours:
                found.append(f"{where}: the table says ours is {row.ours!r}, the generated object has {actual!r}")
            verdict = next((v for v in VERDICTS if row.verdict.startswith(v)
                            and not row.verdict[len(v):len(v) + 1].isalnum()), "")
            if not verdict:
                found.append(f"{where}: verdict must start with one of {', '.join(VERDICTS)} ({row.verdict!r})")
            elif verdict in ("same", "adopted") and row.ours != row.upstream:
                found.append(f"{where}: '{verdict}' but ours {row.ours!r} != upstream {row.upstream!r}")
            elif verdict in ("differs", "ours only", "upstream only") and len(row.verdict) < len(verdict) + 10:
                found.append(f"{where}: '{verdict}' needs the reason and its source")
            elif verdict == "upstream only" and row.ours != ABSENT:
                found.append(f"{where}: 'upstream only' but ours is {row.ours!r}")
            elif verdict == "ours only" and row.upstream != ABSENT:
                found.append(f"{where}: 'ours only' but upstream has {row.upstream!r}")
        for key in sorted(set(settings) - seen):
            found.append(f"{subject.heading}: `{key}` = {settings[key]!r} is generated but not in the table "
                         f"({UNEXPLAINED})")
    return found


def rewrite(text: str, ours: Mapping[str, Mapping[str, str]]) -> str:
    """Refresh each table's `ours` column, append UNEXPLAINED rows for new settings (verdicts kept) and drop the
    rows of settings neither side has any more."""
    tables = read_tables(text)
    lines = text.splitlines()
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        out.append(line)
        heading = line[4:].strip() if line.startswith("### ") else None
        if heading in ours and heading in tables:
            while i + 1 < len(lines) and not lines[i + 1].startswith("| setting"):
                i += 1
                out.append(lines[i])
            while i + 1 < len(lines) and lines[i + 1].startswith("|"):
                i += 1
            settings = ours[heading]
            rows = tables[heading]
            known = {r.setting for r in rows}
            rows += [Row(k, settings[k], ABSENT, f"{UNEXPLAINED}: explain or adopt") for k in sorted(settings)
                     if k not in known]
            out += ["| setting | ours | upstream | verdict |", "| --- | --- | --- | --- |"]
            out += [f"| `{r.setting}` | {_code(settings.get(r.setting, ABSENT))} | {_code(r.upstream)} | {r.verdict} |"
                    for r in rows if settings.get(r.setting, ABSENT) != ABSENT or r.upstream != ABSENT]
        i += 1
    return "\n".join(out) + "\n"


def pod_templates(manifests: Iterable[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    """Every pod template of rendered upstream manifests, by `<kind>/<name>[/<role or template>]`."""
    out: dict[str, Mapping[str, Any]] = {}
    for m in manifests:
        name = f"{m['kind']}/{m['metadata']['name']}"
        spec = m.get("spec", {})
        if "template" in spec:
            out[name] = spec["template"]
        for key in ("leaderTemplate", "workerTemplate"):
            if key in spec.get("leaderWorkerTemplate", {}):
                out[f"{name}/{key}"] = spec["leaderWorkerTemplate"][key]
        for role in spec.get("roles", []):
            out[f"{name}/{role['name']}"] = role["spec"]["leaderWorkerTemplate"]["workerTemplate"]
    return out


def compare(ours: Mapping[str, str], upstream: Mapping[str, str]) -> list[str]:
    """A plain side-by-side of two flattened pods: every key whose value differs."""
    return [f"{key}: ours {ours.get(key, ABSENT)!r} | upstream {upstream.get(key, ABSENT)!r}"
            for key in sorted(set(ours) | set(upstream)) if ours.get(key, ABSENT) != upstream.get(key, ABSENT)]


def main(argv: Iterable[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=prog("alignment"), description=__doc__.splitlines()[0])
    parser.add_argument("--plan", type=Path, default=ROOT / "build" / "plan", help="rendered plan (make plan)")
    parser.add_argument("--write", action="store_true", help="refresh the ours column and add new settings")
    parser.add_argument("--against", nargs=3, metavar=("SUBJECT", "UPSTREAM_YAML", "TEMPLATE"),
                        help="print a raw side-by-side of one pod subject (e.g. 'GPU decode pod') against a pod "
                             "template of rendered upstream YAML (kind/name[/role]), e.g. a `kubectl kustomize` "
                             "of an llm-d guide overlay")
    args = parser.parse_args(list(argv) if argv is not None else None)
    absent = sorted({s.stack for s in SUBJECTS if not (args.plan / s.stack / "manifests.yaml").is_file()})
    if absent:
        parser.error(f"no plan of {', '.join(absent)} in {args.plan}: run `{prog('plan')}` first")
    ours = generated(args.plan)
    if args.against:
        subject, path, template = args.against
        upstream = pod_templates(m for m in yaml.safe_load_all(Path(path).read_text()) if m)
        if template not in upstream:
            parser.error(f"{template}: not in {path}; templates: {', '.join(sorted(upstream))}")
        for line in compare(ours[subject], pod_settings(upstream[template])):
            print(line)
        return 0
    text = DOC.read_text()
    if args.write:
        text = rewrite(text, ours)
        DOC.write_text(text)
    found = problems(read_tables(text), ours)
    for line in found:
        print(line)
    print(f"{len(found)} problem(s) in {DOC.relative_to(ROOT)}" if found else "upstream alignment: every row holds")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
