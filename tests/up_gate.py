"""The program as `pulumi up` runs it (tools.preview.render with as_up, the mock engine with preview off), for
tests/checks/test_preflight.py: a request to the session's plan process (tests/plan_server.py), so the program
runs in a child forked from the preloaded providers, with the request's environment only.

    main([STACK_FILE]) -> the program's exit code; prints the names of the node pools it registered"""

from __future__ import annotations

from pathlib import Path


def main(args: list[str]) -> int:
    from tools.preview import render

    document = render.render(Path(args[0]), as_up=True)  # a failed gate exits here (SystemExit, its message)
    pools = [r["name"] for r in document["resources"] if r["type"] == "gcp:container/nodePool:NodePool"]
    print(" ".join(pools))
    return 0
