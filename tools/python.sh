#!/usr/bin/env bash
# Prints a CPython found on PATH or installed by pyenv that fits the argument, or nothing:
#   tools/python.sh 3.12+   the oldest of 3.12 and newer (every inference-perf release needs >= 3.12)
#   tools/python.sh 3.11    exactly 3.11 (the engine tiers' locks pin torch's cp311 CPU wheel)
set -u
want="${1:-3.12+}"
minor="${want#3.}"; minor="${minor%+}"
if [ "${want%+}" != "$want" ]; then
  fits() { "$1" -c "import sys; sys.exit(not (sys.version_info[:2] >= (3, $minor)))" >/dev/null 2>&1; }
  names="python3.$minor python3.$((minor + 1)) python3.$((minor + 2)) python3"
else
  fits() { "$1" -c "import sys; sys.exit(sys.version_info[:2] != (3, $minor))" >/dev/null 2>&1; }
  names="python3.$minor python3"
fi
for cmd in $names; do
  # pyenv puts shims for every installed version on PATH; a shim of an inactive version fails to run.
  if command -v "$cmd" >/dev/null && fits "$cmd"; then command -v "$cmd"; exit 0; fi
done
# pyenv's versions folder, also where the pyenv command itself is not on PATH.
root=$(pyenv root 2>/dev/null || echo "${PYENV_ROOT:-$HOME/.pyenv}")
for version in $(ls "$root/versions" 2>/dev/null | grep -E '^3\.[0-9]+(\.[0-9]+)?$' | sort -t. -k2,2n -k3,3nr); do
  candidate="$root/versions/$version/bin/python3"
  if fits "$candidate"; then echo "$candidate"; exit 0; fi
done
