"""tools/preview/lazy_packages.py: the offline plan's lazily loaded provider packages hand out the very objects a
plain import does, for every name the program uses, and fall back to the package's real `__init__` for a
name they cannot place."""

from __future__ import annotations

import json
import re
import subprocess
import sys

from tests.conftest import ROOT

PROBE = """
import json, sys
sys.path.insert(0, '.')
from tools.preview import lazy_packages
lazy_packages.install()
import pulumi_gcp as gcp
names = json.loads(sys.argv[1])
found = {n: getattr(getattr(gcp, p.rsplit('.', 1)[1]), n).__module__ for p, n in names}
loaded = sorted(m for m in sys.modules if m.startswith(lazy_packages.PACKAGES))
lazy = all('__getattr__' in vars(sys.modules[p]) for p in lazy_packages.PACKAGES)
gcp.compute.Autoscaler  # placed by name
try:
    gcp.compute.NoSuchThing
except AttributeError:
    fell_back = '__getattr__' not in vars(gcp.compute) and hasattr(gcp.compute, 'InstanceTemplate')
print(json.dumps({"found": found, "loaded": len(loaded), "lazy": lazy, "fell_back": fell_back}))
"""


def used_names() -> list[tuple[str, str]]:
    text = "\n".join(p.read_text() for folder in ("components", "stacks") for p in (ROOT / folder).glob("*.py"))
    return sorted({(f"pulumi_gcp.{m[1]}", m[2]) for m in re.finditer(r"\bgcp\.(compute|container)\.(\w+)", text)})


def test_every_name_the_program_uses_comes_from_its_defining_module():
    names = used_names()
    assert len(names) > 10
    proc = subprocess.run([sys.executable, "-c", PROBE, json.dumps(names)], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout)
    for package, name in names:
        # A plain `import pulumi_gcp.compute` exports each name from the submodule that defines it.
        assert result["found"][name].startswith(package + "."), (name, result["found"][name])
    assert result["lazy"], "the program's names were placed without running a package's full __init__"
    assert result["loaded"] < 60, "only the modules the program uses were loaded"
    assert result["fell_back"], "an unknown name runs the real __init__, then fails as a plain import would"
