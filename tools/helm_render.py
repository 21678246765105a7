"""Render the program's Helm charts offline with the real Helm engine, the way Pulumi's Chart v4 does.

Pulumi's `kubernetes:helm.sh/v4:Chart` runs `helm template` inside the provider: release name = the
`name` input or else the resource's name, namespace = the `namespace` input, hooks dropped, `crds/`
included unless `skipCrds`, and each object registered as a child resource named
`<resource name>:<namespace>/<object name>` (pulumi-kubernetes `provider/pkg/provider/helm/v4/chart.go`
and `provider/pkg/provider/yaml/v2/yaml.go`, https://github.com/pulumi/pulumi-kubernetes at
94977969d64112b04e19945818a7d5d5f38f631d). This module does the same with `helm-python-sdk` (Helm's Go
SDK through ctypes), so the plan holds every object the charts will create.

Charts come from a folder of charts laid out as released (`<folder>/<chart name>/Chart.yaml`); the first of
these that holds the pinned chart is used:
  1. `$KIMI_CHARTS_DIR`;
  2. `build/charts/` (filled by `python -m tools.helm_render --fetch` from the registries);
  3. `charts/` in the shared facts folder beside the checkout (`$KIMI_SHARED_DIR`), as the tests use.
Whatever the source, its files must hash to the digest recorded in components/versions.py
(`ChartRef.content_sha256`), so the plan renders exactly the chart that was reviewed. Without a source the
chart is reported as not rendered, with the reason, in the plan summary and `charts.json`.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import re
import sys
import tarfile
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
CHART_TYPE = "kubernetes:helm.sh/v4:Chart"
HOOK_ANNOTATION = "helm.sh/hook"
FETCH_DIR = ROOT / "build" / "charts"
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

CLUSTER_SCOPED = frozenset({
    # Core kinds without a namespace (Kubernetes API reference); anything else namespaced gets the release's
    # namespace when the chart leaves it out, as Pulumi's Normalize does.
    "Namespace", "Node", "PersistentVolume", "StorageClass", "ClusterRole", "ClusterRoleBinding",
    "CustomResourceDefinition", "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration",
    "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "MutatingAdmissionPolicy",
    "MutatingAdmissionPolicyBinding", "PriorityClass", "RuntimeClass", "DeviceClass", "CSIDriver", "CSINode",
    "VolumeAttachment", "APIService", "IngressClass", "GatewayClass",
})


class ChartError(Exception):
    """A chart that is present but wrong (digest, version) or fails to render: the plan stops."""


def search_roots() -> list[Path]:
    roots = [Path(p) for p in [os.environ.get("KIMI_CHARTS_DIR")] if p]
    shared = Path(os.environ.get("KIMI_SHARED_DIR", ROOT.parent / "shared"))
    return [*roots, FETCH_DIR, shared / "charts"]


def chart_dir_name(chart: str) -> str:
    """`oci://ghcr.io/llm-d/charts/llm-d-router-standalone` -> `llm-d-router-standalone`."""
    return chart.rstrip("/").rsplit("/", 1)[-1]


def content_digest(files: dict[str, bytes]) -> str:
    """sha256 over the chart's files (path inside the chart and content), independent of archive metadata.
    `helm package` rewrites every Chart.yaml from its parsed form, so those count by their parsed content."""
    outer = hashlib.sha256()
    for path in sorted(files):
        content = files[path]
        if path == "Chart.yaml" or path.endswith("/Chart.yaml"):
            content = json.dumps(yaml.load(content, Loader=_LOADER), sort_keys=True).encode()
        outer.update(path.encode() + b"\0" + hashlib.sha256(content).hexdigest().encode() + b"\n")
    return outer.hexdigest()


def directory_files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def archive_files(data: bytes) -> dict[str, bytes]:
    """Files of a packaged chart (`<chart>/...` inside the .tgz), by their path inside the chart."""
    files = {}
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as archive:
        for member in archive.getmembers():
            if member.isfile():
                inner = member.name.split("/", 1)[1] if "/" in member.name else member.name
                files[inner] = archive.extractfile(member).read()
    return files


def pinned_charts() -> dict[str, Any]:
    """Chart name -> ChartRef, for every chart components/versions.py pins."""
    from components import versions

    refs = [v for v in vars(versions).values() if isinstance(v, versions.ChartRef)]
    return {chart_dir_name(r.chart): r for r in refs}


@dataclass
class Source:
    folder: Path | None
    digest: str | None
    reason: str = ""
    crds: tuple[tuple[str, str], ...] = ()
    """(path inside the chart, text) of every `crds/` file of the chart and its subcharts, as Helm loads them."""


@cache
def find_source(chart: str, version: str) -> Source:
    """The verified local copy of a pinned chart, or why there is none."""
    name = chart_dir_name(chart)
    ref = pinned_charts().get(name)
    if ref is None or ref.version != version:
        raise ChartError(f"chart {chart} {version} is not pinned in components/versions.py")
    looked = []
    for root in search_roots():
        folder = root / name
        if not (folder / "Chart.yaml").is_file():
            looked.append(str(root))
            continue
        meta = yaml.load((folder / "Chart.yaml").read_text(), Loader=_LOADER)
        if str(meta.get("version")).removeprefix("v") != version.removeprefix("v"):  # Helm matches semver
            raise ChartError(f"{folder} holds {name} {meta.get('version')}, the program pins {version}")
        files = directory_files(folder)
        digest = content_digest(files)
        if digest != ref.content_sha256:
            raise ChartError(f"{folder}: content digest {digest} differs from the one recorded for {name} {version} "
                             f"in components/versions.py ({ref.content_sha256})")
        crds = tuple((path, files[path].decode()) for path in sorted(files) if CRD_FILE.search(path))
        return Source(folder, digest, crds=crds)
    return Source(None, None, f"no copy of {name} {version} found (set KIMI_CHARTS_DIR, or run "
                              f"`python -m tools.helm_render --fetch`)")


@cache
def _load(folder: Path) -> Any:
    import helm_python

    return helm_python.Chart.load(folder)


@cache
def _render_cached(folder: Path, values_json: str, release: str, namespace: str) -> tuple[tuple[str, str], ...]:
    """Rendered template files, memoized for the plan run (both router modes, re-renders in tests)."""
    rendered = _load(folder).render(json.loads(values_json), name=release, namespace=namespace, is_install=True)
    return tuple(sorted(rendered.items()))


def render_templates(folder: Path, values: dict[str, Any], release: str, namespace: str) -> list[dict[str, Any]]:
    """Objects of the chart's templates in template order, hooks dropped (Helm's DisableHooks), namespaced
    objects without a namespace given the release's."""
    objects = []
    for path, text in _render_cached(folder, json.dumps(values, sort_keys=True), release, namespace):
        if path.endswith("NOTES.txt") or Path(path).name.startswith("_"):
            continue
        for obj in yaml.load_all(text, Loader=_LOADER):
            if not obj:
                continue
            if HOOK_ANNOTATION in ((obj.get("metadata") or {}).get("annotations") or {}):
                continue
            if obj["kind"] not in CLUSTER_SCOPED and not obj["metadata"].get("namespace"):
                obj["metadata"]["namespace"] = namespace
            objects.append(obj)
    return objects


CRD_NAME = re.compile(r"^  name: (\S+)$", re.MULTILINE)
CRD_FILE = re.compile(r"(^|/)crds/[^/]+\.(yaml|yml|json)$")
"""Files Helm installs from `crds/` (the chart's and its subcharts')."""


@dataclass
class ChartRender:
    resource: str
    chart: str
    version: str
    release: str
    namespace: str
    digest: str | None
    objects: list[dict[str, Any]] = field(default_factory=list)
    crds: list[tuple[str, str, str]] = field(default_factory=list)
    """(CRD name, file inside the chart, verbatim YAML) of the chart's `crds/`, applied before the rest."""
    skipped: str = ""

    def index(self) -> dict[str, Any]:
        """The `charts.json` entry (docs/plan-format.md)."""
        return {"resource": self.resource, "chart": self.chart, "version": self.version, "release": self.release,
                "namespace": self.namespace, "contentSha256": self.digest, "skipped": self.skipped or None,
                "objects": [child_name(self.resource, o) for o in self.objects],
                "crds": [{"name": name, "file": file, "sha256": hashlib.sha256(text.encode()).hexdigest()}
                         for name, file, text in self.crds]}


def render_chart(entry: dict[str, Any]) -> ChartRender:
    """Render one `kubernetes:helm.sh/v4:Chart` entry of resources.json."""
    inputs = entry["inputs"]
    chart, version = inputs["chart"], inputs.get("version", "")
    result = ChartRender(resource=entry["name"], chart=chart, version=version,
                         release=inputs.get("name") or entry["name"], namespace=inputs.get("namespace", ""),
                         digest=None)
    source = find_source(chart, version)
    if source.folder is None:
        result.skipped = source.reason
        return result
    result.digest = source.digest
    from helm_python import HelmError

    try:
        result.objects = render_templates(source.folder, inputs.get("values") or {}, result.release, result.namespace)
    except HelmError as err:
        raise ChartError(f"{entry['name']}: {chart} {version} does not render with the program's values: "
                         f"{err}") from None
    if not inputs.get("skipCrds"):
        for path, text in source.crds:
            found = CRD_NAME.search(text)
            result.crds.append((found.group(1) if found else path, path, text))
    return result


def type_token(api_version: str, kind: str) -> str:
    """Pulumi's type token of a Kubernetes kind: `apps/v1` -> `kubernetes:apps/v1:Deployment`, `v1` -> `core/v1`."""
    return f"kubernetes:{api_version if '/' in api_version else 'core/' + api_version}:{kind}"


def child_name(resource: str, obj: dict[str, Any]) -> str:
    """Pulumi names a chart's object `<chart resource>:<namespace>/<name>` and keeps it apart from a same-named
    object of another kind by the type in its URN; the plan's logical names are unique on their own, so the
    kind joins the name: `<chart resource>:<Kind>:<namespace>/<name>`."""
    meta = obj["metadata"]
    where = f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else meta["name"]
    return f"{resource}:{obj['kind']}:{where}"


def child_entries(entry: dict[str, Any], rendered: ChartRender) -> list[dict[str, Any]]:
    """resources.json entries of the chart's objects, as Chart v4 registers them: children of the chart, on its
    provider, each custom resource depending on its CRD from the same chart."""
    crd_by_kind: dict[str, list[str]] = {}
    for name, _, _ in rendered.crds:
        group = name.partition(".")[2]
        crd_by_kind[group] = crd_by_kind.get(group, []) + [f"{entry['name']}:CustomResourceDefinition:{name}"]
    children = []
    for obj in rendered.objects:
        group = obj["apiVersion"].rpartition("/")[0]
        child: dict[str, Any] = {"type": type_token(obj["apiVersion"], obj["kind"]),
                                 "name": child_name(entry["name"], obj), "parent": entry["name"],
                                 "dependsOn": sorted(crd_by_kind.get(group, [])), "inputs": obj}
        if "provider" in (entry.get("options") or {}):
            child["options"] = {"provider": entry["options"]["provider"]}
        children.append(child)
    return children


def chart_objects(manifests_or_resources: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """(chart resource, object) for every rendered chart object of a plan's resources.json: the one place checks
    (policy rules, schema validation, scheduling) find what the charts add."""
    charts = {r["name"] for r in manifests_or_resources if r.get("type") == CHART_TYPE}
    return [(r["parent"], r["inputs"]) for r in manifests_or_resources
            if r.get("parent") in charts and r.get("type", "").startswith("kubernetes:")]


# --------------------------------------------------------------------------- fetching from the registries
def fetch(target: Path = FETCH_DIR) -> int:
    """Pull every pinned chart from its registry into `target`, keeping only copies whose content digest matches
    components/versions.py. Needs network access to the chart registries."""
    import helm_python

    failures = 0
    for name, ref in sorted(pinned_charts().items()):
        target.mkdir(parents=True, exist_ok=True)
        try:
            pulled = helm_python.pull(ref.chart, version=ref.version, repo_url=ref.repo, destination=str(target))
            archive = Path(pulled["output"])
            data = archive.read_bytes()
            archive.unlink()
        except (helm_python.HelmError, OSError, KeyError) as err:
            print(f"{name} {ref.version}: pull failed: {err}", file=sys.stderr)
            failures += 1
            continue
        if not install_archive(data, ref, target):
            failures += 1
    return 1 if failures else 0


def install_archive(data: bytes, ref: Any, target: Path) -> bool:
    """Unpack a chart archive under target/<name>/ if its content digest is the recorded one."""
    name = chart_dir_name(ref.chart)
    files = archive_files(data)
    digest = content_digest(files)
    if digest != ref.content_sha256:
        print(f"{name} {ref.version}: content digest {digest} is not the recorded {ref.content_sha256}; "
              "not used", file=sys.stderr)
        return False
    folder = target / name
    for path, content in files.items():
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        (folder / path).write_bytes(content)
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fetch", action="store_true", help="pull the pinned charts into build/charts/")
    parser.add_argument("--digest", type=Path, help="print the content digest of a chart folder")
    args = parser.parse_args(argv)
    if args.digest:
        print(content_digest(directory_files(args.digest)))
        return 0
    if args.fetch:
        return fetch()
    parser.print_help()
    return 2


if __name__ == "__main__":
    sys.exit(main())
