#!/usr/bin/env bash
# toolgate as an OAuth 2.1 resource server in front of a real authorization
# server: ORY Hydra, built from the Go module proxy (no Docker), with an
# in-memory database.
#
#   1. Hydra issues a JWT access token by client credentials (RFC 6749 4.4)
#      for the audience http://127.0.0.1:$TG_PORT and the scope tools.call;
#   2. toolgate serve, configured with Hydra as its issuer, runs a call made
#      with that token, recorded under the mapped principal (the token's
#      sub: the client id), with the token's issuer, subject and hash;
#   3. toolgate mcp --http takes the same kind of token for an MCP session;
#   4. a token for another audience, and none, are refused (401, with the
#      protected-resource metadata in the challenge);
#   5. toolgate audit verify passes.
#
# Hydra keeps its data in the Postgres of $TOOLGATE_TEST_POSTGRES (run this
# under scripts/pg-test.sh run), so that it builds without cgo (its SQLite
# needs it).
#
# HYDRA_BIN: a hydra binary to use instead of building one.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
HYDRA_VERSION=v2.3.0
tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT
say() { echo "interop-hydra: $*"; }
fail() { echo "interop-hydra: FAIL: $*" >&2; exit 1; }

# --- Hydra, built as a tool of a scratch module with Hydra's own replace
# directives (go install refuses a module that has them).
hydra=${HYDRA_BIN:-}
if [ -z "$hydra" ]; then
  cache=${XDG_CACHE_HOME:-$HOME/.cache}/toolgate-interop/hydra-$HYDRA_VERSION
  hydra=$cache/hydra
  if [ ! -x "$hydra" ]; then
    say "building ORY Hydra $HYDRA_VERSION from the Go module proxy (once; cached in $cache)"
    mkdir -p "$cache/mod"
    (
      cd "$cache/mod"
      [ -f go.mod ] || go mod init hydrabuild >/dev/null 2>&1
      go mod download github.com/ory/hydra/v2@$HYDRA_VERSION
      # Hydra's go.mod replaces pop with ORY's fork; its other replace
      # (the API client, a directory of its repository) is the published
      # module at the version it requires.
      go mod edit -require=github.com/ory/hydra/v2@$HYDRA_VERSION \
        -replace github.com/gobuffalo/pop/v6=github.com/ory/pop/v6@v6.2.1-0.20241121111754-e5dfc0f3344b
      printf '//go:build tools\n\npackage main\n\nimport _ "github.com/ory/hydra/v2"\n' > tools.go
      go mod tidy
      go build -o "$hydra" github.com/ory/hydra/v2
    )
  fi
fi
say "hydra: $("$hydra" version 2>/dev/null | head -1 || echo "$HYDRA_VERSION")"

go build -o "$tmp/toolgate" ./cmd/toolgate
tg=$tmp/toolgate
export TOOLGATE_DB=$tmp/toolgate.db HOME=$tmp/home
mkdir -p "$HOME"

# JSON and ports through Node, which the other interop steps need anyway.
command -v node >/dev/null || fail "node is not installed (Debian's nodejs package)"
free_port() { node -e 'const s=require("net").createServer().listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})'; }
# field FILE KEY: the string KEY of the JSON object in FILE ("-": stdin).
field() { node -e 'const f=process.argv[1]; const o=JSON.parse(require("fs").readFileSync(f==="-"?0:f,"utf8")); const v=o[process.argv[2]]; if (v===undefined) process.exit(1); console.log(v)' "$1" "$2"; }
PUB=$(free_port); ADM=$(free_port); TG_PORT=$(free_port); MCP_PORT=$(free_port)
issuer=http://127.0.0.1:$PUB/

[ -n "${TOOLGATE_TEST_POSTGRES:-}" ] || fail "TOOLGATE_TEST_POSTGRES is not set: run it as bash scripts/pg-test.sh run bash $0"
export DSN=$TOOLGATE_TEST_POSTGRES
"$hydra" migrate sql up -e --yes >"$tmp/migrate.log" 2>&1 || { cat "$tmp/migrate.log"; fail "hydra migrate"; }
URLS_SELF_ISSUER=$issuer STRATEGIES_ACCESS_TOKEN=jwt \
  SECRETS_SYSTEM=toolgate-interop-secret-0123456789 \
  SERVE_PUBLIC_HOST=127.0.0.1 SERVE_PUBLIC_PORT=$PUB SERVE_ADMIN_HOST=127.0.0.1 SERVE_ADMIN_PORT=$ADM \
  LOG_LEVEL=warn "$hydra" serve all --dev >"$tmp/hydra.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 60); do
  curl -sf "http://127.0.0.1:$ADM/health/ready" >/dev/null 2>&1 && break
  sleep 0.5
done
curl -sf "http://127.0.0.1:$ADM/health/ready" >/dev/null || { cat "$tmp/hydra.log"; fail "hydra did not become ready"; }

resource=http://127.0.0.1:$TG_PORT
mcpresource=http://127.0.0.1:$MCP_PORT/mcp
client=$("$hydra" create oauth2-client --endpoint "http://127.0.0.1:$ADM" --format json \
  --name toolgate-agent --grant-type client_credentials --scope tools.call \
  --audience "$resource" --audience "$mcpresource" --token-endpoint-auth-method client_secret_post)
cid=$(printf '%s' "$client" | field - client_id)
csecret=$(printf '%s' "$client" | field - client_secret)
say "client $cid registered"

token_for() { # AUDIENCE -> an access token by client credentials, from Hydra's token endpoint
  curl -sS -X POST "http://127.0.0.1:$PUB/oauth2/token" \
    -d grant_type=client_credentials -d "client_id=$cid" -d "client_secret=$csecret" \
    -d scope=tools.call -d "audience=$1" >"$tmp/token.json"
  field "$tmp/token.json" access_token ||
    fail "Hydra's token endpoint answered: $(cat "$tmp/token.json")"
}
tok=$(token_for "$resource")
[ "$(printf '%s' "$tok" | tr -cd . | wc -c)" = 2 ] || fail "Hydra issued no JWT access token: $tok"

mkdir -p "$tmp/data" && echo "numbers" > "$tmp/data/a.txt"
cat >"$tmp/server.json" <<JSON
{"tokens": [],
 "oauth": {"resource": "$resource", "issuers": [{"issuer": "$issuer"}], "scopes": ["tools.call"]}}
JSON
cat >"$tmp/mcp.json" <<JSON
{"tokens": [],
 "oauth": {"resource": "$mcpresource", "issuers": [{"issuer": "$issuer"}], "scopes": ["tools.call"]}}
JSON
cat >"$tmp/policy.json" <<JSON
{"version": 1, "principals": {"$cid": ["filesystem.read:$tmp/data"]}}
JSON

"$tg" serve --config "$tmp/server.json" --policy "$tmp/policy.json" --addr "127.0.0.1:$TG_PORT" --no-ui --no-request-log 2>"$tmp/serve.log" &
srv=$!
pids+=($srv)
body=$(curl -sS --retry 20 --retry-connrefused --retry-delay 1 -H "Authorization: Bearer $tok" -H 'Content-Type: application/json' \
  -d "{\"input\":{\"path\":\"$tmp/data/a.txt\"}}" "$resource/v1/tools/file.read/execute")
echo "$body" | grep -q '"state": *"COMPLETED"' || fail "a call with Hydra's token: $body"
exec_id=$(echo "$body" | field - executionId)
say "serve: a call with Hydra's token: COMPLETED ($exec_id)"

code=$(curl -s -o /dev/null -w '%{http_code}' -X POST "$resource/v1/tools/file.read/execute")
hdr=$(curl -s -D - -o /dev/null -X POST "$resource/v1/tools/file.read/execute" | tr -d '\r' | grep -i '^www-authenticate:' || true)
[ "$code" = 401 ] && echo "$hdr" | grep -q "resource_metadata=\"$resource/.well-known/oauth-protected-resource\"" || fail "no token: $code $hdr"
say "serve: no token: 401, $hdr"
other=$(token_for "$mcpresource")
code=$(curl -s -o "$tmp/other.json" -w '%{http_code}' -H "Authorization: Bearer $other" -H 'Content-Type: application/json' \
  -d "{\"input\":{\"path\":\"$tmp/data/a.txt\"}}" "$resource/v1/tools/file.read/execute")
[ "$code" = 401 ] || fail "a token for another audience: $code $(cat "$tmp/other.json")"
say "serve: a token for another audience: 401 ($(field "$tmp/other.json" detail))"
kill -TERM "$srv"; wait "$srv" || true

show=$("$tg" show "$exec_id" --json)
echo "$show" | node -e '
const r = JSON.parse(require("fs").readFileSync(0, "utf8"));
const rec = r.record || r, tk = rec.token || {};
const [cid, iss] = process.argv.slice(1);
if (rec.principal !== cid) { console.error("principal", rec.principal); process.exit(1); }
if (tk.iss !== iss || tk.sub !== cid || (tk.sha256 || "").length !== 64) { console.error("token", tk); process.exit(1); }
console.log(`interop-hydra: the record: principal ${rec.principal}, token of ${tk.iss} for ${tk.sub} (sha256 ${tk.sha256.slice(0, 12)}...)`);
' "$cid" "$issuer" || fail "the record does not name the token: $show"

# MCP over streamable HTTP with a token for its own resource.
"$tg" mcp --http "127.0.0.1:$MCP_PORT" --config "$tmp/mcp.json" --policy "$tmp/policy.json" 2>"$tmp/mcp.log" &
mcpsrv=$!
pids+=($mcpsrv)
mtok=$(token_for "$mcpresource")
init='{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"curl","version":"1"}}}'
code=$(curl -s -o "$tmp/init.out" -w '%{http_code}' --retry 20 --retry-connrefused --retry-delay 1 \
  -H "Authorization: Bearer $mtok" -H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream' \
  -d "$init" "$mcpresource")
[ "$code" = 200 ] && grep -q '"serverInfo"' "$tmp/init.out" || fail "mcp --http initialize with Hydra's token: $code $(cat "$tmp/init.out")"
say "mcp --http: initialize with Hydra's token: 200"
code=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $tok" -H 'Content-Type: application/json' \
  -H 'Accept: application/json, text/event-stream' -d "$init" "$mcpresource")
[ "$code" = 401 ] || fail "mcp --http took a token for serve's audience: $code"
say "mcp --http: a token for another audience: 401"
kill -TERM "$mcpsrv"; wait "$mcpsrv" || true

"$tg" audit verify >/dev/null || fail "audit verify"
say "audit verify: ok"
say "ok"
