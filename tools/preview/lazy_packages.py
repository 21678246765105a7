"""Load the two largest provider packages the program uses a handful of classes from one module at a time.

`pulumi_gcp.compute` and `pulumi_gcp.container` import every resource module of theirs in `__init__` (about
300 and 40 modules, with their typed annotations evaluated at import): a third of an offline plan's import
time for the eight classes and ~40 input types the program uses. Here the package's `__init__` is replaced by
a module-level `__getattr__` (PEP 562) that imports the one module defining a name when it is first asked
for, the same module object `pulumi up` would get the class from. A name it cannot place runs the package's
real `__init__` and is looked up again, so nothing is ever missing, only loaded later. Used only by the
offline plan (tools.preview.render); `pulumi up` imports the packages as they are.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

PACKAGES = ("pulumi_gcp.compute", "pulumi_gcp.container")


def _module_names(name: str) -> list[str]:
    """Submodules that may define `name`: ResourcePolicy -> resource_policy, get_zones_output -> get_zones."""
    if name.startswith("get_"):
        return [name.removesuffix("_output")]
    snake = re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()
    return [snake, snake.removesuffix("_args"), snake.removesuffix("_state"),
            snake.removeprefix("get_").removesuffix("_result")]


def _resolve(module: ModuleType, name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    folder = Path(module.__spec__.submodule_search_locations[0])
    for candidate in [*_module_names(name), "_inputs", "outputs"]:
        if not (folder / f"{candidate}.py").is_file() and not (folder / candidate / "__init__.py").is_file():
            continue
        sub = importlib.import_module(f"{module.__name__}.{candidate}")
        if candidate == name:
            return sub
        if hasattr(sub, name):
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


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in PACKAGES:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or not spec.submodule_search_locations:
            return None
        spec.loader = _LazyInit()
        return spec


def program_names(root: Path) -> list[tuple[str, str]]:
    """(package, name) for each `gcp.compute.X` / `gcp.container.X` the program at `root` names: what a render
    will look up, so a parent process can place them before it forks its renderers."""
    text = "\n".join(p.read_text() for folder in ("components", "stacks") for p in sorted((root / folder).glob("*.py")))
    return sorted({(f"pulumi_gcp.{m[1]}", m[2]) for m in re.finditer(r"\bgcp\.(compute|container)\.(\w+)", text)})


def install() -> None:
    """Before the packages are first imported (a no-op for one already loaded, or when installed already)."""
    if not any(isinstance(finder, _Finder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
