"""tools/preview/lazy_packages.py: the offline plan's lazily loaded provider packages hand out the very objects a
plain import does, for every name the program uses and every class loaded with them (the same module, the same
class namespace, the same type hints as pulumi resolves them), and fall back to a whole load for what they cannot
place or read."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

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
    # A small package of the lazily loaded ones: pulumi_gcp.compute's real __init__ took 1.3 s of CPU, this one's
    # 0.05 s, and the fallback is the same code for every package.
    code = ("import sys; sys.path.insert(0, '.')\n"
            "from tools.preview import lazy_packages; lazy_packages.install()\n"
            "import pulumi_gcp as gcp\n"
            "gcp.serviceaccount.Account\n"
            "assert '__getattr__' in vars(gcp.serviceaccount)\n"
            "try:\n    gcp.serviceaccount.NoSuchThing\nexcept AttributeError:\n"
            "    assert '__getattr__' not in vars(gcp.serviceaccount) and hasattr(gcp.serviceaccount, 'IAMMember')\n"
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


def _data_module(folder: Path, text: str) -> lazy_packages._LazyClasses:
    path = folder / "pkg" / "_inputs.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return lazy_packages._LazyClasses("pkg._inputs", str(path))


@pytest.fixture(params=["compiled file written", "no compiled file"])
def bytecode(request, monkeypatch) -> bool:
    """Both ways a checkout imports: writing compiled files (a developer's machine) or not (PYTHONDONTWRITEBYTECODE,
    as CI sets it); the cache's key names the compiled file, which the first parse may write."""
    writes = request.param == "compiled file written"
    monkeypatch.setattr(sys, "dont_write_bytecode", not writes)
    return writes


def _cache_files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


def _answers(classes) -> tuple:
    """What the loader asks of a module's classes, for each class: the classes it names and a definition."""
    namespace: dict = {}
    exec(classes.header, namespace)
    return tuple(sorted(classes.index)), {n: sorted(classes.named_by(n)) for n in classes.index}, {
        n: sorted(vars(lazy_packages._define(_Module(namespace), classes, n))) for n in classes.index}


class _Module:
    def __init__(self, namespace: dict):
        self.__dict__ = namespace


CACHED = GENERATED + '''
@pulumi.input_type
class BArgs:
    def __init__(__self__, *, c: 'CArgs'):
        pass

class CArgs:
    x: int
'''


def test_the_parse_cache_is_written_once_read_after_and_answers_as_the_parse(tmp_path, monkeypatch, bytecode):
    monkeypatch.setenv(lazy_packages.CACHE_ENV, str(tmp_path / "cache"))
    loader = _data_module(tmp_path, CACHED)
    parsed = loader._classes("pkg._inputs")
    assert isinstance(parsed, lazy_packages._Classes)
    assert len(_cache_files(tmp_path / "cache")) == 1
    cached = loader._classes("pkg._inputs")
    assert isinstance(cached, lazy_packages._CachedClasses)
    assert _answers(cached) == _answers(parsed)
    assert _answers(cached)[1] == {"AArgs": [], "AArgsDict": ["BArgs"], "BArgs": ["CArgs"], "CArgs": []}
    assert cached.header == parsed.header


def test_the_parse_cache_of_every_data_module_answers_as_its_parse():
    """Every data module the loader reads: its cache record gives the same classes, statements (decorators, bases,
    the source of one compiled from its lines), named classes and class bodies as the parse it was made from."""
    import importlib.util

    checked = 0
    for package in lazy_packages.PACKAGES:
        folder = Path(importlib.util.find_spec(package).submodule_search_locations[0])
        for module in lazy_packages.DATA_MODULES:
            path = folder / f"{module}.py"
            if not path.is_file():
                continue
            loader = lazy_packages._LazyClasses(f"{package}.{module}", str(path))
            parsed = lazy_packages._Classes.parse(path.read_text(encoding="utf-8"), loader.get_code(loader.name))
            cached = lazy_packages._decode_bytes(lazy_packages._encode(parsed))
            if parsed is None:
                assert cached is lazy_packages._WHOLE
                continue
            assert list(cached.index) == list(parsed.index)
            assert cached.header == parsed.header
            for name in parsed.index:
                statement, named, body = cached._read(name)  # None (a fallback to the parse) fails here
                assert statement == parsed.statement(name), name
                assert set(named) == parsed.named_by(name), name
                assert body == parsed.bodies[name], name
            checked += 1
    assert checked > 30


def test_a_changed_source_is_parsed_again_and_replaces_its_cache_file(tmp_path, monkeypatch, bytecode):
    import os

    monkeypatch.setenv(lazy_packages.CACHE_ENV, str(tmp_path / "cache"))
    loader = _data_module(tmp_path, CACHED)
    loader._classes("pkg._inputs")
    before = _cache_files(tmp_path / "cache")
    changed = CACHED.replace("class CArgs:", "class DArgs:\n    y: str\n\nclass CArgs:")
    loader = _data_module(tmp_path, changed)
    stat = os.stat(loader.path)
    os.utime(loader.path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))  # whatever the clock's resolution
    reparsed = loader._classes("pkg._inputs")
    assert isinstance(reparsed, lazy_packages._Classes) and "DArgs" in reparsed.index
    after = _cache_files(tmp_path / "cache")
    assert len(after) == 1 and after != before, (before, after)
    assert "DArgs" in loader._classes("pkg._inputs").index


def test_a_corrupt_cache_file_is_ignored_and_written_again(tmp_path, monkeypatch, bytecode):
    monkeypatch.setenv(lazy_packages.CACHE_ENV, str(tmp_path / "cache"))
    loader = _data_module(tmp_path, CACHED)
    expected = _answers(loader._classes("pkg._inputs"))
    (cache_file,) = (tmp_path / "cache").iterdir()
    good = cache_file.read_bytes()
    head = good[:good.index(b"\n", len(lazy_packages._CACHE_MAGIC)) + 1]
    for corrupt in (b"", b"garbage", good[:len(good) // 2], head + b"\xff" * 40, head + good[len(head):-3],
                    head + (12).to_bytes(8, "little") + b"\x00" * 12):
        cache_file.write_bytes(corrupt)
        again = loader._classes("pkg._inputs")
        assert isinstance(again, lazy_packages._Classes), corrupt[:60]
        assert _answers(again) == expected
        assert cache_file.read_bytes() == good  # rewritten whole
    assert isinstance(loader._classes("pkg._inputs"), lazy_packages._CachedClasses)


def test_a_cache_file_cut_short_under_a_reader_gives_the_parse(tmp_path, monkeypatch, bytecode):
    """A reader keeps its data module's file open for the entries it reads later; a file truncated in place meanwhile
    (not what the writers do: they replace it) gives the module's classes from its source instead."""
    monkeypatch.setenv(lazy_packages.CACHE_ENV, str(tmp_path / "cache"))
    loader = _data_module(tmp_path, CACHED)
    expected = _answers(loader._classes("pkg._inputs"))
    cached = loader._classes("pkg._inputs")
    assert isinstance(cached, lazy_packages._CachedClasses)
    (cache_file,) = (tmp_path / "cache").iterdir()
    with open(cache_file, "r+b") as file:
        file.truncate(len(lazy_packages._CACHE_MAGIC))
    assert _answers(cached) == expected
    assert cached.parsed is not None


def test_an_unwritable_or_disabled_cache_loads_as_without_one(tmp_path, monkeypatch, bytecode):
    loader = _data_module(tmp_path, CACHED)
    (tmp_path / "file").write_text("a file, so no folder can be made under it\n")
    for folder in (str(tmp_path / "file" / "cache"), ""):
        monkeypatch.setenv(lazy_packages.CACHE_ENV, folder)
        for _ in range(2):
            classes = loader._classes("pkg._inputs")
            assert isinstance(classes, lazy_packages._Classes) and "CArgs" in classes.index
            assert "BArgs" in lazy_packages._words(loader.path)
    assert _cache_files(tmp_path / "file") == []


CONCURRENT = """
import sys
sys.path.insert(0, '.')
from tools.preview import lazy_packages
loader = lazy_packages._LazyClasses('pkg._inputs', sys.argv[1])
kinds = set()
for _ in range(40):
    cached = lazy_packages._open_classes('pkg._inputs', sys.argv[2], lambda: None)
    if cached is not None:
        assert cached.index.keys() == {'AArgs', 'AArgsDict', 'BArgs', 'CArgs'}
        assert all(cached._read(n) for n in cached.index)
    classes = loader._classes('pkg._inputs')
    assert sorted(classes.index) == ['AArgs', 'AArgsDict', 'BArgs', 'CArgs'], classes
    kinds.add(type(classes).__name__)
    lazy_packages._cache_write('pkg._inputs', sys.argv[2], lazy_packages._encode(
        lazy_packages._Classes.parse(open(sys.argv[1]).read(), loader.get_code('pkg._inputs'))))
print(sorted(kinds))
"""


def test_processes_writing_and_reading_the_cache_at_once_each_read_a_whole_file(tmp_path, bytecode):
    """Four processes write the same cache file over and over while reading it: every read is a whole file (or
    none yet), never a partial one, and no temporary file is left."""
    loader = _data_module(tmp_path, CACHED)
    env = {**os.environ, lazy_packages.CACHE_ENV: str(tmp_path / "cache")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if not bytecode:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    loader.get_code("pkg._inputs")  # the compiled file (if written) the children's key names
    key = lazy_packages._cache_key(loader.path, importlib.util.cache_from_source(loader.path))
    procs = [subprocess.Popen([sys.executable, "-c", CONCURRENT, loader.path, key], cwd=ROOT, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(4)]
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err[-2000:]
        assert "_CachedClasses" in out, out
    assert len(_cache_files(tmp_path / "cache")) == 1


@pytest.mark.parametrize("stack", ["gpu", "tpu"])
def test_a_render_forked_after_the_preload_resolves_no_type_of_its_own(stack):
    """The preload resolves the property types of every resource, arguments, component and result class a render
    serializes (tools.preview.render.warm_loaded_resources), so a forked render finds them all in pulumi's cache; a
    provider module the preload misses (the TPU image's artifactregistry and pulumi_command did) shows up here.
    The one left is the SDK's own root `Stack`, which the warm-up leaves to the SDK (its hints name SDK internals)."""
    from tests import plan_server
    from tests.conftest import fixture_stack

    proc = plan_server.run([str(fixture_stack(stack))], dict(os.environ), module="tests.render_cache_misses")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stderr.splitlines()[-1]) == ["pulumi.runtime.stack.Stack"]
