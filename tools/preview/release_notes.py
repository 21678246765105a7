"""Print a release's notes from CHANGELOG.md, after checking the tag is the version pyproject.toml declares.

    python -m tools release-notes v0.1.0

The release workflow (.github/workflows/release.yml) runs it on every pushed `v*` tag and publishes what it prints
as the GitHub release's notes, so a tag that is not the checkout's version, or a version without its CHANGELOG
section, publishes nothing (exit 1, one line saying which). Standard library only.
"""

from __future__ import annotations

import argparse
import re
import sys
import tomllib
from pathlib import Path

from tools import prog

ROOT = Path(__file__).resolve().parents[2]


def notes(changelog: str, version: str) -> str | None:
    """The body of `## [version]` in a Keep a Changelog file, without its heading, or None."""
    match = re.search(rf"^## \[{re.escape(version)}\][^\n]*\n(.*?)(?=^## \[|\Z)", changelog, re.M | re.S)
    return match.group(1).strip() + "\n" if match and match.group(1).strip() else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=prog("release-notes"), description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("tag", help="the pushed tag, v<version>")
    args = parser.parse_args(argv)
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    if args.tag != f"v{version}":
        print(f"{prog('release-notes')}: tag {args.tag[:80]!r} is not pyproject.toml's version (tag it v{version})",
              file=sys.stderr)
        return 1
    body = notes((ROOT / "CHANGELOG.md").read_text(), version)
    if body is None:
        print(f"{prog('release-notes')}: CHANGELOG.md has no notes under '## [{version}]'", file=sys.stderr)
        return 1
    sys.stdout.write(body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
