#!/usr/bin/env bash
# The gateway's interop suite: MCP servers this project did not write sit
# behind toolgate's gateway, unchanged, and an agent drives each through a
# granted read, a refused write that never reaches it, and the server's own
# refusal; then toolgate audit verify passes (mcp/interop_test.go,
# TestInterop_GatewayPeers). The peers:
#   - @modelcontextprotocol/server-filesystem and server-memory from the npm
#     registry, at the exact versions of scripts/interop/gateway/package.json,
#     locked (with every dependency) in scripts/interop/gateway/package-lock.json;
#   - the Go SDK's example server (examples/server/everything), built from
#     the module source go.mod pins.
# It installs node and npm (Debian's nodejs and npm) when missing, as root.
# The versions and what each flow returned are printed (go test -v).
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  [ "$(id -u)" = 0 ] || { echo "node and npm are not installed and this is not root: install Debian's nodejs and npm"; exit 1; }
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null
fi
echo "node $(node --version), npm $(npm --version)"

# npm ci: exactly the lock file, nothing resolved anew; node_modules is
# git-ignored.
(cd scripts/interop/gateway && npm ci --no-audit --no-fund --loglevel=error)

# require: a missing peer fails the test instead of skipping it.
TOOLGATE_TEST_INTEROP=require go test -race -count=1 -v -run 'TestInterop_GatewayPeers' ./mcp \
  | grep -v '^        toolgate: MCP server ' # the peers' own stderr, kept out of the summary
