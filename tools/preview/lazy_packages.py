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

Every object handed out is the one a plain import defines, from the same module object `pulumi up` would get it
from (tests/test_lazy_packages.py holds that for every name the program uses). Used only by the offline plan
(tools.preview.render); `pulumi up` imports the packages as they are.
"""

from __future__ import annotations

import builtins
import importlib
import importlib.abc
import importlib.machinery
import re
import sys
import types
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
    for candidate in dict.fromkeys([*_module_names(name), *DATA_MODULES, "_enums"]):
        if not (folder / f"{candidate}.py").is_file() and not (folder / candidate / "__init__.py").is_file():
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


class _LazyInit(importlib.abc.Loader):
    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None

    def exec_module(self, module: ModuleType) -> None:
        module.__dict__["__getattr__"] = lambda name: _resolve(module, name)


ANCHORED_CLASS = re.compile(r"^((?:@[^\n]*\n)*)class (\w+)\b(?:\(([^()\n]*)\))?:", re.MULTILINE)
"""What a class statement of a generated module is; `_class_statements` finds the same matches faster
(tests/test_lazy_packages.py holds them equal over every data module the loader reads)."""
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

    def names_in(self, text: str) -> set[str]:
        return set(_WORD.findall(text)) & self.index.keys()

    def _span(self, name: str) -> tuple[int, int]:
        i = self.index[name]
        return self.matches[i].start(), self.matches[i + 1].start() if i + 1 < len(self.matches) else len(self.text)

    def named_by(self, name: str) -> set[str]:
        """The module's classes the class's annotations name (`'FooArgs'`, `'outputs.Foo'`)."""
        start, end = self._span(name)
        words = {w for quoted in _QUOTED.findall(self.text, start, end) for w in quoted.split(".")}
        return words & self.index.keys()

    def build(self, name: str, namespace: dict[str, Any]) -> Any:
        """What the module's `class` statement does: the body run by __build_class__, then the decorators; a
        statement this does not read (keyword bases, a decorator with nested calls) is compiled
        from its own lines of the source instead."""
        match = self.matches[self.index[name]]
        decorators = [line[1:].strip() for line in match.group(1).splitlines()]
        bases = [b.strip() for b in (match.group(3) or "").split(",") if b.strip()]
        if self.bodies[name].co_freevars or not all(map(_SIMPLE.fullmatch, decorators + bases)):
            start, end = self._span(name)
            source = "\n" * self.text.count("\n", 0, start) + self.text[start:end]
            exec(compile(source, self.bodies[name].co_filename, "exec", dont_inherit=True), namespace)
            return namespace[name]
        body = types.FunctionType(self.bodies[name], namespace, name)
        cls = builtins.__build_class__(body, name, *[_evaluate(b, namespace) for b in bases])
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


class _StarNames(list):
    """A data module's `__all__`: the full list, except that `from <module> import *` run by a sibling resource
    module (`import *` reads `__all__[0]`, `__all__[1]`, ... until IndexError) gets only the names that module's
    source mentions, each defined on first access."""

    def __init__(self, names: list[str], module: ModuleType, classes: _Classes):
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
            mentioned = self.classes.names_in(Path(file).read_text(encoding="utf-8"))
            self.subsets[name] = [n for n in list.__iter__(self) if n in mentioned]
        return self.subsets[name][index]


def _define(module: ModuleType, classes: _Classes, name: str) -> Any:
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
        code = self.get_code(module.__name__)
        classes = _Classes.parse(Path(self.path).read_text(encoding="utf-8"), code)
        if classes is None:
            exec(code, module.__dict__)
            return
        namespace = module.__dict__
        exec(classes.header, namespace)
        namespace["__all__"] = _StarNames(list(namespace.get("__all__", classes.index)), module, classes)

        def lookup(name: str) -> Any:
            if name not in classes.index:
                raise AttributeError(f"module {module.__name__!r} has no attribute {name!r}")
            return _define(module, classes, name)

        namespace["__getattr__"] = lookup


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
    return "\n".join(p.read_text() for folder in ("components", "stacks") for p in sorted((root / folder).glob("*.py")))


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
