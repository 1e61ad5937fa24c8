#!/usr/bin/env bash
# End-to-end check of `toolgate mcp` over stdio with the official MCP Go
# SDK's client: builds toolgate, then TestE2E_ToolgateMCP starts
# `toolgate mcp` as a child process, lists its tools, reads a file through
# file.read, and checks that the call left the same record and audit events
# as the same call through `toolgate run` (but for the call id, which names
# the MCP request), and that `toolgate audit verify` passes on both
# databases. Needs only Go.
#
#   scripts/e2e-mcp.sh
set -euo pipefail
cd "$(dirname "$0")/.."

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "== build toolgate"
go build -o "$tmp/toolgate" ./cmd/toolgate

echo "== toolgate mcp over stdio, with the SDK's client"
TOOLGATE_BIN="$tmp/toolgate" go test -count=1 -run '^TestE2E_ToolgateMCP$' -v ./mcp >"$tmp/out" 2>&1 || {
	cat "$tmp/out"
	echo "e2e-mcp: FAILED" >&2
	exit 1
}
grep -E '^(=== RUN|--- |PASS|FAIL|ok)' "$tmp/out" || true
# A test that was renamed or skipped matches nothing and passes: require it.
if ! grep -q -- '^--- PASS: TestE2E_ToolgateMCP ' "$tmp/out"; then
	cat "$tmp/out"
	echo "e2e-mcp: TestE2E_ToolgateMCP did not run and pass (renamed, or skipped?)" >&2
	exit 1
fi
echo "e2e-mcp: ok"
