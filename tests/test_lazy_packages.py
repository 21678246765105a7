"""tools/preview/lazy_packages.py: the offline plan's lazily loaded provider packages hand out the very objects a
plain import does, for every name the program uses and every class loaded with them (the same module, the same
class namespace, the same type hints as pulumi resolves them), and fall back to a whole load for what they cannot
place or read."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT
from tools.preview import lazy_packages

PROBE = """
import importlib, json, sys, types, warnings
sys.path.insert(0, '.')
warnings.simplefilter('ignore')
lazy = sys.argv[1] == 'lazy'
if lazy:
    from tools.preview import lazy_packages
    lazy_packages.install()
import pulumi._types as t
names = json.loads(sys.argv[2])
classes = {}

def hints(obj):
    for kind, types in (('input', t.input_type_types), ('output', t.output_type_types), ('resource', t.resource_types)):
        if kind == 'resource' and isinstance(obj, type) and hasattr(obj, '_internal_init') or \\
                kind != 'resource' and getattr(t, f'is_{kind}_type')(obj):
            return repr(sorted(types(obj).items()))
    return None

def facts(obj):
    return [getattr(obj, '__module__', None), getattr(obj, '__qualname__', None), sorted(vars(obj)), hints(obj)]

found = {f'{p}.{n}': facts(getattr(importlib.import_module(p), n)) for p, n in names}
if lazy:
    classes = {name: sorted(n for n in module.__all__.classes.index if n in vars(module))
               for name, module in sorted(sys.modules.items())
               if type(module) is types.ModuleType  # not a lazy module still to load (pulumi._utils.lazy_import)
               and isinstance(module.__dict__.get('__all__'), lazy_packages._StarNames)}
# Every class loaded with them resolves its hints too (one the loader left undefined would fail with a NameError).
hinted = sum(hints(getattr(importlib.import_module(m), n)) is not None for m, ns in classes.items() for n in ns)
loaded = classes
print(json.dumps({'found': found, 'loaded': loaded, 'hinted': hinted}))
"""


def probe(mode: str, names: list[tuple[str, str]]) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", PROBE, mode, json.dumps(names)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def result(proc: subprocess.Popen[str]) -> dict:
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]
    return json.loads(out)


def test_every_name_the_program_uses_is_the_plain_imports_and_every_class_loaded_resolves_its_hints():
    names = lazy_packages.program_names(ROOT)
    assert len({p for p, _ in names}) > 10 and len(names) > 60, names
    plain_run = probe("plain", names)  # both at once: one per core
    lazy = result(probe("lazy", names))
    assert sum(map(len, lazy["loaded"].values())) > 100, "the classes were loaded one by one"
    # The plain import, after the packages' real __init__ ran: the same objects for every name.
    plain = result(plain_run)
    assert lazy["found"].keys() == plain["found"].keys()
    for key, facts in lazy["found"].items():
        assert facts == plain["found"][key], key
    # Each fact includes the hints pulumi resolves when it serializes the type (input, output or resource): a class
    # of the lazily loaded modules that those hints name and the loader had not defined fails with a NameError.
    assert sum(1 for facts in lazy["found"].values() if facts[3] is not None) > 30
    assert lazy["hinted"] > 500, "every input and output type the lazy run defined resolved its hints"


def test_a_name_it_cannot_place_runs_the_real_init_and_fails_as_a_plain_import_would():
    code = ("import sys; sys.path.insert(0, '.')\n"
            "from tools.preview import lazy_packages; lazy_packages.install()\n"
            "import pulumi_gcp as gcp\n"
            "gcp.compute.Autoscaler\n"
            "assert '__getattr__' in vars(gcp.compute)\n"
            "try:\n    gcp.compute.NoSuchThing\nexcept AttributeError:\n"
            "    assert '__getattr__' not in vars(gcp.compute) and hasattr(gcp.compute, 'InstanceTemplate')\n"
            "    print('fell back')\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.stdout.strip() == "fell back", proc.stderr[-2000:]


GENERATED = '''import pulumi
from typing import TypedDict

__all__ = ['AArgs', 'AArgsDict']

class AArgsDict(TypedDict):
    b: 'BArgs'

@pulumi.input_type
class AArgs:
    """Doc."""
'''


def test_a_data_module_laid_out_otherwise_loads_whole():
    parse = lazy_packages._Classes.parse
    assert parse(GENERATED, compile(GENERATED, "m.py", "exec")) is not None
    for other in ("ALIAS = AArgs\n", "def helper():\n    return 1\n", "if True:\n    X = 1\n",
                  "@pulumi.type_token(\n    'x:y:Z')\nclass Z:\n    pass\n"):
        text = GENERATED + other
        assert parse(text, compile(text, "m.py", "exec")) is None, other


def test_the_class_statement_scan_finds_what_the_anchored_pattern_matches():
    """`_class_statements` (a fast literal search, then the decorator lines above) against ANCHORED_CLASS over every
    data module the loader reads and over hand-made edge cases: the same offsets, decorators, names and bases."""
    import importlib.util

    def anchored(text):
        return [(m.start(), m.group(1), m.group(2), m.group(3)) for m in lazy_packages.ANCHORED_CLASS.finditer(text)]

    def scanned(text):
        return [(m.start(), m.group(1), m.group(2), m.group(3)) for m in lazy_packages._class_statements(text)]

    texts = [GENERATED, "class First(A, B):\n    pass\n",
             "@d\nclass First:\n    pass\n\n@x\n\n@y\n@z(1)\nclass B(C):\n",
             "x = 1\n@not_a_class\ndef f(): pass\nclass Nested(Base[(1)]):\n", "", "@only\n"]
    for package in lazy_packages.PACKAGES:
        folder = importlib.util.find_spec(package).submodule_search_locations[0]
        texts += [(Path(folder) / f"{m}.py").read_text(encoding="utf-8") for m in lazy_packages.DATA_MODULES
                  if (Path(folder) / f"{m}.py").is_file()]
    assert len(texts) > 30
    for text in texts:
        assert scanned(text) == anchored(text), text[:200]
