"""One stack's render (`tools.preview.render.run`) with the GPU model server's image record swapped for one that
publishes linux/amd64 only (inference-perf's), for tests/tools/preview/test_scheduling.py: a request to the
session's plan
process (tests/plan_server.py), so the render forks from the preloaded providers as `make plan`'s do.

    main([STACK_FILE]) -> the render's exit code; its one error line on stderr"""

from __future__ import annotations

import dataclasses
from pathlib import Path


def main(args: list[str]) -> int:
    from components.plan import images
    from tools.preview import render

    images.IMAGES["vllm"] = dataclasses.replace(images.IMAGES["inference-perf"], config_key="vllmDigest")
    return render.run(Path(args[0]))
