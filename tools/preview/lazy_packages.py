"""Load the provider packages the program uses one module, and one class, at a time (the offline plan only).

Most of an offline plan's import time went to provider code the program never runs. Each provider package
(`pulumi_gcp.compute`, `pulumi_kubernetes.core.v1`, ...) imports every resource module of its own in `__init__`
(about 300 in `pulumi_gcp.compute`), and each package's `_inputs` and `outputs` modules define every nested type of
the package at import: 3,300 classes in `pulumi_gcp.compute` (9.5 MB of source) with their typed annotations
evaluated, for the ~40 the program uses. Two loaders defer that work until a name is asked for:

- A package's `__init__` is replaced by a module-level `__getattr__` (PEP 562) that imports the one module
  defining a name when it is first asked for (`Router` or `RouterArgs` -> `router`, `Pod` or `PodInitArgs` ->
  `Pod`, anything else from `_inputs`, `outputs` or `_enums`). A name it cannot place runs the package's real
  `__init__` and is looked up again, so nothing is ever missing, only loaded later.
- A package's `_inputs` and `outputs` modules run their header (imports, `__all__`) and define each class when it
  is first asked for, from its own lines of the module's source (same file, same line numbers, the same module
  namespace), together with every class of the module its source names (the types `typing.get_type_hints`
  resolves in that namespace). `from ._inputs import *` in a sibling resource module copies the classes that
  module's source names; from anywhere else (a package's real `__init__`) it copies everything, as a plain import
  does. A module whose layout is not the generated one (a header, then only classes at column 0) loads whole.

What a data module's parse finds (its class index, each class's decorators, bases and the classes it names, the
header's code and each class body's code) is kept in a cache file under build/cache/lazy-packages/ (CACHE_ENV names
another folder; empty: no cache), so a later plan neither reads the multi-megabyte sources nor unmarshals a whole
module: it unmarshals the header and the bodies of the classes it defines. A file is keyed by the module's source
and compiled file (path, size, mtime_ns; like Python's own timestamp check of a compiled file, a source replaced
with the same size and mtime is not noticed: a changed install is a new key in practice, since pip writes new
files), the interpreter's bytecode magic and this loader's own source, keyed again after a parse that wrote the
compiled file, written
whole (a temporary file, then os.replace) so processes running at once each read a complete file or none, and is
ignored (the module parsed from its source again) when it is missing, unreadable, corrupt or from another key; a
folder that cannot be written just means no cache. The same holds for the words of a sibling resource module that
runs `from ._inputs import *`.

Every object handed out is the one a plain import defines, from the same module object `pulumi up` would get it
from (tests/tools/preview/test_lazy_packages.py holds that for every name the program uses). Used only by the
offline plan
(tools.preview.render); `pulumi up` imports the packages as they are.
"""

from __future__ import annotations

import builtins
import contextlib
import hashlib
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import marshal
import os
import re
import sys
import tempfile
import types
from collections.abc import Callable
from functools import cache
from pathlib import Path
from types import CodeType, ModuleType
from typing import Any

PACKAGES = (
    "pulumi_gcp.compute", "pulumi_gcp.container", "pulumi_gcp.storage", "pulumi_gcp.monitoring",
    "pulumi_gcp.projects", "pulumi_gcp.serviceaccount", "pulumi_gcp.organizations", "pulumi_gcp.artifactregistry",
    "pulumi_kubernetes.core.v1", "pulumi_kubernetes.apps.v1", "pulumi_kubernetes.batch.v1",
    "pulumi_kubernetes.storage.v1", "pulumi_kubernetes.resource.v1", "pulumi_kubernetes.meta.v1",
    "pulumi_kubernetes.networking.v1", "pulumi_kubernetes.policy.v1", "pulumi_kubernetes.rbac.v1",
    "pulumi_kubernetes.apiextensions.v1",
)
DATA_MODULES = ("_inputs", "outputs")
"""The modules of a package that define its nested types, loaded class by class."""


def _module_names(name: str) -> list[str]:
    """Submodules that may define `name`: ResourcePolicy -> resource_policy, get_zones_output -> get_zones (Google
    Cloud's snake_case modules); Pod, PodInitArgs -> Pod (Kubernetes' modules are named after their resource)."""
    if name.startswith("get_"):
        return [name.removesuffix("_output")]
    names = [name, name.removesuffix("InitArgs"), name.removesuffix("Args")]
    for snake in (re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower(),  # IAMMember
                  re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()):  # AlloyDB-style names written letter by letter
        names += [snake, snake.removesuffix("_args"), snake.removesuffix("_state"),
                  snake.removeprefix("get_").removesuffix("_result")]
    return names


def _resolve(module: ModuleType, name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    folder = Path(module.__spec__.submodule_search_locations[0])
    entries = _entries(str(folder))
    for candidate in dict.fromkeys([*_module_names(name), *DATA_MODULES, "_enums"]):
        if f"{candidate}.py" not in entries and (candidate not in entries
                                                 or not (folder / candidate / "__init__.py").is_file()):
            continue
        sub = importlib.import_module(f"{module.__name__}.{candidate}")
        if candidate == name and not hasattr(sub, name):  # a module asked for by its name (`outputs`)
            return sub
        if hasattr(sub, name):  # Kubernetes' `Pod` module defines class `Pod`: the class, as a star import binds
            value = getattr(sub, name)
            setattr(module, name, value)
            return value
    # Not placed by name: the package's real __init__, as a plain import would have run it.
    init = folder / "__init__.py"
    del module.__dict__["__getattr__"]
    exec(compile(init.read_text(), str(init), "exec"), module.__dict__)
    return getattr(module, name)


@cache
def _entries(folder: str) -> frozenset[str]:
    """A package folder's entries, listed once (a package has several hundred modules, each name asked for tries
    about ten)."""
    return frozenset(os.listdir(folder))


class _LazyInit(importlib.abc.Loader):
    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None

    def exec_module(self, module: ModuleType) -> None:
        module.__dict__["__getattr__"] = lambda name: _resolve(module, name)


ANCHORED_CLASS = re.compile(r"^((?:@[^\n]*\n)*)class (\w+)\b(?:\(([^()\n]*)\))?:", re.MULTILINE)
"""What a class statement of a generated module is; `_class_statements` finds the same matches faster
(tests/tools/preview/test_lazy_packages.py holds them equal over every data module the loader reads)."""
_CLASS_LINE = re.compile(r"\nclass (\w+)\b(?:\(([^()\n]*)\))?:")
"""A class statement at column 0 (after a newline: a pattern that starts with a literal is searched for with a fast
scan, about three times faster over these multi-megabyte modules than a `^` anchored one tried at every offset)."""


class _ClassMatch:
    """One class statement as the anchored pattern ANCHORED_CLASS matches it: group 1 the decorator lines right above
    it, 2 the name, 3 the bases (or None); `start()` the offset of its first decorator line, else of its own line."""

    __slots__ = ("_start", "_groups")

    def __init__(self, start: int, decorators: str, name: str, bases: str | None):
        self._start, self._groups = start, (decorators, name, bases)

    def start(self) -> int:
        return self._start

    def group(self, index: int) -> str | None:
        return self._groups[index - 1]


def _class_statements(text: str) -> list[_ClassMatch]:
    """Every class statement at column 0 with the decorator lines right above it, in source order."""
    padded = "\n" + text  # a statement on the first line follows a newline too
    found = []
    for match in _CLASS_LINE.finditer(padded):
        line = first = match.start() + 1  # the class line's offset in `padded`
        while first > 1:  # extend over the lines right above that start with "@"
            above = padded.rfind("\n", 0, first - 1) + 1
            if padded[above] != "@":
                break
            first = above
        found.append(_ClassMatch(first - 1, padded[first:line], match.group(1), match.group(2)))
    return found


_OTHER_TOP_LEVEL = re.compile(r"^(?!@|class )[^\s#]", re.MULTILINE)
_SIMPLE = re.compile(r"[\w.]+(?:\([^()\n]*\))?")
_WORD = re.compile(r"[A-Za-z_]\w*")
_QUOTED = re.compile(r"'([\w.]+)'")
_EXPRESSIONS: dict[str, Any] = {}


class _Classes:
    """A generated data module cut into its header and its classes: for each class its decorators, its bases and
    the class body's code object from the module's compiled code (so nothing is compiled again)."""

    def __init__(self, text: str, code: CodeType):
        self.text = text
        self.bodies = {c.co_name: c for c in code.co_consts if isinstance(c, CodeType)}
        self.matches = _class_statements(text)
        self.index = {m.group(2): i for i, m in enumerate(self.matches)}
        self.header_end = self.matches[0].start() if self.matches else len(text)
        self.header: CodeType | None = None

    @staticmethod
    def parse(text: str, code: CodeType) -> _Classes | None:
        """The classes, or None for a layout this loader does not know (loaded whole instead): the module's code
        must be its header followed by class statements only (every code object a class body of that name, every
        name the module level uses one the header, a class, a decorator or a base uses)."""
        classes = _Classes(text, code)
        if not classes.matches or classes.bodies.keys() != classes.index.keys():
            return None
        # Every decorator line is one a class statement's match holds (none continued over several lines).
        if text.count("\n@", classes.header_end - 1) != sum(m.group(1).count("\n") for m in classes.matches):
            return None
        classes.header = compile(text[:classes.header_end], code.co_filename, "exec", dont_inherit=True)
        known = set(classes.header.co_names) | classes.index.keys() | _decorator_and_base_names(classes)
        if not set(code.co_names) <= known:
            return None
        return classes

    def names_in(self, words: frozenset[str]) -> set[str]:
        """The module's classes among `words` (the identifiers of an importing module's source)."""
        return words & self.index.keys()

    def _span(self, name: str) -> tuple[int, int]:
        i = self.index[name]
        return self.matches[i].start(), self.matches[i + 1].start() if i + 1 < len(self.matches) else len(self.text)

    def named_by(self, name: str) -> set[str]:
        """The module's classes the class's annotations name (`'FooArgs'`, `'outputs.Foo'`)."""
        start, end = self._span(name)
        words = {w for quoted in _QUOTED.findall(self.text, start, end) for w in quoted.split(".")}
        return words & self.index.keys()

    def statement(self, name: str) -> _Statement:
        """The class statement's decorators and bases; for one this loader does not read (keyword bases, a
        decorator with nested calls, a body with free variables) its own lines of the source instead, at their
        line numbers."""
        match = self.matches[self.index[name]]
        decorators = tuple(line[1:].strip() for line in match.group(1).splitlines())
        bases = tuple(b.strip() for b in (match.group(3) or "").split(",") if b.strip())
        if self.bodies[name].co_freevars or not all(map(_SIMPLE.fullmatch, decorators + bases)):
            start, end = self._span(name)
            return decorators, bases, "\n" * self.text.count("\n", 0, start) + self.text[start:end]
        return decorators, bases, None

    def build(self, name: str, namespace: dict[str, Any]) -> Any:
        return _build(name, namespace, self.bodies[name], self.statement(name))


_Statement = tuple[tuple[str, ...], tuple[str, ...], "str | None"]
"""A class statement: its decorators, its bases, and its source when it is compiled from that instead."""


def _build(name: str, namespace: dict[str, Any], body: CodeType, statement: _Statement) -> Any:
    """What the module's `class` statement does: the body run by __build_class__, then the decorators (or the
    statement's own source compiled, for one this does not read)."""
    decorators, bases, source = statement
    if source is not None:
        exec(compile(source, body.co_filename, "exec", dont_inherit=True), namespace)
        return namespace[name]
    function = types.FunctionType(body, namespace, name)
    cls = builtins.__build_class__(function, name, *[_evaluate(b, namespace) for b in bases])
    for decorator in reversed(decorators):
        cls = _evaluate(decorator, namespace)(cls)
    return cls


def _decorator_and_base_names(classes: _Classes) -> set[str]:
    """Names the decorators and bases of the module's classes use (`pulumi`, `input_type`, `TypedDict`)."""
    texts = {m.group(1) + " " + (m.group(3) or "") for m in classes.matches}
    return set(_WORD.findall(" ".join(texts)))


def _evaluate(expression: str, namespace: dict[str, Any]) -> Any:
    expression = expression.strip()
    if expression not in _EXPRESSIONS:
        _EXPRESSIONS[expression] = compile(expression, "<lazy_packages>", "eval")
    return eval(_EXPRESSIONS[expression], namespace)


class _CachedClasses:
    """A data module's classes as its cache file holds them: what `_Classes` answers, each class's entry (its
    statement, the classes it names, its body) read and unmarshalled only when the class is defined. An entry that
    cannot be read back (a file changed in place under a reader) is taken from the module parsed again."""

    def __init__(self, header: CodeType, names: tuple[str, ...], offsets: tuple[int, ...],
                 read: Callable[[int, int], bytes], reparse: Callable[[], _Classes | None]):
        self.header = header
        self.index = {name: i for i, name in enumerate(names)}
        self.offsets, self.read, self.reparse = offsets, read, reparse
        self.entries: dict[str, _Entry] = {}
        self.parsed: _Classes | None = None

    def names_in(self, words: frozenset[str]) -> set[str]:
        return words & self.index.keys()

    def entry(self, name: str) -> _Entry:
        if name not in self.entries:
            self.entries[name] = self._read(name) or self._parse(name)
        return self.entries[name]

    def _read(self, name: str) -> _Entry | None:
        i = self.index[name]
        start, length = self.offsets[i], self.offsets[i + 1] - self.offsets[i]
        try:
            data = self.read(start, length)
            entry = marshal.loads(data) if len(data) == length else None
        except (OSError, ValueError, TypeError, EOFError):
            return None
        if not (type(entry) is tuple and len(entry) == 3 and isinstance(entry[2], CodeType)
                and entry[2].co_name == name):
            return None
        return entry

    def _parse(self, name: str) -> _Entry:
        if self.parsed is None:
            self.parsed = self.reparse()
            if self.parsed is None or self.parsed.index.keys() != self.index.keys():
                raise ImportError(f"{name}: the cache of its module and its source disagree (clear {cache_dir()})")
        return _entry(self.parsed, name)

    def named_by(self, name: str) -> set[str]:
        return set(self.entry(name)[1])

    def build(self, name: str, namespace: dict[str, Any]) -> Any:
        statement, _, body = self.entry(name)
        return _build(name, namespace, body, statement)


_Entry = tuple[_Statement, tuple[str, ...], CodeType]
"""A class's entry in a cache file: its statement, the module's classes it names, its body."""


def _entry(classes: _Classes, name: str) -> _Entry:
    return classes.statement(name), tuple(sorted(classes.named_by(name))), classes.bodies[name]


CACHE_ENV = "KIMI_PLAN_CACHE_DIR"
"""The parse cache's folder, if not build/cache/lazy-packages/ of this checkout; set but empty: no cache."""
_CACHE_MAGIC = b"kimi lazy_packages cache\n"
_LENGTH = 8
"""Bytes of the header record's length, before the header record and the class entries of a data module's file."""


def cache_dir() -> Path | None:
    value = os.environ.get(CACHE_ENV)
    if not _loader_version():
        return None
    if value is None:
        return _DEFAULT_CACHE
    return Path(value) if value else None


_DEFAULT_CACHE = Path(__file__).resolve().parents[2] / "build" / "cache" / "lazy-packages"


@cache
def _loader_version() -> str:
    """This loader's own source: a cache written by another version of it is never read ("" where the source
    cannot be read: no cache)."""
    try:
        return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()
    except OSError:
        return ""


def _cache_key(*paths: str) -> str:
    """The files' identities (path, size, mtime_ns; None for one that is missing), the bytecode magic number and the
    loader's version."""
    identities = []
    for path in paths:
        try:
            stat = os.stat(path)
        except OSError:
            identities.append((path, None))
        else:
            identities.append((path, stat.st_size, stat.st_mtime_ns))
    return hashlib.sha256(repr((_loader_version(), importlib.util.MAGIC_NUMBER, identities)).encode()).hexdigest()


def _cache_file(folder: Path, stem: str, key: str) -> Path:
    return folder / f"{stem}-{key[:32]}.bin"


def _cache_read(stem: str, key: str) -> memoryview | None:
    """The payload of a cache file written under `key`; None if there is none (or none readable, or another key's:
    the first line after the magic names the full key)."""
    folder = cache_dir()
    if folder is None:
        return None
    try:
        data = _cache_file(folder, stem, key).read_bytes()
    except OSError:
        return None
    head = _CACHE_MAGIC + key.encode() + b"\n"
    return memoryview(data)[len(head):] if data.startswith(head) else None


def _cache_write(stem: str, key: str, payload: bytes) -> None:
    """Replace the cache file in one step (a reader sees the old file or the new one, whole); the stem's files of
    other keys are removed. Nothing happens where the folder cannot be written."""
    folder = cache_dir()
    if folder is None:
        return
    target = _cache_file(folder, stem, key)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{stem}-", suffix=".tmp", dir=folder)
    except OSError:
        return
    try:
        with os.fdopen(fd, "wb") as file:
            os.fchmod(file.fileno(), 0o644)
            file.write(_CACHE_MAGIC + key.encode() + b"\n")
            file.write(payload)
        os.replace(tmp, target)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        return
    for old in folder.glob(f"{stem}-*.bin"):
        if old != target:
            with contextlib.suppress(OSError):
                old.unlink()


def _encode(classes: _Classes | None) -> bytes:
    """A data module's cache payload: the header record's length, the header record (the header's code, the class
    names, the offsets of their entries) and each class's entry marshalled on its own; for a module loaded whole, a
    record saying so."""
    if classes is None:
        record = marshal.dumps(None)
        return len(record).to_bytes(_LENGTH, "little") + record
    names = tuple(classes.index)
    entries = [marshal.dumps(_entry(classes, name)) for name in names]
    offsets = [0]
    for entry in entries:
        offsets.append(offsets[-1] + len(entry))
    record = marshal.dumps((classes.header, names, tuple(offsets)))
    return len(record).to_bytes(_LENGTH, "little") + record + b"".join(entries)


_WHOLE = object()
"""A cache's answer for a module this loader loads whole."""


def _decode(read: Callable[[int, int], bytes], size: int,
            reparse: Callable[[], _Classes | None]) -> _CachedClasses | object | None:
    """The classes of a payload of `size` bytes that `read(offset, length)` reads, _WHOLE for a module loaded whole,
    None for one that is not what `_encode` writes. Only the header record is read here."""
    try:
        length = int.from_bytes(read(0, _LENGTH), "little")
        if size < _LENGTH + length:
            return None
        data = read(_LENGTH, length)
        record = marshal.loads(data) if len(data) == length else ()
        if record is None and size == _LENGTH + length:
            return _WHOLE
        header, names, offsets = record
        if not (isinstance(header, CodeType) and type(names) is tuple and type(offsets) is tuple
                and len(names) == len(offsets) - 1 and offsets[0] == 0 and offsets[-1] == size - _LENGTH - length):
            return None
    except (OSError, ValueError, TypeError, EOFError):
        return None
    base = _LENGTH + length
    return _CachedClasses(header, names, offsets, lambda offset, n: read(base + offset, n), reparse)


def _decode_bytes(payload: bytes, reparse: Callable[[], _Classes | None] = lambda: None) -> Any:
    """`_decode` of a payload in memory."""
    return _decode(lambda offset, n: payload[offset:offset + n], len(payload), reparse)


def _open_classes(stem: str, key: str, reparse: Callable[[], _Classes | None]) -> _CachedClasses | object | None:
    """`_decode` of a data module's cache file, kept open for the entries read later (a file replaced meanwhile
    stays readable through it)."""
    folder = cache_dir()
    if folder is None:
        return None
    try:
        fd = os.open(_cache_file(folder, stem, key), os.O_RDONLY)
    except OSError:
        return None
    head = _CACHE_MAGIC + key.encode() + b"\n"
    try:
        size = os.fstat(fd).st_size - len(head)
        found = os.pread(fd, len(head), 0) == head and _decode(
            lambda offset, n: os.pread(fd, n, len(head) + offset), size, reparse)
    except OSError:
        found = None
    if not isinstance(found, _CachedClasses):
        os.close(fd)
    return found or None


def _words(path: str) -> frozenset[str]:
    """The identifiers of a module's source (through the cache, keyed like a data module's)."""
    stem, key = "words-" + hashlib.sha256(path.encode()).hexdigest()[:16], _cache_key(path)
    payload = _cache_read(stem, key)
    if payload is not None:
        try:
            words = marshal.loads(payload)
        except (ValueError, TypeError, EOFError):
            words = None
        if type(words) is frozenset:
            return words
    words = frozenset(_WORD.findall(Path(path).read_text(encoding="utf-8")))
    _cache_write(stem, key, marshal.dumps(words))
    return words


class _StarNames(list):
    """A data module's `__all__`: the full list, except that `from <module> import *` run by a sibling resource
    module (`import *` reads `__all__[0]`, `__all__[1]`, ... until IndexError) gets only the names that module's
    source mentions, each defined on first access."""

    def __init__(self, names: list[str], module: ModuleType, classes: _Classes | _CachedClasses):
        super().__init__(names)
        self.module = module
        self.classes = classes
        self.subsets: dict[str, list[str]] = {}

    def __getitem__(self, index: Any) -> Any:
        importer = sys._getframe(1).f_globals
        package = self.module.__name__.rpartition(".")[0]
        name, file = importer.get("__name__", ""), importer.get("__file__")
        if not isinstance(index, int) or name.rpartition(".")[0] != package or not file:
            return super().__getitem__(index)
        if name not in self.subsets:
            mentioned = self.classes.names_in(_words(file))
            self.subsets[name] = [n for n in list.__iter__(self) if n in mentioned]
        return self.subsets[name][index]


def _define(module: ModuleType, classes: _Classes | _CachedClasses, name: str) -> Any:
    """Define class `name` in its module and every class of the module its annotations name (transitively)."""
    namespace = module.__dict__
    pending = [name]
    while pending:
        wanted = pending.pop()
        if wanted in namespace:
            continue
        try:
            namespace[wanted] = classes.build(wanted, namespace)
        except NameError as err:  # a class its statement uses at definition time: define that one first
            if err.name not in classes.index or err.name in namespace:
                raise
            pending += [wanted, err.name]
            continue
        pending += [n for n in classes.named_by(wanted) if n not in namespace]
    return namespace[name]


class _LazyClasses(importlib.machinery.SourceFileLoader):
    def exec_module(self, module: ModuleType) -> None:
        classes = self._classes(module.__name__)
        if classes is None:
            exec(self.get_code(module.__name__), module.__dict__)
            return
        namespace = module.__dict__
        exec(classes.header, namespace)
        namespace["__all__"] = _StarNames(list(namespace.get("__all__", classes.index)), module, classes)

        def lookup(name: str) -> Any:
            if name not in classes.index:
                raise AttributeError(f"module {module.__name__!r} has no attribute {name!r}")
            return _define(module, classes, name)

        namespace["__getattr__"] = lookup

    def _classes(self, fullname: str) -> _Classes | _CachedClasses | None:
        """The module's classes from the cache, else parsed from its source and compiled code (and cached); None
        for a module loaded whole."""
        key = _cache_key(self.path, importlib.util.cache_from_source(self.path))
        cached = _open_classes(fullname, key, lambda: self._parse(fullname))
        if cached is not None:
            return None if cached is _WHOLE else cached  # type: ignore[return-value]
        classes = self._parse(fullname)
        if cache_dir() is not None:
            # Keyed again: the parse (get_code) may just have written the compiled file the key names.
            _cache_write(fullname, _cache_key(self.path, importlib.util.cache_from_source(self.path)), _encode(classes))
        return classes

    def _parse(self, fullname: str) -> _Classes | None:
        return _Classes.parse(Path(self.path).read_text(encoding="utf-8"), self.get_code(fullname))


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        package, _, last = fullname.rpartition(".")
        if fullname not in PACKAGES and not (package in PACKAGES and last in DATA_MODULES):
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or not isinstance(spec.loader, importlib.machinery.SourceFileLoader):
            return None
        if fullname in PACKAGES:
            if not spec.submodule_search_locations:
                return None
            spec.loader = _LazyInit()
        else:
            spec.loader = _LazyClasses(fullname, spec.origin)
        return spec


@cache
def _program_text(root: Path) -> str:
    return "\n".join(p.read_text() for folder in ("components", "stacks")
                     for p in sorted((root / folder).rglob("*.py")))


def program_names(root: Path) -> list[tuple[str, str]]:
    """(package, name) for each `gcp.<package>.X` / `k8s.<group>.<version>.X` of a lazy package the program at
    `root` names: what a render will look up, so a parent process can place them before it forks its renderers."""
    text = _program_text(root)
    found = {(f"pulumi_gcp.{m[1]}", m[2]) for m in re.finditer(r"\bgcp\.(\w+)\.(\w+)", text)}
    found |= {(f"pulumi_kubernetes.{m[1]}.{m[2]}", m[3]) for m in re.finditer(r"\bk8s\.(\w+)\.(v\w+)\.(\w+)", text)}
    return sorted((package, name) for package, name in found if package in PACKAGES)


def install() -> None:
    """Before the packages are first imported (a no-op for one already loaded, or when installed already)."""
    if not any(isinstance(finder, _Finder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
