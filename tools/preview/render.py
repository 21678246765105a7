"""Render one stack under Pulumi's mock engine; the child process behind `tools.preview.plan`.

Runs `__main__.py` (the same code path as `pulumi up`) with a stack file's config and prints one
JSON document on stdout: {"resources": [...], "manifests": [...], "outputs": {...}, "summary": [...]}.
A user error in config prints one `error:` line on stderr and exits 2.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import marshal
import os
import runpy
import sys
from pathlib import Path
from typing import Any

from tools.preview import helm_render, lazy_packages, scheduling
from tools.preview.stack_file import StackFileError, load_stack, load_yaml

ROOT = Path(__file__).resolve().parents[2]
SECRET = "[secret]"
SECRET_SENTINEL = "plan-only-secret-value"
"""What the program receives for a secret key during the plan: never the real value (a `secure:` value is
not decrypted, a plaintext one is replaced), and a string that must not appear in any output, since
every use of it has to be a secret Output that the plan masks (`check_no_secret_leak`)."""
SECRET_SIG = "1b47061264138c4ac30d75fd1eb44270"
RESOURCE_SIG = "5cf8f73096256a8f31e491e813e4eb8e"
UNKNOWN = "04da6b54-80e4-46f7-96ec-b56ff0331ba9"
SIG_KEY = "4dabf18193072939515e22adb298388d"
COMPONENT_KUBERNETES_TYPES = ("kubernetes:helm.sh/", "kubernetes:yaml/", "kubernetes:kustomize/")


class PlanError(Exception):
    """The program registered something the plan cannot render faithfully."""


_project_read: dict[tuple[int, int, int], bytes] = {}
"""Pulumi.yaml as read once per process (marshal bytes, keyed by the file's inode, size and modification time): a
command reads it once, but the tests' and a long-lived process's many plans and checks each read it again."""


def project_file() -> dict[str, Any]:
    """Pulumi.yaml, read with the CLI's YAML semantics (tools/preview/stack_file.py); every call a fresh copy."""
    path = ROOT / "Pulumi.yaml"
    try:
        stat = path.stat()
        key = (stat.st_ino, stat.st_size, stat.st_mtime_ns)
        if key in _project_read:
            return marshal.loads(_project_read[key])
        project = load_yaml(path)
    except StackFileError as err:
        raise SystemExit(f"error: {err}") from None
    try:
        _project_read[key] = marshal.dumps(project)
    except ValueError:  # a value marshal cannot hold: read the file every time
        pass
    return project


def _schema(project: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in (project.get("config") or {}).items() if isinstance(v, dict)}


def stack_config(path: Path, project: dict[str, Any]) -> tuple[dict[str, str], list[str]]:
    """Config as `pulumi preview` hands it to a program (tools/preview/stack_file.py: the CLI's YAML semantics, value
    texts, Pulumi.yaml defaults and type checks); a file the CLI would refuse stops here with its one line.

    `secure:` values are never decrypted; they, and every key the project declares `secret: true`, become
    SECRET_SENTINEL and are marked secret.
    """
    name = project["name"]
    try:
        loaded = load_stack(path, name, _schema(project))
    except StackFileError as err:
        raise SystemExit(f"error: {err}") from None
    declared_secret = {f"{name}:{k}" for k, v in _schema(project).items() if v.get("secret")}
    for key in loaded.secure:
        if key not in declared_secret:
            short = key.removeprefix(f"{name}:")
            raise SystemExit(f"error: {path.name}: {key} is encrypted (`secure:`), and only "
                             f"{', '.join(sorted(declared_secret)) or 'credentials'} may be: the offline plan and "
                             "preflight never decrypt a value, so they cannot check this setting; it is not a "
                             f"credential: store it in plain text with `pulumi config set {short} <value>`")
    config = dict(loaded.values)
    secret_keys = set(loaded.secure)
    for key in secret_keys:
        config[key] = SECRET_SENTINEL
    # A required secret the stack has not set yet (committed stack files carry none): `pulumi up` stops with
    # the CLI's own "missing configuration value" message; the plan goes on with the sentinel, so it still
    # shows where the secret is used and that it stays masked.
    for key in sorted(f"{name}:{k}" for k, v in _schema(project).items() if v.get("secret")):
        if key not in config:
            config[key] = SECRET_SENTINEL
            secret_keys.add(key)
    return config, sorted(secret_keys)


def unset_secrets(path: Path, project: dict[str, Any]) -> list[str]:
    """Secret keys the project requires that the stack file does not set (the plan fed them the sentinel)."""
    raw = (load_yaml(path) or {}).get("config") or {}
    name = project["name"]
    present = {key if ":" in key else f"{name}:{key}" for key in raw}
    return sorted(f"{name}:{k}" for k, v in _schema(project).items()
                  if v.get("secret") and f"{name}:{k}" not in present)


def stack_file_warnings(path: Path, project: dict[str, Any]) -> list[str]:
    """The CLI's own warnings about the file (a key with no value), for the plan summary."""
    return [f"warning: {w}" for w in load_stack(path, project["name"], _schema(project)).warnings]


def _mask(value: Any) -> Any:
    """Hide every value of a secret but keep its shape (a Secret's stringData stays a map of keys)."""
    if isinstance(value, dict) and value.get(SIG_KEY) is None:
        return {k: _mask(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_mask(v) for v in value]
    return SECRET


def _clean(value: Any, path: str) -> Any:
    """Engine wire format -> plain JSON: secrets masked, resource refs by URN, integral floats as ints."""
    if isinstance(value, dict):
        sig = value.get(SIG_KEY)
        if sig == SECRET_SIG:
            return _mask(value.get("value"))
        if sig == RESOURCE_SIG:
            return value.get("id") or value.get("urn")
        return {k: _clean(v, f"{path}.{k}") for k, v in value.items()}
    if isinstance(value, list):
        return [_clean(v, f"{path}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if value == UNKNOWN:
        raise PlanError(f"input {path} is unknown under the mocks; return it from tools/preview/mocks.py")
    return value


def _manifest(resource: dict[str, Any]) -> dict[str, Any] | None:
    """A Kubernetes object the program or one of its charts creates, as `kubectl apply` would take it."""
    kind_type = resource["type"]
    if not kind_type.startswith("kubernetes:") or kind_type.startswith(COMPONENT_KUBERNETES_TYPES):
        return None
    inputs = resource["inputs"]
    manifest = {k: inputs[k] for k in ("apiVersion", "kind", "metadata") if k in inputs}
    manifest.update({k: v for k, v in inputs.items() if k not in manifest})
    return manifest


def stack_name(path: Path) -> str:
    return path.name[len("Pulumi."):-len(".yaml")]


def check_no_secret_leak(document: dict[str, Any], text: str | None = None) -> None:
    """A secret the program used without keeping it secret would show up as the sentinel (`text`: the document's JSON
    already encoded, with any key order)."""
    if SECRET_SENTINEL in (json.dumps(document) if text is None else text):
        raise PlanError("a secret config value reached the plan unmasked: read it with Config.require_secret and "
                        "keep it in secret Outputs")


def stand_in_digest(reference: str) -> str:
    """The offline plan's digest of a pinned image tag: derived from the reference, marked a stand-in."""
    from tools.preview.mocks import _digest, stand_in

    return stand_in(f"sha256:{_digest('image digest', reference)}",
                    f"the digest the registry names for {reference} at `pulumi preview` and `pulumi up`")


def render(stack_file: Path, as_up: bool = False) -> dict[str, Any]:
    """The plan document. `as_up`: run the program as `pulumi up` would, its preflight gate included (against
    whatever Google endpoint KIMI_GOOGLE_API_ROOT names: the gate's tests)."""
    document = _unchecked_render(stack_file, as_up)
    check_no_secret_leak(document)
    return document


def _unchecked_render(stack_file: Path, as_up: bool = False) -> dict[str, Any]:
    """The plan document before `check_no_secret_leak` (which `render` and `run` apply)."""
    stack = stack_name(stack_file)
    os.chdir(ROOT)
    sys.path.insert(0, str(ROOT))
    lazy_packages.install()
    import pulumi
    import pulumi.resource as pulumi_resource
    from google.protobuf import json_format
    from pulumi.runtime import config as runtime_config
    from pulumi.runtime import mocks, rpc
    from pulumi.runtime import settings as runtime_settings
    from pulumi.runtime import stack as runtime_stack

    from tools.preview.mocks import PlanMocks, Recording, RecordingMonitor

    # Registration order is the order the program constructs resources in; the RPCs themselves run
    # on worker threads and reach the monitor in varying order.
    construction_order: dict[tuple[str, str], int] = {}
    register = pulumi_resource.register_resource

    read = pulumi_resource.read_resource

    def register_in_order(res, ty, name, *args, **kwargs):
        construction_order.setdefault((ty, name), len(construction_order))
        return register(res, ty, name, *args, **kwargs)

    def read_in_order(res, ty, name, *args, **kwargs):
        construction_order.setdefault((ty, name), len(construction_order))
        return read(res, ty, name, *args, **kwargs)

    pulumi_resource.register_resource = register_in_order
    pulumi_resource.read_resource = read_in_order
    # The plan records no source positions, so pulumi's stack trace of each registration (traceback.extract_stack,
    # reading every frame's source file through linecache: 25 ms of a plan) is the empty one it sends when it finds
    # no user frame.
    from pulumi.runtime import resource as runtime_resource
    from pulumi.runtime.proto import source_pb2

    runtime_resource._get_stack_trace = source_pb2.StackTrace

    project = project_file()
    config, secret_keys = stack_config(stack_file, project)
    runtime_config.set_all_config(config, secret_keys)
    from components.checks import preflight

    preflight.OFFLINE_PLAN = not as_up  # the plan asks no cloud; its mock engine runs with preview=False
    from components.checks import registry

    # Nor any registry, unless a test's fake stands in for them (components/checks/registry.py ROOT_ENV).
    registry.LOOKUP = registry.registry_digest if os.environ.get(registry.ROOT_ENV) else stand_in_digest
    os.environ.pop("PULUMI_CONFIG", None)
    gcp_project = config.get(f"{project['name']}:gcp.project", "project")
    recording = Recording()
    monitor = RecordingMonitor(PlanMocks(gcp_project), recording)
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    mocks.set_mocks(PlanMocks(gcp_project), project=project["name"], stack=stack, preview=False, monitor=monitor)
    try:
        runpy.run_path(str(ROOT / "__main__.py"), run_name="__main__")
        loop.run_until_complete(runtime_stack.wait_for_rpcs())
        outputs = loop.run_until_complete(
            rpc.serialize_properties(runtime_settings.get_root_resource().outputs, {}))
    except pulumi.RunError as err:
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(2) from None

    names = {r.urn: r.name for r in recording.registrations}
    by_type_name: set[tuple[str, str]] = set()
    resources = []
    registrations = sorted(recording.registrations, key=lambda r: construction_order[(r.type, r.name)])
    for reg in registrations:
        if (reg.type, reg.name) in by_type_name:
            raise PlanError(f"{reg.type} {reg.name} registered twice")
        by_type_name.add((reg.type, reg.name))
        entry: dict[str, Any] = {
            "type": reg.type,
            "name": reg.name,
            "parent": names.get(reg.parent_urn),
            "dependsOn": sorted({names[u] for u in reg.dependencies if u in names}),
            "inputs": _clean(reg.inputs, reg.name),
        }
        options = dict(reg.options)
        if reg.provider_ref:
            # A provider reference is "<provider urn>::<provider id>".
            options["provider"] = names.get(reg.provider_ref.rsplit("::", 1)[0], reg.provider_ref)
        if options:
            entry["options"] = options
        resources.append(entry)

    sys.path.insert(0, str(ROOT))
    from components.config import load_config
    from components.plan import cost, timeline
    from stacks import summary_lines

    resources, charts = with_chart_objects(resources)
    manifests = [(r.get("parent") if r["parent"] in charts else None, m)
                 for r, m in ((r, _manifest(r)) for r in resources) if m is not None]
    report = scheduling.check(resources, [m for _, m in manifests],
                              unrendered=tuple(name for name, c in charts.items() if c.skipped))
    if report.failures:
        raise PlanError("scheduling: " + " | ".join(report.failures))
    from components.config import ConfigError
    from components.plan import limits

    try:  # the counts only the rendered plan knows (the charts' Services), as __main__.py checks the others
        service_range = limits.check(load_config(), [m for _, m in manifests])[-1]
    except ConfigError as err:
        raise PlanError(str(err)) from None
    summary = summary_lines(load_config())
    at = summary.index(limits.SUMMARY_HEADING) + len(limits.limits(load_config())) + 1
    summary[at:at] = [f"  {service_range.line()}"]
    secrets = [f"{key} is not set: pulumi up stops until you run "
               f"`pulumi config set --secret {key.split(':', 1)[1]} <value>`"
               for key in unset_secrets(stack_file, project)]
    overview = plan_overview(load_config(), resources, [m for _, m in manifests], charts,
                             stack_file_warnings(stack_file, project) + secrets, service_range)
    document = {
        "resources": resources,
        "manifests": [m for _, m in manifests],
        "manifestCharts": [chart for chart, _ in manifests],
        "charts": [c.index() for c in charts.values()],
        "crds": [[c.resource, file, text] for c in charts.values() for _, file, text in c.crds],
        "outputs": mark_mocked(_clean(json_format.MessageToDict(outputs), "outputs")),
        "summary": stack_file_warnings(stack_file, project) + summary
        + timeline.summary_lines(load_config(), resources) + cost.first_answer_lines(load_config(), resources)
        + secrets + chart_lines(charts) + report.lines(),
        "overview": overview.to_json(),
    }
    return document


def plan_overview(cfg: Any, resources: list[dict[str, Any]], manifests: list[dict[str, Any]],
                  charts: dict[str, Any], warnings: list[str], service_range: Any) -> Any:
    """The reader's summary (components/plan/overview.py) with what only the rendered plan knows: the counts of what
    gets created, the time to serving and the first up's cost from the dependency graph, the Service range."""
    from components.plan import cost, limits, overview, timeline
    from stacks import overview as stack_overview

    found = stack_overview(cfg)
    # One line for every chart this checkout has no copy of; the reason per chart (where the copy was looked for)
    # is in --detail, which names the setting that points at one.
    unrendered = sorted(helm_render.chart_dir_name(c.chart) for c in charts.values() if c.skipped)
    skipped = [f"charts not rendered, so their objects are not in the plan (run `make charts`; --detail says why): "
               f"{', '.join(unrendered)}"] if unrendered else []
    found.add(overview.WARNINGS, *(w.removeprefix("warning: ") for w in warnings), *skipped)
    cloud = sum(1 for r in resources if r["type"].startswith("gcp:") and not r["type"].startswith("pulumi:"))
    found.add(overview.CREATED, f"in all: {cloud} Google Cloud resources, {len(manifests)} Kubernetes objects, "
              f"{len(charts)} Helm charts ({', '.join(helm_render.chart_dir_name(c.chart) for c in charts.values())})",
              at=0)
    path = timeline.critical_path(cfg, resources)
    found.add(overview.TIME, f"first up to serving: {overview.minutes(path.serving_s)} (bound "
              f"{overview.minutes(path.bound_s)}: cluster, then the slower of nodes and weights, then engine start)",
              at=0)
    finish, _ = timeline.finish_times(resources, lambda r, start, done: timeline.step(cfg, r).seconds)
    spent, _, unpriced = cost.spend_until(cfg, resources, path.serving_s, finish)
    by_name = {r["name"]: r for r in resources}
    hours: dict[str, float] = {}
    for name in unpriced:
        nodes, machine = cost.pool_nodes(by_name[name])
        hours[machine] = hours.get(machine, 0.0) + nodes * (path.serving_s - finish[name]) / 3600
    found.add(overview.COST, f"first up until the first answer: {overview.usd(spent)}"
              + "".join(f" + {h:.1f} {m} node-hours unpriced" for m, h in hours.items()), at=1)
    found.add(overview.LIMITS, *overview.limit_lines([*limits.limits(cfg), service_range],
                                                     verdict="every pod fits its node pool"))
    return found


MOCKED_KEY = "$mocked"


def mark_mocked(outputs: dict[str, Any]) -> dict[str, Any]:
    """Stack outputs plus `$mocked`: each output whose value holds a mock stand-in (tools/preview/mocks.py STAND_INS) ->
    what the stand-in replaces; `pulumi up` reports the real value there."""
    from tools.preview.mocks import STAND_INS

    mocked = {}
    for name, value in outputs.items():
        text = json.dumps(value)
        found = sorted({what for stand_in, what in STAND_INS.items() if stand_in in text})
        if found:
            mocked[name] = "; ".join(found)
    return {**outputs, MOCKED_KEY: mocked}


def with_chart_objects(resources: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Each Helm chart followed by the objects it renders to (tools/preview/helm_render.py), as Chart v4 registers them;
    a Secret's data is masked as Pulumi marks it secret."""
    expanded, charts = [], {}
    for entry in resources:
        expanded.append(entry)
        if entry["type"] != helm_render.CHART_TYPE:
            continue
        try:
            rendered = charts[entry["name"]] = helm_render.render_chart(entry)
        except helm_render.ChartError as err:
            raise PlanError(str(err)) from None
        for child in helm_render.child_entries(entry, rendered):
            inputs = child["inputs"]
            if child["type"] == "kubernetes:core/v1:Secret":
                inputs.update({k: _mask(inputs[k]) for k in ("data", "stringData") if k in inputs})
            expanded.append(child)
    return expanded, charts


def chart_lines(charts: dict[str, Any]) -> list[str]:
    lines = []
    for c in charts.values():
        what = (f"not rendered: {c.skipped}" if c.skipped else
                f"{len(c.objects)} objects + {len(c.crds)} CRDs (release {c.release} in {c.namespace})")
        lines.append(f"chart {c.resource}: {helm_render.chart_dir_name(c.chart)} {c.version}: {what}")
    return lines


PRELOAD = (
    # Provider modules the program touches; importing them is most of a render's time, so a parent that
    # renders several stacks imports them once and forks a child per stack (tools.preview.plan).
    ("pulumi_gcp", ("compute", "container", "storage", "projects", "serviceaccount", "organizations", "monitoring",
                    "artifactregistry")),
    ("pulumi_command", ("local",)),
    ("pulumi_kubernetes", ("core.v1", "apps.v1", "batch.v1", "storage.v1", "resource.v1", "meta.v1", "helm.v4",
                           "apiextensions", "networking.v1", "policy.v1", "rbac.v1")),
)


def preload_providers(root: Path = ROOT) -> None:
    """Load every provider module a render of the checkout at `root` uses, in this process, so forked children
    start with them in memory. A bare import loads neither kind of lazy module: pulumi's submodules run their body
    on first attribute access, and tools.preview.lazy_packages places a name on its first lookup; both are
    touched here."""
    import importlib
    import warnings

    lazy_packages.install()
    with warnings.catch_warnings():
        # pulumi_gcp.monitoring announces a deprecated function it defines, at import, whether or not it is used.
        warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"pulumi_gcp\.")
        for package, modules in PRELOAD:
            for module in modules:
                hasattr(importlib.import_module(f"{package}.{module}"), "__preload__")
    for package, name in lazy_packages.program_names(root):
        warm_type_hints(getattr(importlib.import_module(package), name))


def warm_loaded_resources() -> None:
    """Resolve the hints of every resource class loaded now (the providers' classes the preload placed, their
    `Provider`s, Chart v4 and CustomResource, this program's ComponentResources), of the arguments class each
    resource's constructor serializes (`ClusterArgs`, `PodInitArgs`) and of the result types of the functions
    the program calls (`GetProjectResult`): pulumi resolves those for every resource a render registers, so
    without this every forked renderer resolved the same 59 classes again (0.11 s of a render's CPU)."""
    import importlib

    import pulumi

    classes, pending = [], [pulumi.Resource]
    while pending:
        cls = pending.pop()
        classes.append(cls)
        pending += cls.__subclasses__()
    for cls in classes:
        module = sys.modules.get(cls.__module__)
        if cls.__module__.split(".")[0] == "pulumi":  # the SDK's own bases (their hints name the SDK's internals)
            continue
        warm_type_hints(cls)
        for companion in (f"{cls.__name__}Args", f"{cls.__name__}InitArgs"):
            if isinstance(getattr(module, companion, None), type):
                warm_type_hints(getattr(module, companion))
    for package, name in lazy_packages.program_names(ROOT):
        if name.startswith("get_"):
            result = "".join(part.title() for part in name.removesuffix("_output").split("_")) + "Result"
            module = sys.modules.get(getattr(getattr(importlib.import_module(package), name), "__module__", ""))
            if isinstance(getattr(module, result, None), type):
                warm_type_hints(getattr(module, result))


def warm_type_hints(cls: Any, seen: set[Any] | None = None) -> None:
    """Resolve the type hints pulumi reads when it serializes a resource or one of its input or output types, for
    `cls` and every such type its hints name, so the forked renderers find them in pulumi's own per-class cache
    (`pulumi._types._types_from_py_properties` is a functools.cache): the same calls on the same classes a render
    makes, done once in the parent instead of in every child. Anything else is left alone."""
    import typing

    import pulumi
    import pulumi._types as types

    seen = set() if seen is None else seen
    if cls in seen or not isinstance(cls, type):
        return
    seen.add(cls)
    if types.is_input_type(cls):
        hints = types.input_type_types(cls)
    elif types.is_output_type(cls):
        hints = types.output_type_types(cls)
    elif issubclass(cls, pulumi.Resource):
        hints = types.resource_types(cls)
    else:
        return
    pending = list(hints.values())
    while pending:
        hint = pending.pop()
        if typing.get_origin(hint) is None:
            warm_type_hints(hint, seen)
        else:
            pending += typing.get_args(hint)


def preload() -> None:
    import importlib

    sys.path.insert(0, str(ROOT))
    preload_providers()
    # Not helm_python: its Go runtime does not survive a fork, so each child loads it.
    for module in ("stacks.gpu", "stacks.tpu", "tools.preview.mocks", "tools.preview.helm_render",
                   "tools.preview.scheduling"):
        importlib.import_module(module)
    warm_loaded_resources()



def run(stack_file: Path) -> int:
    """Render one stack to stdout (JSON) or stderr (one error line); the exit code says which."""
    try:
        document = _unchecked_render(stack_file.resolve())
        text = json.dumps(document, sort_keys=True)  # one shot: json.dump would encode in pure Python
        check_no_secret_leak(document, text)  # on the text written: the document is encoded once
    except PlanError as err:
        print(f"error: {err}", file=sys.stderr)
        return 3
    except SystemExit as stop:
        return int(stop.code or 0) if not isinstance(stop.code, str) else (print(stop.code, file=sys.stderr) or 2)
    sys.stdout.write(text)
    return 0


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("stack_file", type=Path, help="a Pulumi.<stack>.yaml file")
    args = parser.parse_args(argv)
    from tools.preview.collector import without_cyclic_gc

    with without_cyclic_gc():
        code = run(args.stack_file)
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown (about a second of joining the SDK's worker threads and freeing the large
    # provider modules): everything this process had to say is written.
    os._exit(code)


if __name__ == "__main__":
    main()
