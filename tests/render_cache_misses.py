"""One stack's render (`tools.preview.render.run`) that reports, as its last stderr line (JSON), every class whose
property types pulumi resolved during the render rather than finding them in its per-class cache: a request to the
session's plan process (tests/plan_server.py), whose preload (`tools.preview.render.preload`) is what should have
resolved them, as it does for `make plan`'s and the variants' forked renders
(tests/tools/preview/test_lazy_packages.py).

    main([STACK_FILE]) -> the render's exit code"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(args: list[str]) -> int:
    import pulumi._types as types

    from tools.preview import render

    cached = types._types_from_py_properties
    fresh: list[str] = []

    def counted(cls: type) -> dict[str, type]:
        misses = cached.cache_info().misses
        result = cached(cls)
        if cached.cache_info().misses > misses:
            fresh.append(f"{cls.__module__}.{cls.__qualname__}")
        return result

    types._types_from_py_properties = counted
    try:
        code = render.run(Path(args[0]))
    finally:
        types._types_from_py_properties = cached
    print(json.dumps(sorted(fresh)), file=sys.stderr)
    return code
