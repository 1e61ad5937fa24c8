#!/usr/bin/env bash
# Runs the README's walkthroughs as written, so they cannot drift from the
# code. Every ```sh block preceded by the line `<!-- readme-check -->` is
# run, in README order, as one bash script under `set -euo pipefail`, as a
# new user would run them one after another:
#
#   - in a copy of this checkout (the walkthroughs create files in the
#     current directory), with .git, so `git` examples work;
#   - with a fresh HOME, so the default database
#     (~/.local/state/toolgate/toolgate.db), the audit key and the config
#     directory start empty; TOOLGATE_* variables are cleared;
#   - with a fresh GOPATH, so the README's `go install` puts toolgate in a
#     bin directory of its own (the module and build caches are kept: no
#     downloads);
#   - the block's own commands decide what succeeds: a command a walkthrough
#     expects to fail says so in the block (`|| echo ...`), as a reader
#     would see it.
#
# Any command that fails stops the check with the block's line in the README.
#
#   scripts/readme-check.sh            # run every marked block
#   scripts/readme-check.sh --print    # print the script it would run
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
readme="$root/README.md"

# extract writes the marked blocks as one script. Each block starts with a
# comment naming its line in the README, and the command that runs is
# echoed (set -x) so a failure shows which one it was.
extract() {
  awk -v file="README.md" '
    /^<!-- readme-check -->$/ { marked = 1; next }
    marked && /^```sh$/ { inblock = 1; marked = 0; printf "\n# --- %s:%d\n", file, NR + 1; next }
    inblock && /^```$/ { inblock = 0; blocks++; next }
    inblock { print; next }
    { marked = 0 }
    END { if (blocks == 0) { print "no block is marked <!-- readme-check -->" > "/dev/stderr"; exit 1 } }
  ' "$readme"
}

if [ "${1:-}" = "--print" ]; then
  extract
  exit 0
fi

tmp=$(mktemp -d)
pids=()
cleanup() {
  # A walkthrough that failed may leave a server running: stop what the
  # script started (its process group), then remove everything.
  if [ -n "${script_pid:-}" ]; then kill -TERM -- "-$script_pid" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT

mkdir -p "$tmp/home" "$tmp/gopath"
cp -a "$root/." "$tmp/repo"
extract >"$tmp/walkthrough.sh"

gocache=$(go env GOCACHE)
gomodcache=$(go env GOMODCACHE)
echo "== the README's walkthroughs ($(grep -c '^# --- README.md:' "$tmp/walkthrough.sh") blocks), in a copy of the checkout"
set +e
(
  cd "$tmp/repo"
  # A fresh user: nothing of the caller's toolgate state or configuration.
  for v in $(env | sed -n 's/^\(TOOLGATE_[A-Z_]*\)=.*/\1/p'); do unset "$v"; done
  unset GOBIN XDG_STATE_HOME XDG_CONFIG_HOME XDG_DATA_HOME OTEL_EXPORTER_OTLP_ENDPOINT OTEL_EXPORTER_OTLP_TRACES_ENDPOINT
  export HOME="$tmp/home" GOPATH="$tmp/gopath" GOCACHE="$gocache" GOMODCACHE="$gomodcache"
  export USER="${USER:-readme}"
  exec setsid bash -euo pipefail -x "$tmp/walkthrough.sh"
) &
script_pid=$!
wait "$script_pid"
rc=$?
set -e
if [ "$rc" -ne 0 ]; then
  echo "readme-check: a walkthrough failed (exit $rc); the last command above is the one, and the '# --- README.md:N' line above it names its block" >&2
  exit "$rc"
fi
script_pid=
echo "readme-check: ok"
