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
  2. `build/charts/` (filled by `python -m tools charts --fetch` from the registries);
  3. `charts/` in the shared facts folder beside the checkout (`$KIMI_SHARED_DIR`), as the tests use.
Whatever the source, its files must hash to the digest recorded in components/facts/versions.py
(`ChartRef.content_sha256`), so the plan renders exactly the chart that was reviewed. Without a source the
chart is reported as not rendered, with the reason, in the plan summary and `charts.json`.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import marshal
import os
import re
import shutil
import sys
import tarfile
import tempfile
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from tools import prog

ROOT = Path(__file__).resolve().parents[2]
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
    """Chart name -> ChartRef, for every chart components/facts/versions.py pins."""
    from components.facts import versions

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
        raise ChartError(f"chart {chart} {version} is not pinned in components/facts/versions.py")
    looked = []
    for root in search_roots():
        folder = root / name
        try:
            present = (folder / "Chart.yaml").is_file()
        except OSError:  # a name too long for the file system, a folder it may not read: no copy there
            present = False
        if not present:
            looked.append(str(root))
            continue
        meta = yaml.load((folder / "Chart.yaml").read_text(), Loader=_LOADER)
        if str(meta.get("version")).removeprefix("v") != version.removeprefix("v"):  # Helm matches semver
            raise ChartError(f"{folder} holds {name} {meta.get('version')}, the program pins {version}")
        files = directory_files(folder)
        digest = content_digest(files)
        if digest not in ref.digests:
            raise ChartError(f"{folder}: content digest {digest} differs from the one recorded for {name} {version} "
                             f"in components/facts/versions.py ({ref.content_sha256})")
        crds = tuple((path, files[path].decode()) for path in sorted(files) if CRD_FILE.search(path))
        return Source(folder, digest, crds=crds)
    return Source(None, None, f"no copy of {name} {version} found (run `make charts`, or set KIMI_CHARTS_DIR)")


@cache
def _load(folder: Path) -> Any:
    import helm_python

    return helm_python.Chart.load(folder)


@cache
def _render_cached(folder: Path, values_json: str, release: str, namespace: str) -> tuple[tuple[str, str], ...]:
    """Rendered template files, memoized for the plan run (both router modes, re-renders in tests)."""
    rendered = _load(folder).render(json.loads(values_json), name=release, namespace=namespace, is_install=True)
    return tuple(sorted(rendered.items()))


RUN_CACHE: Path | None = None
"""A folder the renders of one plan run share (tools.preview.plan.render_all sets it before forking a child per
stack): a chart's objects for the same values, and the parse of each rendered template text, are made once per
run by the first child that needs them and read by the others. The stacks of a run mostly pass the same values,
and where they differ (KEDA's names the stack's service account) the templates' text mostly does not: KEDA's
templated CRDs alone are 0.8 MB of YAML, parsed in every child before. Per run only, so a changed chart copy or
changed code is never read from it."""


def render_templates(folder: Path, values: dict[str, Any], release: str, namespace: str) -> list[dict[str, Any]]:
    """Objects of the chart's templates in template order, hooks dropped (Helm's DisableHooks), namespaced
    objects without a namespace given the release's."""
    values_json = json.dumps(values, sort_keys=True)
    key = json.dumps([str(folder), values_json, release, namespace])
    return _kept("objects", key, lambda: _render_objects(folder, values_json, release, namespace))


def _render_objects(folder: Path, values_json: str, release: str, namespace: str) -> list[dict[str, Any]]:
    objects = []
    for path, text in _render_cached(folder, values_json, release, namespace):
        if path.endswith("NOTES.txt") or Path(path).name.startswith("_"):
            continue
        for obj in _kept("text", text, lambda text=text: list(yaml.load_all(text, Loader=_LOADER))):
            if not obj:
                continue
            if HOOK_ANNOTATION in ((obj.get("metadata") or {}).get("annotations") or {}):
                continue
            if obj["kind"] not in CLUSTER_SCOPED and not obj["metadata"].get("namespace"):
                obj["metadata"]["namespace"] = namespace
            objects.append(obj)
    return objects


def _kept(kind: str, key: str, make: Any) -> Any:
    """`make()`, or what a child of the same run kept for the same `kind` and `key` (RUN_CACHE); every call returns
    its own copy (the caller may change it)."""
    if RUN_CACHE is None:
        return make()
    name = f"{kind}-{hashlib.sha256(key.encode()).hexdigest()}"
    kept = RUN_CACHE / f"{name}.marshal"
    try:
        return marshal.loads(kept.read_bytes())
    except (OSError, EOFError, ValueError, TypeError):
        pass
    made = make()
    try:
        data = marshal.dumps(made)
    except ValueError:  # a value marshal cannot hold (a YAML timestamp): not kept
        return made
    partial = kept.with_name(f"{name}.{os.getpid()}.tmp")
    try:
        partial.write_bytes(data)
        partial.rename(kept)  # whole or not at all for a reader
    except OSError:
        pass
    return made  # kept as it was made, whatever the caller does with it now


CRD_NAME = re.compile(r"^  name: (\S+)$", re.MULTILINE)
CRD_FILE = re.compile(r"^(charts/[^/]+/)*crds/[^/]+\.(yaml|yml|json)$")
"""Files Helm installs from `crds/` (the chart's and its subcharts'): the top-level folder only, so a chart that
templates its CRDs (KEDA: templates/crds/, rendered with the chart unless crds.install is false) has none here."""


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
    try:
        result.objects = render_templates(source.folder, inputs.get("values") or {}, result.release, result.namespace)
    except Exception as err:
        from helm_python import HelmError  # here, not before: a render the run cache answers loads no Helm

        if not isinstance(err, HelmError):
            raise
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
OCI_MIRROR_ENV = "KIMI_OCI_MIRROR"
"""`[http://|https://]host[:port]` that stands in for the registry host of every `oci://` chart (paths kept);
`http://` talks plain HTTP (a mirror on loopback)."""
REPO_MIRROR_ENV = "KIMI_CHART_REPO_MIRROR"
"""A classic chart repository URL that stands in for the pinned repository of the charts that have one."""
WHAT_TO_SET = (f"needs the registry over the network: behind a proxy set HTTPS_PROXY; with a mirror set "
               f"{OCI_MIRROR_ENV} (oci:// charts) or {REPO_MIRROR_ENV} (the others); or set KIMI_CHARTS_DIR to a "
               "folder holding the pinned charts")


@dataclass(frozen=True)
class PullSource:
    chart_ref: str
    """What Helm pulls: `oci://host/path/name` or, with `repo_url`, the chart's name."""
    repo_url: str | None
    plain_http: bool
    where: str
    """The registry or repository as the user would look it up."""


def pull_source(ref: Any, oci_mirror: str | None = None, repo_mirror: str | None = None) -> PullSource:
    """Where a pinned chart is pulled from: its own registry, or the mirror given for its protocol."""
    if ref.repo is None:
        chart_ref, plain_http = ref.chart, False
        if oci_mirror:
            scheme, _, host = oci_mirror.rstrip("/").rpartition("://")
            path = ref.chart.removeprefix("oci://").split("/", 1)[1]
            chart_ref, plain_http = f"oci://{host}/{path}", scheme == "http"
        return PullSource(chart_ref, None, plain_http, chart_ref)
    repo = (repo_mirror or ref.repo).rstrip("/")
    return PullSource(chart_dir_name(ref.chart), repo, False, repo)


def _pull(helm_python: Any, source: PullSource, version: str, destination: str) -> Path:
    """Helm's pull of one chart version; the archive's path. An `oci://` chart is tagged with or without a
    leading `v` depending on its project's release script, and Helm takes an explicit version as the tag
    verbatim (its tag listing drops tags that are not strict semver, such as `v0.11.1`), so the other spelling
    is tried when the registry has no such tag."""
    spellings = [version]
    if source.repo_url is None:
        spellings.append(version[1:] if version.startswith("v") else f"v{version}")
    for spelling in spellings:
        try:
            pulled = helm_python.pull(source.chart_ref, version=spelling, repo_url=source.repo_url,
                                      plain_http=source.plain_http, destination=destination)
        except helm_python.HelmError as err:
            if spelling == spellings[-1] or "not found" not in str(err):
                raise
            continue
        return Path(pulled.get("output") or next(Path(destination).glob("*.tgz")))
    raise AssertionError("unreachable")


def _one_line(err: BaseException) -> str:
    text = " ".join(str(err).split())
    return text if len(text) <= 300 else text[:297] + "..."


def fetch(target: Path = FETCH_DIR, charts: list[str] | None = None, oci_mirror: str | None = None,
          repo_mirror: str | None = None) -> int:
    """Pull every pinned chart (or the ones named) from its registry, or the mirror given, with Helm's own pull
    into `target`, keeping only copies whose content digest matches components/facts/versions.py. One line per chart
    on stderr for each that could not be used."""
    import helm_python

    oci_mirror = oci_mirror or os.environ.get(OCI_MIRROR_ENV) or None
    repo_mirror = repo_mirror or os.environ.get(REPO_MIRROR_ENV) or None
    pinned = pinned_charts()
    unknown = sorted(set(charts or ()) - set(pinned))
    if unknown:
        print(f"not pinned in components/facts/versions.py: {', '.join(unknown)} (pinned: {', '.join(sorted(pinned))})",
              file=sys.stderr)
        return 2
    fetched = 0
    chosen = sorted(charts or pinned)
    for name in chosen:
        ref = pinned[name]
        source = pull_source(ref, oci_mirror, repo_mirror)
        target.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=target) as download:
            try:
                data = _pull(helm_python, source, ref.version, download).read_bytes()
            except (helm_python.HelmError, OSError, StopIteration) as err:
                print(f"{name} {ref.version}: cannot pull from {source.where}: {_one_line(err)}; {WHAT_TO_SET}",
                      file=sys.stderr)
                continue
        fetched += install_archive(data, ref, target)
    print(f"fetched {fetched} of {len(chosen)} pinned charts into {_shown(target)}")
    return 0 if fetched == len(chosen) else 1


def _shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def install_archive(data: bytes, ref: Any, target: Path) -> bool:
    """Unpack a chart archive under target/<name>/ if its content digest is the recorded one."""
    name = chart_dir_name(ref.chart)
    files = archive_files(data)
    digest = content_digest(files)
    if digest not in ref.digests:
        print(f"{name} {ref.version}: content digest {digest} is not the recorded {ref.content_sha256} "
              "(components/facts/versions.py); refused, nothing written", file=sys.stderr)
        return False
    folder = target / name
    if folder.exists():
        shutil.rmtree(folder)
    for path, content in files.items():
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        (folder / path).write_bytes(content)
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=prog("charts"), description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fetch", action="store_true", help="pull the pinned charts into build/charts/")
    parser.add_argument("--chart", action="append", help="with --fetch: only this chart (repeatable)")
    parser.add_argument("--into", type=Path, default=FETCH_DIR, help="with --fetch: folder to fill "
                                                                     "(default build/charts/, where the plan looks)")
    parser.add_argument("--oci-mirror", help=f"with --fetch: registry host for the oci:// charts "
                                             f"(or ${OCI_MIRROR_ENV})")
    parser.add_argument("--repo-mirror", help=f"with --fetch: chart repository URL for the others "
                                              f"(or ${REPO_MIRROR_ENV})")
    parser.add_argument("--digest", type=Path, help="print the content digest of a chart folder")
    args = parser.parse_args(argv)
    if args.digest:
        print(content_digest(directory_files(args.digest)))
        return 0
    if args.fetch:
        return fetch(args.into, charts=args.chart, oci_mirror=args.oci_mirror, repo_mirror=args.repo_mirror)
    parser.error("nothing to do: give --fetch or --digest FOLDER")


if __name__ == "__main__":
    sys.exit(main())
