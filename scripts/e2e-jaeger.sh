#!/usr/bin/env bash
# End-to-end check of toolgate's traces in a real Jaeger.
#
# Installs Jaeger all-in-one (go install, reusing the binary when it is
# already the right version), starts it on free loopback ports with its OTLP
# receivers on, runs `toolgate run` for a COMPLETED, a FAILED, a DENIED and a
# timed-out invocation (over OTLP/HTTP and OTLP/gRPC), and one call through
# `toolgate serve` with a caller's traceparent, reads each trace back
# from Jaeger's query API by the trace id toolgate printed, and checks the
# span names, the GenAI attributes, the lifecycle states, and that the audit
# event ids on the phase spans are the record's (`toolgate show --json`).
# Jaeger is stopped on exit, whatever happens. Needs only Go.
#
#   scripts/e2e-jaeger.sh
set -euo pipefail
cd "$(dirname "$0")/.."

JAEGER_MODULE=github.com/jaegertracing/jaeger
JAEGER_VERSION=v1.47.0

tmp=$(mktemp -d)
jaeger_pid=""
stop_jaeger() {
  [ -n "$jaeger_pid" ] || return 0
  kill "$jaeger_pid" 2>/dev/null || true
  for _ in $(seq 50); do # up to 5 s, then for good
    kill -0 "$jaeger_pid" 2>/dev/null || break
    sleep 0.1
  done
  kill -9 "$jaeger_pid" 2>/dev/null || true
  wait "$jaeger_pid" 2>/dev/null || true
  jaeger_pid=""
}
serve_pid=""
cleanup() {
  [ -z "$serve_pid" ] || kill -9 "$serve_pid" 2>/dev/null || true
  stop_jaeger
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

say() { echo "e2e-jaeger: $*"; }
die() {
  echo "e2e-jaeger: FAILED: $*" >&2
  if [ -s "$tmp/jaeger.log" ]; then
    echo "--- last lines of the Jaeger log" >&2
    tail -n 20 "$tmp/jaeger.log" >&2
  fi
  exit 1
}

# The checker: a stdlib-only Go program (free ports, readiness, and the
# trace checks), built in its own throwaway module.
mkdir -p "$tmp/check"
printf 'module e2echeck\n\ngo 1.26\n' >"$tmp/check/go.mod"
cat >"$tmp/check/main.go" <<'EOF'
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "e2e-jaeger: FAILED: "+format+"\n", args...)
	os.Exit(1)
}

func main() {
	if len(os.Args) < 2 {
		fail("usage: check ports TCP UDP | wait TIMEOUT URL... | trace QUERY TOOLGATE RUN.json STATE CODE PHASES")
	}
	switch args := os.Args[2:]; os.Args[1] {
	case "ports":
		tcp, _ := strconv.Atoi(args[0])
		udp, _ := strconv.Atoi(args[1])
		ports(tcp, udp)
	case "wait":
		d, err := time.ParseDuration(args[0])
		if err != nil {
			fail("%v", err)
		}
		wait(d, args[1:])
	case "trace":
		checkTrace(args[0], args[1], args[2], args[3], args[4], strings.Split(args[5], ","))
	case "call":
		call(args[0], args[1])
	case "served":
		served(args[0], args[1], args[2])
	default:
		fail("unknown command %q", os.Args[1])
	}
}

// ports prints free loopback ports: tcp TCP ones, then udp UDP ones.
func ports(tcp, udp int) {
	var out []string
	var closers []io.Closer
	for range tcp {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			fail("%v", err)
		}
		closers = append(closers, l)
		out = append(out, strconv.Itoa(l.Addr().(*net.TCPAddr).Port))
	}
	for range udp {
		c, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			fail("%v", err)
		}
		closers = append(closers, c)
		out = append(out, strconv.Itoa(c.LocalAddr().(*net.UDPAddr).Port))
	}
	for _, c := range closers {
		c.Close()
	}
	fmt.Println(strings.Join(out, " "))
}

// wait polls each URL until it answers 200, within d in all.
func wait(d time.Duration, urls []string) {
	deadline := time.Now().Add(d)
	client := &http.Client{Timeout: time.Second}
	for _, u := range urls {
		for {
			resp, err := client.Get(u)
			if err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					break
				}
				err = fmt.Errorf("status %s", resp.Status)
			}
			if time.Now().After(deadline) {
				fail("%s not ready after %v: %v", u, d, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
}

type result struct {
	ExecutionID string `json:"executionId"`
	CallID      string `json:"callId"`
	TraceID     string `json:"traceId"`
	Tool        string `json:"tool"`
	State       string `json:"state"`
	Error       *struct {
		Type string `json:"type"`
		Code string `json:"code"`
	} `json:"error"`
	Attempts []struct {
		ExecutionID string `json:"executionId"`
		Number      int    `json:"number"`
		State       string `json:"state"`
	} `json:"attempts"`
}

type record struct {
	ExecutionID string   `json:"executionId"`
	TraceID     string   `json:"traceId"`
	State       string   `json:"state"`
	AuditEvents []string `json:"auditEvents"`
	Transitions []struct {
		To string `json:"to"`
	} `json:"transitions"`
}

type span struct {
	SpanID     string `json:"spanID"`
	Name       string `json:"operationName"`
	StartTime  int64  `json:"startTime"`
	ProcessID  string `json:"processID"`
	References []struct {
		RefType string `json:"refType"`
		SpanID  string `json:"spanID"`
	} `json:"references"`
	Tags []struct {
		Key   string `json:"key"`
		Value any    `json:"value"`
	} `json:"tags"`
}

func (s *span) tag(key string) (string, bool) {
	for _, t := range s.Tags {
		if t.Key == key {
			return fmt.Sprint(t.Value), true
		}
	}
	return "", false
}

func (s *span) parent() string {
	for _, r := range s.References {
		if r.RefType == "CHILD_OF" {
			return r.SpanID
		}
	}
	return ""
}

type trace struct {
	Spans     []span `json:"spans"`
	Processes map[string]struct {
		ServiceName string `json:"serviceName"`
	} `json:"processes"`
}

// fetch reads a trace from Jaeger's query API, waiting until it holds want
// spans (the exporter and Jaeger's ingestion run behind the CLI).
func fetch(query, traceID string, want int) trace {
	deadline := time.Now().Add(20 * time.Second)
	client := &http.Client{Timeout: 2 * time.Second}
	last := "no answer"
	for {
		resp, err := client.Get(query + "/api/traces/" + traceID)
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var doc struct {
				Data []trace `json:"data"`
			}
			switch {
			case resp.StatusCode != http.StatusOK:
				last = fmt.Sprintf("status %s: %.200s", resp.Status, body)
			case json.Unmarshal(body, &doc) != nil || len(doc.Data) != 1:
				last = fmt.Sprintf("unexpected answer: %.200s", body)
			case len(doc.Data[0].Spans) == want:
				return doc.Data[0]
			default:
				last = fmt.Sprintf("%d spans, want %d", len(doc.Data[0].Spans), want)
			}
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			fail("trace %s not in Jaeger as expected after 20s: %s", traceID, last)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// call sends one execution to toolgate serve at url, as a client whose
// span is the parent (a traceparent header), and prints the trace and span
// ids it used.
func call(url, token string) {
	traceID, spanID := randomHex(16), randomHex(8)
	req, err := http.NewRequest(http.MethodPost, url+"/v1/tools/file.read/execute", strings.NewReader(`{"input":{"path":"hello.txt"}}`))
	if err != nil {
		fail("%v", err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("traceparent", "00-"+traceID+"-"+spanID+"-01")
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		fail("serve: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var res result
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &res) != nil || res.State != "COMPLETED" || res.TraceID != traceID {
		fail("serve answered %s: %.300s (want 200 COMPLETED in trace %s)", resp.Status, body, traceID)
	}
	fmt.Println(traceID, spanID)
}

func randomHex(n int) string {
	b := make([]byte, n)
	f, err := os.Open("/dev/urandom")
	if err != nil {
		fail("%v", err)
	}
	defer f.Close()
	if _, err := io.ReadFull(f, b); err != nil {
		fail("%v", err)
	}
	return fmt.Sprintf("%x", b)
}

// served checks that the caller's trace continues into toolgate: the
// server span is the child of the caller's span, and the invocation's span
// the child of the server span.
func served(query, traceID, clientSpan string) {
	tr := fetch(query, traceID, 10) // server span, execute_tool, attempt, 7 phases
	var server, tool *span
	for i := range tr.Spans {
		switch s := &tr.Spans[i]; s.Name {
		case "POST /v1/tools/{name}/execute":
			server = s
		case "execute_tool file.read":
			tool = s
		}
	}
	switch {
	case server == nil || tool == nil:
		fail("trace %s: no server span or no execute_tool span", traceID)
	case server.parent() != clientSpan:
		fail("trace %s: the server span's parent is %q, not the caller's span %s", traceID, server.parent(), clientSpan)
	case tool.parent() != server.SpanID:
		fail("trace %s: execute_tool's parent is %q, not the server span %s", traceID, tool.parent(), server.SpanID)
	case tr.Processes[server.ProcessID].ServiceName != "toolgate":
		fail("trace %s: the server span's service is %q", traceID, tr.Processes[server.ProcessID].ServiceName)
	}
	fmt.Printf("e2e-jaeger: ok  SERVED      trace %s: the caller's span -> %s -> %s\n", traceID, server.Name, tool.Name)
}

// rank orders phases that start in the same microsecond.
var rank = map[string]int{"validate": 0, "authorize": 1, "acquire": 2, "begin": 3, "execute": 4, "validate_output": 5, "commit": 6, "rollback": 7}

var hexHash = regexp.MustCompile(`^[0-9a-f]{64}$`)

func checkTrace(query, toolgate, runFile, state, code string, phases []string) {
	data, err := os.ReadFile(runFile)
	if err != nil {
		fail("%v", err)
	}
	var res result
	if err := json.Unmarshal(data, &res); err != nil {
		fail("%s: %v", runFile, err)
	}
	name := fmt.Sprintf("%s (%s)", state, runFile)
	if res.State != state || (code == "") != (res.Error == nil) || res.Error != nil && res.Error.Code != code {
		fail("%s: toolgate reported %s %+v", name, res.State, res.Error)
	}
	if !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(res.TraceID) {
		fail("%s: no trace id in the result: %q", name, res.TraceID)
	}
	n := len(res.Attempts)
	tr := fetch(query, res.TraceID, 1+n+n*len(phases))
	for id, p := range tr.Processes {
		if p.ServiceName != "toolgate" {
			fail("%s: process %s is service %q, want toolgate", name, id, p.ServiceName)
		}
	}
	children := map[string][]*span{}
	var root *span
	for i := range tr.Spans {
		s := &tr.Spans[i]
		if p := s.parent(); p != "" {
			children[p] = append(children[p], s)
		} else if root != nil {
			fail("%s: two root spans, %s and %s", name, root.Name, s.Name)
		} else {
			root = s
		}
	}
	if root == nil || root.Name != "execute_tool "+res.Tool {
		fail("%s: no root span execute_tool %s", name, res.Tool)
	}
	want := map[string]string{
		"gen_ai.operation.name":    "execute_tool",
		"gen_ai.tool.name":         res.Tool,
		"gen_ai.tool.call.id":      res.CallID,
		"gen_ai.tool.type":         "function",
		"span.kind":                "internal",
		"toolgate.lifecycle.state": state,
		"toolgate.execution.id":    res.ExecutionID,
		"toolgate.attempts":        strconv.Itoa(n),
	}
	if code != "" {
		want["error.type"] = code
		want["otel.status_code"] = "ERROR"
	}
	for k, v := range want {
		if got, _ := root.tag(k); got != v {
			fail("%s: span %s has %s=%q, want %q", name, root.Name, k, got, v)
		}
	}
	if d, _ := root.tag("gen_ai.tool.description"); d == "" {
		fail("%s: no gen_ai.tool.description", name)
	}
	if code == "" {
		if _, ok := root.tag("error.type"); ok {
			fail("%s: a completed invocation has error.type", name)
		}
	}

	attempts := children[root.SpanID]
	if len(attempts) != n {
		fail("%s: %d attempt spans for %d attempts", name, len(attempts), n)
	}
	slices.SortFunc(attempts, func(a, b *span) int {
		x, _ := a.tag("toolgate.attempt")
		y, _ := b.tag("toolgate.attempt")
		i, _ := strconv.Atoi(x)
		j, _ := strconv.Atoi(y)
		return i - j
	})
	for i, as := range attempts {
		att := res.Attempts[i]
		id, _ := as.tag("toolgate.execution.id")
		st, _ := as.tag("toolgate.lifecycle.state")
		if as.Name != fmt.Sprintf("attempt %d", i+1) || id != att.ExecutionID || st != att.State {
			fail("%s: attempt span %q (execution %s, %s) does not match attempt %d (%s, %s)", name, as.Name, id, st, i+1, att.ExecutionID, att.State)
		}
		out, err := exec.Command(toolgate, "show", "--json", att.ExecutionID).Output()
		if err != nil {
			fail("%s: toolgate show %s: %v", name, att.ExecutionID, err)
		}
		var rec record
		if err := json.Unmarshal(out, &rec); err != nil {
			fail("%s: toolgate show --json: %v", name, err)
		}
		if rec.TraceID != res.TraceID {
			fail("%s: record %s has trace id %q, want %s", name, rec.ExecutionID, rec.TraceID, res.TraceID)
		}
		ph := children[as.SpanID]
		slices.SortStableFunc(ph, func(a, b *span) int {
			if a.StartTime != b.StartTime {
				return int(a.StartTime - b.StartTime)
			}
			return rank[a.Name] - rank[b.Name]
		})
		var names, ids, states []string
		for _, p := range ph {
			names = append(names, p.Name)
			if _, ok := p.tag("toolgate.lifecycle.state"); !ok {
				fail("%s: phase %s has no toolgate.lifecycle.state", name, p.Name)
			}
			id, ok := p.tag("toolgate.audit.event_id")
			if !ok {
				continue
			}
			ids = append(ids, id)
			st, _ := p.tag("toolgate.lifecycle.state")
			states = append(states, st)
			if h, _ := p.tag("toolgate.audit.event_hash"); !hexHash.MatchString(h) {
				fail("%s: phase %s has event hash %q", name, p.Name, h)
			}
			if p.Name == "execute" && code == "timeout" {
				if et, _ := p.tag("error.type"); st != "ABORTED" || et != "timeout" {
					fail("%s: the execute phase reached %s with error.type %q, want ABORTED, timeout", name, st, et)
				}
			}
		}
		if !slices.Equal(names, phases) {
			fail("%s: attempt %d has phases %v, want %v", name, i+1, names, phases)
		}
		if !slices.Equal(ids, rec.AuditEvents) {
			fail("%s: attempt %d: the phase spans carry audit events %v, toolgate show lists %v", name, i+1, ids, rec.AuditEvents)
		}
		var recStates []string
		for _, t := range rec.Transitions {
			recStates = append(recStates, t.To)
		}
		if !slices.Equal(states, recStates) {
			fail("%s: attempt %d: the phase spans reached %v, the record %v", name, i+1, states, recStates)
		}
	}
	fmt.Printf("e2e-jaeger: ok  %-11s trace %s: %d spans, %d attempt(s), audit events match\n", state, res.TraceID, len(tr.Spans), n)
}
EOF
(cd "$tmp/check" && go build -o "$tmp/e2echeck" .) || die "building the checker"

# Jaeger all-in-one, installed once per machine.
gobin=$(go env GOBIN)
[ -n "$gobin" ] || gobin="$(go env GOPATH | cut -d: -f1)/bin"
jaeger="$gobin/all-in-one"
if [ -x "$jaeger" ] && go version -m "$jaeger" 2>/dev/null | grep -q "mod[[:space:]]*$JAEGER_MODULE[[:space:]]*$JAEGER_VERSION"; then
  say "using $jaeger ($JAEGER_VERSION)"
else
  say "installing Jaeger all-in-one $JAEGER_VERSION (go install; the first build takes minutes)"
  go install "$JAEGER_MODULE/cmd/all-in-one@$JAEGER_VERSION" || die "go install $JAEGER_MODULE/cmd/all-in-one@$JAEGER_VERSION"
fi

say "building toolgate"
go build -o "$tmp/toolgate" ./cmd/toolgate || die "go build"

# Every port Jaeger opens, on loopback, free ones (OTLP gRPC and HTTP,
# query, admin, the legacy collector and agent ports). A port picked free
# can be taken before Jaeger binds it: then Jaeger exits, and it is started
# again on new ports (three tries).
start_jaeger() {
  read -r p_otlp_grpc p_otlp_http p_query p_query_grpc p_admin p_coll_grpc p_coll_http p_sampling p_udp1 p_udp2 p_udp3 \
    < <("$tmp/e2echeck" ports 8 3)
  query="http://127.0.0.1:$p_query"
  COLLECTOR_OTLP_ENABLED=true SPAN_STORAGE_TYPE=memory "$jaeger" \
    --collector.otlp.enabled=true \
    --collector.otlp.grpc.host-port="127.0.0.1:$p_otlp_grpc" \
    --collector.otlp.http.host-port="127.0.0.1:$p_otlp_http" \
    --query.http-server.host-port="127.0.0.1:$p_query" \
    --query.grpc-server.host-port="127.0.0.1:$p_query_grpc" \
    --admin.http.host-port="127.0.0.1:$p_admin" \
    --collector.grpc-server.host-port="127.0.0.1:$p_coll_grpc" \
    --collector.http-server.host-port="127.0.0.1:$p_coll_http" \
    --http-server.host-port="127.0.0.1:$p_sampling" \
    --reporter.grpc.host-port="127.0.0.1:$p_coll_grpc" \
    --processor.jaeger-compact.server-host-port="127.0.0.1:$p_udp1" \
    --processor.jaeger-binary.server-host-port="127.0.0.1:$p_udp2" \
    --processor.zipkin-compact.server-host-port="127.0.0.1:$p_udp3" \
    >"$tmp/jaeger.log" 2>&1 &
  jaeger_pid=$!
}
ready=false
for try in 1 2 3; do
  start_jaeger
  say "Jaeger started (pid $jaeger_pid): OTLP gRPC 127.0.0.1:$p_otlp_grpc, OTLP HTTP 127.0.0.1:$p_otlp_http, UI $query"
  for _ in $(seq 60); do
    kill -0 "$jaeger_pid" 2>/dev/null || break
    if "$tmp/e2echeck" wait 1s "http://127.0.0.1:$p_admin/" "$query/api/services" >/dev/null 2>&1; then
      ready=true
      break
    fi
  done
  $ready && break
  say "Jaeger did not become ready (try $try of 3)"
  tail -n 5 "$tmp/jaeger.log" >&2 || true
  stop_jaeger
done
$ready || die "Jaeger did not become ready"

work="$tmp/work"
mkdir -p "$work"
printf 'hello\n' >"$work/hello.txt"
export TOOLGATE_DB="$tmp/toolgate.db"
# Nothing from the caller's environment may steer the export (a sampler, a
# header, a timeout): every OTEL_ variable is cleared.
unset $(compgen -e | grep '^OTEL_') TRACEPARENT TRACESTATE

# Jaeger takes traces only: metrics off, else every run warns that they
# were not exported.
export OTEL_METRICS_EXPORTER=none

# run NAME PROTOCOL EXIT ARGS...: one invocation exported over PROTOCOL; the
# result goes to $tmp/NAME.json.
run() {
  local name=$1 proto=$2 want=$3 endpoint code
  shift 3
  if [ "$proto" = grpc ]; then endpoint="http://127.0.0.1:$p_otlp_grpc"; else endpoint="http://127.0.0.1:$p_otlp_http"; fi
  set +e
  (cd "$work" && OTEL_EXPORTER_OTLP_ENDPOINT="$endpoint" OTEL_EXPORTER_OTLP_PROTOCOL="$proto" \
    "$tmp/toolgate" run file.read --json "$@" >"$tmp/$name.json" 2>"$tmp/$name.err")
  code=$?
  set -e
  [ "$code" = "$want" ] || die "$name: toolgate exited $code, want $want: $(cat "$tmp/$name.err")"
  if grep -q warning "$tmp/$name.err"; then die "$name: $(cat "$tmp/$name.err")"; fi
}

all="validate,authorize,acquire,begin,execute,validate_output,commit"
timedout="validate,authorize,acquire,begin,execute,rollback"
run completed http/protobuf 0 --allow filesystem.read:. --input '{"path":"hello.txt"}'
run failed http/protobuf 3 --allow filesystem.read:. --input '{"path":7}'
run denied grpc 4 --input '{"path":"hello.txt"}'
# file.read's limit is 5s; the hidden --max-time lowers it for this call,
# and the idempotent tool is retried: four timed-out attempts.
run timeout grpc 5 --allow filesystem.read:. --input '{"path":"hello.txt"}' --max-time 1ns

# The human status line names the trace too. The traces-only endpoint
# variable (a full URL for OTLP/HTTP) leaves metrics off by itself.
(cd "$work" && OTEL_METRICS_EXPORTER= OTEL_EXPORTER_OTLP_TRACES_ENDPOINT="http://127.0.0.1:$p_otlp_http/v1/traces" \
  "$tmp/toolgate" run file.read --allow filesystem.read:. --input '{"path":"hello.txt"}' >/dev/null 2>"$tmp/human.err") ||
  die "human output: $(cat "$tmp/human.err")"
grep -Eq '^COMPLETED file\.read@[0-9.]+ in .*, trace [0-9a-f]{32}\)$' "$tmp/human.err" || die "no trace id on the status line: $(cat "$tmp/human.err")"
if grep -q warning "$tmp/human.err"; then die "human output: $(cat "$tmp/human.err")"; fi

export TOOLGATE_DB # the checker runs toolgate show
"$tmp/e2echeck" trace "$query" "$tmp/toolgate" "$tmp/completed.json" COMPLETED "" "$all"
"$tmp/e2echeck" trace "$query" "$tmp/toolgate" "$tmp/failed.json" FAILED invalid_input validate
"$tmp/e2echeck" trace "$query" "$tmp/toolgate" "$tmp/denied.json" DENIED capability_denied validate,authorize
"$tmp/e2echeck" trace "$query" "$tmp/toolgate" "$tmp/timeout.json" ROLLED_BACK timeout "$timedout"

# toolgate serve: a caller's trace context continues into toolgate.
printf '{"tokens":[{"principal":"agent","sha256":"%s"}]}\n' "$(printf 'e2e-token\n' | "$tmp/toolgate" serve --hash-token)" >"$tmp/server.json"
printf '{"version":1,"principals":{"agent":["filesystem.read:%s"]}}\n' "$work" >"$tmp/policy.json"
read -r p_serve < <("$tmp/e2echeck" ports 1 0)
(cd "$work" && OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:$p_otlp_http" OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf \
  exec "$tmp/toolgate" serve --config "$tmp/server.json" --policy "$tmp/policy.json" --addr "127.0.0.1:$p_serve" 2>"$tmp/serve.err") &
serve_pid=$!
"$tmp/e2echeck" wait 20s "http://127.0.0.1:$p_serve/healthz" >/dev/null || die "serve did not start: $(cat "$tmp/serve.err")"
read -r served_trace served_span < <("$tmp/e2echeck" call "http://127.0.0.1:$p_serve" e2e-token) || die "the call to serve failed"
kill -TERM "$serve_pid" # a graceful stop flushes its spans
wait "$serve_pid" || die "serve did not stop cleanly: $(cat "$tmp/serve.err")"
serve_pid=""
"$tmp/e2echeck" served "$query" "$served_trace" "$served_span"

say "5 passed, 0 failed"
