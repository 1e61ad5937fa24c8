#!/usr/bin/env bash
# Interop with a client this project did not write: the MCP TypeScript SDK
# (@modelcontextprotocol/sdk, the exact version pinned in
# scripts/interop/ts-client/package-lock.json, installed with npm ci into
# that directory's git-ignored node_modules) drives `toolgate mcp` over stdio
# and over streamable HTTP (`toolgate mcp --http`): tools/list, a granted
# call, a denied call, a schema violation, an unknown tool, and a call that
# needs approval, approved out of band (`toolgate intent approve`, through
# the server's local socket), executed once through toolgate.execute_intent,
# then replayed without running again. scripts/interop/ts-client/client.mjs
# asserts each outcome and prints what each flow returned; then
# `toolgate audit verify` passes on both databases.
#
# Needs Go, Node 18 or later and npm (.ci/run installs Debian's nodejs and
# npm when they are missing).
#
#   scripts/interop-ts.sh
#   TOOLGATE_BIN=/path/to/toolgate scripts/interop-ts.sh   # another build
set -euo pipefail
cd "$(dirname "$0")/.."
client=scripts/interop/ts-client

for cmd in node npm; do
	command -v "$cmd" >/dev/null || { echo "interop-ts: $cmd is not installed (Debian: apt-get install nodejs npm)" >&2; exit 1; }
done

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "== npm ci ($client, node $(node --version), npm $(npm --version))"
(cd "$client" && npm ci --no-audit --no-fund --loglevel=error)

bin=${TOOLGATE_BIN:-}
if [ -z "$bin" ]; then
	echo "== build toolgate"
	go build -o "$tmp/toolgate" ./cmd/toolgate
	bin=$tmp/toolgate
fi

work=$tmp/work
mkdir -p "$work/data"
printf 'hello from interop\n' >"$work/data/hello.txt"
cat >"$work/registry.yaml" <<'YAML'
tools:
  - id: interop.echo
    version: 1.0.0
    description: Echoes a message; runs only as an approved intent
    command: echo
    argv: ["{msg}"]
    input_schema:
      $schema: https://json-schema.org/draft/2020-12/schema
      type: object
      properties:
        msg:
          type: string
          description: The message to echo
          maxLength: 200
          pattern: "^[^-]"
      required: [msg]
      additionalProperties: false
    limits: {max_execution_time: 10s}
    requires_approval: true
YAML
token=$(head -c 24 /dev/urandom | base64 | tr -d '/+=')
printf '{"tokens": [{"principal": "interop-agent", "sha256": "%s"}]}\n' "$(printf %s "$token" | "$bin" serve --hash-token)" >"$work/server.json"

echo "== the TypeScript SDK's client against toolgate mcp (stdio, then streamable HTTP)"
status=0
TOOLGATE_BIN=$bin INTEROP_WORK=$work INTEROP_TOKEN=$token node "$client/client.mjs" || status=$?

for db in stdio http; do
	if [ -e "$work/$db.db" ]; then
		echo "== toolgate audit verify ($db.db)"
		"$bin" --db "$work/$db.db" --wait 10s audit verify || status=1
	else
		echo "interop-ts: $db.db was not created" >&2
		status=1
	fi
done

if [ "$status" -ne 0 ]; then
	echo "interop-ts: FAILED" >&2
	exit 1
fi
echo "interop-ts: ok"
