#!/usr/bin/env bash
# Runs the walkthroughs of the README and of docs/ as written, so they cannot
# drift from the code. Every ```sh block preceded by the line
# `<!-- readme-check -->` is run, as one bash script under
# `set -euo pipefail`, as a new user would run them one after another: the
# README's blocks first, then those of the pages in $pages below, in that
# fixed order (each page's in its own order). A page of docs/ with marked
# blocks that is not in $pages fails the check.
#
#   - in a copy of this checkout, with .git, so `git` examples work; the
#     walkthroughs write only into a scratch directory of their own (the
#     README's embedding walkthrough makes it with mktemp -d; $TMPDIR is
#     the check's own): the copy's `git status` must be the same after them
#     as before, and no /tmp/hello.txt may appear;
#   - with a fresh HOME, so the default database
#     (~/.local/state/toolgate/toolgate.db), the audit key and the config
#     directory start empty; TOOLGATE_* variables are cleared;
#   - with a fresh GOPATH, so the README's `go install` puts toolgate in a
#     bin directory of its own (the module and build caches are kept);
#   - the block's own commands decide what succeeds: a command a walkthrough
#     expects to fail says so in the block (`|| echo ...`), as a reader
#     would see it.
#
# Any command that fails stops the check with the block's file and line.
#
#   scripts/readme-check.sh            # run every marked block
#   scripts/readme-check.sh --print    # print the script it would run
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# The pages whose walkthroughs run after the README's, in this order: each
# goes on from the state the ones before it left (the installed toolgate,
# the scratch directory, its files and database).
pages=(README.md docs/cli.md docs/policy.md docs/registry.md docs/approvals.md docs/http.md docs/oauth.md docs/mcp.md docs/audit.md)

# extract writes the marked blocks as one script. Each block starts with a
# comment naming its file and line, and the command that runs is
# echoed (set -x) so a failure shows which one it was.
extract() {
  local page out=
  for page in "${pages[@]}"; do
    out+=$(awk -v file="$page" '
      /^<!-- readme-check -->$/ { marked = 1; next }
      marked && /^```sh$/ { inblock = 1; marked = 0; printf "\n# --- %s:%d\n", file, NR + 1; next }
      inblock && /^```$/ { inblock = 0; next }
      inblock { print; next }
      { marked = 0 }
    ' "$root/$page")
    out+=$'\n'
  done
  if ! grep -q '^# --- ' <<<"$out"; then echo "no block is marked <!-- readme-check -->" >&2; return 1; fi
  for page in "$root"/docs/*.md; do
    page=docs/${page##*/}
    if grep -qx '<!-- readme-check -->' "$root/$page" && ! printf '%s\n' "${pages[@]}" | grep -qx "$page"; then
      echo "readme-check: $page has marked walkthroughs but is not in the pages this script runs: add it to pages" >&2
      return 1
    fi
  done
  printf '%s\n' "$out"
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

mkdir -p "$tmp/home" "$tmp/gopath" "$tmp/tmpdir"
cp -a "$root/." "$tmp/repo"
extract >"$tmp/walkthrough.sh"
before=$(git -C "$tmp/repo" status --porcelain 2>/dev/null || true)
hello_before=$(stat -c %Y /tmp/hello.txt 2>/dev/null || echo none)

gocache=$(go env GOCACHE)
gomodcache=$(go env GOMODCACHE)
echo "== the walkthroughs of ${pages[*]} ($(grep -c '^# --- ' "$tmp/walkthrough.sh") blocks), in a copy of the checkout"
set +e
(
  cd "$tmp/repo"
  # A fresh user: nothing of the caller's toolgate state or configuration.
  for v in $(env | sed -n 's/^\(TOOLGATE_[A-Z_]*\)=.*/\1/p'); do unset "$v"; done
  unset GOBIN XDG_STATE_HOME XDG_CONFIG_HOME XDG_DATA_HOME OTEL_EXPORTER_OTLP_ENDPOINT OTEL_EXPORTER_OTLP_TRACES_ENDPOINT
  export HOME="$tmp/home" GOPATH="$tmp/gopath" GOCACHE="$gocache" GOMODCACHE="$gomodcache" TMPDIR="$tmp/tmpdir"
  export USER="${USER:-readme}"
  exec setsid bash -euo pipefail -x "$tmp/walkthrough.sh"
) &
script_pid=$!
wait "$script_pid"
rc=$?
set -e
if [ "$rc" -ne 0 ]; then
  echo "readme-check: a walkthrough failed (exit $rc); the last command above is the one, and the '# --- FILE:N' line above it names its block" >&2
  exit "$rc"
fi
script_pid=
after=$(git -C "$tmp/repo" status --porcelain 2>/dev/null || true)
if [ "$before" != "$after" ]; then
  echo "readme-check: the walkthroughs wrote into the checkout (git status changed):" >&2
  diff <(printf '%s\n' "$before") <(printf '%s\n' "$after") >&2 || true
  exit 1
fi
if [ "$(stat -c %Y /tmp/hello.txt 2>/dev/null || echo none)" != "$hello_before" ]; then
  echo "readme-check: a walkthrough wrote /tmp/hello.txt, outside its own directory" >&2
  exit 1
fi
echo "readme-check: ok"
