"""What the staging Job runs in its pod, and which repository file each in-pod file is: the copier
(components/weights/copier/) and the `stage` command that starts it (tools/live/stage_weights.py, with the two
package files it is imported through). Standard library only: the declarations read it too
(components/checks/declared.py), and the Job (components/weights/staging.py) ships exactly this.

In the pod the files keep the names they have always had there (the copier as the package `tools.staging`, run
as `python -m tools.live.stage_weights`), so the ConfigMap and the Job do not change when a file moves in this
repository: `pod_text` gives the copier's package its in-pod name in the one file that imports it by name.
Editing any file listed here changes a cluster object (the ConfigMap) on the next `pulumi up`."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
APP = {
    "tools/__init__.py": "tools/__init__.py",
    "tools/live/__init__.py": "tools/live/__init__.py",
    "tools/live/stage_weights.py": "tools/live/stage_weights.py",
    "tools/staging/__init__.py": "components/weights/copier/__init__.py",
    "tools/staging/hub.py": "components/weights/copier/hub.py",
    "tools/staging/bucket.py": "components/weights/copier/bucket.py",
    "tools/staging/ledger.py": "components/weights/copier/ledger.py",
    "tools/staging/progress.py": "components/weights/copier/progress.py",
    "tools/staging/copy.py": "components/weights/copier/copy.py",
    "tools/staging/requirements.lock": "components/weights/copier/requirements.lock",
}
"""In-pod path under the Job's working folder -> the repository file shipped there, in the ConfigMap's order."""
COPIER_PACKAGE = "components.weights.copier"
POD_PACKAGE = "tools.staging"
"""The copier's package here and in the pod."""
LOCK = "tools/staging/requirements.lock"
"""The in-pod path of the copier's hash-pinned library lock (the Job installs from it)."""
INSTALL = ("--quiet", "--no-cache-dir", "--disable-pip-version-check", "--no-deps", "--require-hashes",
           "--only-binary=:all:", "--target", "/deps", "-r", f"/app/{LOCK}")
"""`pip install` arguments of the staging Job: exactly the hashed lock, no dependency resolution, wheels only, the
Hugging Face token out of the installer's environment (components/weights/staging.py builds its command from this;
components/checks/declared.py declares it)."""


def key(path: str) -> str:
    """ConfigMap data key of an in-pod file (keys cannot hold '/')."""
    return path.replace("/", "--")


def pod_text(source: str) -> str:
    """A repository file's text as the pod holds it."""
    return (ROOT / source).read_text().replace(COPIER_PACKAGE, POD_PACKAGE)


def shipped_code() -> dict[str, str]:
    """The ConfigMap's data: key -> in-pod file text."""
    return {key(path): pod_text(source) for path, source in APP.items()}
