"""`python -m tools charts --fetch` end to end, the way a user without the shared folder gets the pinned
charts: the real Helm SDK pulls from a loopback OCI distribution registry (the `oci://` charts) and a plain
HTTP chart repository (the NVIDIA chart), serving archives packaged by Helm from the charts the tests have;
each pulled archive is checked against the digest in components/facts/versions.py."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import plan_server
from tests.conftest import ROOT, Plan, fixture_stack
from tests.fakes.oci_registry import ChartRepository, OciRegistry
from tools.preview import helm_render

OCI_CHARTS = ("lws", "llm-d-router-standalone", "llm-d-router-gateway")
REPO_CHART = "nvidia-dra-driver-gpu"
REPO_CHARTS = (REPO_CHART, "keda")
"""The pinned charts of classic repositories: one mirror (KIMI_CHART_REPO_MIRROR) stands in for all of them."""


def package(folder: Path, into: Path) -> Path:
    import helm_python

    return Path(helm_python.package(folder, destination=into))


def tampered(shared: Path, name: str, work: Path) -> Path:
    """The chart with one value changed, packaged under the same name and version (a re-pushed release)."""
    copy = work / "tampered" / name
    shutil.copytree(shared / "charts" / name, copy)
    (copy / "values.yaml").write_text((copy / "values.yaml").read_text() + "\n# changed after review\n")
    return copy


class Registries:
    def __init__(self, oci: OciRegistry, repo: ChartRepository):
        self.oci, self.repo = oci, repo

    @property
    def env(self) -> dict[str, str]:
        return {helm_render.OCI_MIRROR_ENV: f"http://{self.oci.address}",
                helm_render.REPO_MIRROR_ENV: f"http://{self.repo.address}/nvidia"}

    def push(self, folder: Path, work: Path) -> None:
        """Helm's own push of the packaged chart to where its pinned `oci://` reference points, on the mirror."""
        import helm_python

        ref = helm_render.pinned_charts()[folder.name]
        root = ref.chart.removeprefix("oci://").split("/", 1)[1].rsplit("/", 1)[0]
        helm_python.push(package(folder, work / "pkg"), f"oci://{self.oci.address}/{root}", plain_http=True)

    def publish(self, folder: Path) -> None:
        """A classic repository: the archive and the index.yaml Helm generates for it."""
        import helm_python

        package(folder, self.repo.folder / "nvidia")
        helm_python.repo_index_generate(self.repo.folder / "nvidia")


@pytest.fixture
def registries(tmp_path) -> Iterator[Registries]:
    (tmp_path / "repo" / "nvidia").mkdir(parents=True)
    with OciRegistry() as oci, ChartRepository(tmp_path / "repo") as repo:
        yield Registries(oci, repo)


def fetch_cli(into: Path, env: dict[str, str], *charts: str) -> subprocess.CompletedProcess:
    """The user's command, in its own process (the default entry point), filling `into`."""
    args = [sys.executable, "-m", "tools", "charts", "--fetch", "--into", str(into)]
    args += [a for c in charts for a in ("--chart", c)]
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, **env})


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_fetched_charts_are_used_by_the_plan(registries, shared, tmp_path):
    """Good archives: every pinned chart is pulled, passes its digest, and the plan of a user without the shared
    folder renders the charts' objects from the fetched copies."""
    for name in OCI_CHARTS:
        registries.push(shared / "charts" / name, tmp_path)
    for name in REPO_CHARTS:
        registries.publish(shared / "charts" / name)
    into = tmp_path / "charts"
    proc = fetch_cli(into, registries.env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"fetched 5 of 5 pinned charts into {into}" and not proc.stderr
    for name, ref in helm_render.pinned_charts().items():
        assert helm_render.content_digest(helm_render.directory_files(into / name)) in ref.digests
    env = {"KIMI_SHARED_DIR": str(tmp_path / "no-shared"), "KIMI_CHARTS_DIR": str(into)}
    # Forked from the session's preloaded plan process (tests/plan_server.py), which finds charts at render time.
    plan = plan_server.run(["--quiet", "--out", str(tmp_path / "plan"), "--stack-file", str(fixture_stack("gpu"))],
                           {**os.environ, **env})
    assert plan.returncode == 0, plan.stderr
    charts = json.loads((tmp_path / "plan" / "gpu" / "charts.json").read_text())
    assert [c["skipped"] for c in charts] == [None] * 4
    assert {c["contentSha256"] for c in charts} <= {d for r in helm_render.pinned_charts().values() for d in r.digests}
    assert Plan(tmp_path / "plan" / "gpu").chart_manifests("gpu-devices-dra-driver")


@pytest.mark.parametrize("name", ["llm-d-router-standalone", REPO_CHART])
def test_a_tampered_archive_is_refused_with_one_line(registries, shared, tmp_path, name):
    """The registry serves the same name and version with other content: the archive is refused, nothing of it
    is written, and one line says which chart and both digests."""
    changed = tampered(shared, name, tmp_path)
    registries.publish(changed) if name == REPO_CHART else registries.push(changed, tmp_path)
    into = tmp_path / "charts"
    proc = fetch_cli(into, registries.env, name)
    assert proc.returncode == 1
    ref = helm_render.pinned_charts()[name]
    [line] = proc.stderr.splitlines()
    assert line.startswith(f"{name} {ref.version}: content digest ")
    assert line.endswith(f"is not the recorded {ref.content_sha256} (components/facts/versions.py); refused, "
                         "nothing written")
    assert not (into / name).exists()


def test_an_archive_changed_in_transit_is_refused_by_helm(registries, shared, tmp_path):
    """Bytes that no longer match the registry's manifest: Helm's pull itself refuses them (one line)."""
    registries.push(shared / "charts" / "lws", tmp_path)
    [(_, manifest)] = [v for (repo, ref), v in registries.oci.manifests.items() if ref.startswith("sha256:")]
    [layer] = json.loads(manifest)["layers"]
    registries.oci.tamper_blob(layer["digest"], b"\x1f\x8b" + b"\0" * (layer["size"] - 2))
    proc = fetch_cli(tmp_path / "charts", registries.env, "lws")
    assert proc.returncode == 1
    [line] = proc.stderr.splitlines()
    assert line.startswith(f"lws 0.11.1: cannot pull from oci://{registries.oci.address}/lws/charts/lws: ")
    assert not (tmp_path / "charts" / "lws").exists()


@pytest.mark.parametrize("name", ["lws", REPO_CHART])
def test_an_unreachable_registry_says_what_to_set(tmp_path, name):
    """Nothing listens where the chart is looked for: one line naming the chart, where, and what to set."""
    port = closed_port()
    env = {helm_render.OCI_MIRROR_ENV: f"http://127.0.0.1:{port}",
           helm_render.REPO_MIRROR_ENV: f"http://127.0.0.1:{port}/nvidia"}
    proc = fetch_cli(tmp_path / "charts", env, name)
    assert proc.returncode == 1
    [line] = proc.stderr.splitlines()
    ref = helm_render.pinned_charts()[name]
    assert line.startswith(f"{name} {ref.version}: cannot pull from ")
    assert f"127.0.0.1:{port}" in line and "connection refused" in line
    assert line.endswith("behind a proxy set HTTPS_PROXY; with a mirror set KIMI_OCI_MIRROR (oci:// charts) or "
                         "KIMI_CHART_REPO_MIRROR (the others); or set KIMI_CHARTS_DIR to a folder holding the pinned "
                         "charts")
    assert proc.stdout.strip() == f"fetched 0 of 1 pinned charts into {tmp_path / 'charts'}"


def test_pinned_references_map_onto_a_mirror():
    """What the mirror settings change: the registry host (oci://, path kept) or the whole repository URL."""
    charts = helm_render.pinned_charts()
    lws = helm_render.pull_source(charts["lws"], oci_mirror="http://127.0.0.1:5000")
    assert (lws.chart_ref, lws.repo_url, lws.plain_http) == ("oci://127.0.0.1:5000/lws/charts/lws", None, True)
    assert helm_render.pull_source(charts["lws"], oci_mirror="mirror.example").chart_ref == \
        "oci://mirror.example/lws/charts/lws"
    own = helm_render.pull_source(charts[REPO_CHART])
    assert (own.chart_ref, own.repo_url) == (REPO_CHART, "https://helm.ngc.nvidia.com/nvidia")
    assert helm_render.pull_source(charts[REPO_CHART], repo_mirror="http://127.0.0.1:1/nv/").repo_url == \
        "http://127.0.0.1:1/nv"
