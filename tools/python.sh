#!/usr/bin/env bash
# Prints a Python >= 3.12 found on PATH or installed by pyenv (3.12 first), or nothing. Every inference-perf
# release needs >= 3.12; `make` builds the inference-perf virtualenv (.venv-inference-perf) with it.
set -u
recent() { "$1" -c 'import sys; sys.exit(sys.version_info < (3, 12))' >/dev/null 2>&1; }
for cmd in python3.12 python3.13 python3.14 python3; do
  # pyenv puts shims for every installed version on PATH; a shim of an inactive version fails to run.
  if command -v "$cmd" >/dev/null && recent "$cmd"; then command -v "$cmd"; exit 0; fi
done
# pyenv's versions folder, also where the pyenv command itself is not on PATH.
root=$(pyenv root 2>/dev/null || echo "${PYENV_ROOT:-$HOME/.pyenv}")
for version in $(ls "$root/versions" 2>/dev/null | grep -E '^3\.1[2-9](\.[0-9]+)?$' | sort -t. -k2,2n -k3,3nr); do
  candidate="$root/versions/$version/bin/python3"
  if recent "$candidate"; then echo "$candidate"; exit 0; fi
done
