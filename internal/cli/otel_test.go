package cli

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	colmetricpb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// collector is an in-test OTLP receiver: it keeps every span and counts
// metric exports.
type collector struct {
	mu      sync.Mutex
	spans   []*tracepb.Span
	service []string // service.name of each span's resource
	traces  int      // export requests
	metrics int
}

func (c *collector) addTraces(req *coltracepb.ExportTraceServiceRequest) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.traces++
	for _, rs := range req.ResourceSpans {
		service := ""
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.Key == "service.name" {
				service = kv.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				c.spans = append(c.spans, s)
				c.service = append(c.service, service)
			}
		}
	}
}

// trace returns the names of the spans of one trace, and their services.
func (c *collector) trace(traceID string) (names, services []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, s := range c.spans {
		if hex.EncodeToString(s.TraceId) == traceID {
			names = append(names, s.Name)
			services = append(services, c.service[i])
		}
	}
	return names, services
}

func (c *collector) counts() (traces, metrics int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.traces, c.metrics
}

// httpCollector serves OTLP/HTTP (protobuf) on a loopback port.
func httpCollector(t *testing.T) (*collector, string) {
	c := &collector{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil || r.Method != http.MethodPost {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		switch r.URL.Path {
		case "/v1/traces":
			var req coltracepb.ExportTraceServiceRequest
			if err := proto.Unmarshal(body, &req); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			c.addTraces(&req)
		case "/v1/metrics":
			var req colmetricpb.ExportMetricsServiceRequest
			if err := proto.Unmarshal(body, &req); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			c.mu.Lock()
			c.metrics++
			c.mu.Unlock()
		default:
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	return c, srv.URL
}

type grpcTraces struct {
	coltracepb.UnimplementedTraceServiceServer
	c *collector
}

func (g grpcTraces) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	g.c.addTraces(req)
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

type grpcMetrics struct {
	colmetricpb.UnimplementedMetricsServiceServer
	c *collector
}

func (g grpcMetrics) Export(context.Context, *colmetricpb.ExportMetricsServiceRequest) (*colmetricpb.ExportMetricsServiceResponse, error) {
	g.c.mu.Lock()
	g.c.metrics++
	g.c.mu.Unlock()
	return &colmetricpb.ExportMetricsServiceResponse{}, nil
}

// grpcCollector serves OTLP/gRPC on a loopback port.
func grpcCollector(t *testing.T) (*collector, string) {
	c := &collector{}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(srv, grpcTraces{c: c})
	colmetricpb.RegisterMetricsServiceServer(srv, grpcMetrics{c: c})
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return c, "http://" + lis.Addr().String()
}

type runResult struct {
	ExecutionID string `json:"executionId"`
	TraceID     string `json:"traceId"`
	State       string `json:"state"`
}

func runJSON(t *testing.T, args ...string) (runResult, run) {
	t.Helper()
	r := toolgate(t, "", append([]string{"run", "file.read", "--json"}, args...)...)
	var res runResult
	if err := json.Unmarshal([]byte(r.stdout), &res); err != nil {
		t.Fatalf("exit %d, stdout not JSON: %v\n%s\n%s", r.code, err, r.stdout, r.stderr)
	}
	return res, r
}

var phasesCompleted = []string{"validate", "authorize", "acquire", "begin", "execute", "validate_output", "commit"}

// With an OTLP endpoint configured, run exports its spans and metrics
// before Main returns, and reports the trace id in --json, on stderr, and
// in show.
func TestRun_Telemetry(t *testing.T) {
	for _, proto := range []string{"http/protobuf", "grpc"} {
		t.Run(proto, func(t *testing.T) {
			workdir(t)
			var c *collector
			var endpoint string
			if proto == "grpc" {
				c, endpoint = grpcCollector(t)
			} else {
				c, endpoint = httpCollector(t)
			}
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
			t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", proto)

			res, r := runJSON(t, "--allow", "filesystem.read:.", "--input", `{"path":"hello.txt"}`)
			if r.code != ExitCompleted || len(res.TraceID) != 32 || strings.Contains(r.stderr, "warning") {
				t.Fatalf("exit %d, trace id %q\n%s", r.code, res.TraceID, r.stderr)
			}
			// Flushed before Main returned: no waiting here.
			traces, metrics := c.counts()
			if traces == 0 || metrics == 0 {
				t.Fatalf("%d trace and %d metric exports when Main returned", traces, metrics)
			}
			names, services := c.trace(res.TraceID)
			want := append([]string{"execute_tool file.read", "attempt 1"}, phasesCompleted...)
			for _, n := range want {
				if !slices.Contains(names, n) {
					t.Fatalf("exported spans %v lack %q", names, n)
				}
			}
			if len(names) != len(want) || services[0] != "toolgate" {
				t.Fatalf("exported spans %v of services %v", names, services)
			}

			r = toolgate(t, "", "show", res.ExecutionID)
			if !strings.Contains(r.stdout, "Trace:        "+res.TraceID+"\n") {
				t.Fatalf("show does not print the trace id:\n%s", r.stdout)
			}
			r = toolgate(t, "", "show", res.ExecutionID, "--json")
			if !strings.Contains(r.stdout, `"traceId": "`+res.TraceID+`"`) {
				t.Fatalf("show --json lacks the trace id:\n%s", r.stdout)
			}

			// Human output: the trace id on the status line.
			t.Setenv("OTEL_SERVICE_NAME", "tg-test")
			r = toolgate(t, "", "run", "file.read", "--input", `{"path":"hello.txt"}`)
			line, _, _ := strings.Cut(r.stderr, "\n")
			i := strings.Index(line, ", trace ")
			if r.code != ExitDenied || !strings.HasPrefix(line, "DENIED file.read@1.2.0") || i < 0 {
				t.Fatalf("exit %d, status line %q", r.code, line)
			}
			id := strings.TrimSuffix(line[i+len(", trace "):], ")")
			names, services = c.trace(id)
			slices.Sort(names)
			if !slices.Equal(names, []string{"attempt 1", "authorize", "execute_tool file.read", "validate"}) || services[0] != "tg-test" {
				t.Fatalf("denied invocation exported %v of %v", names, services)
			}
		})
	}
}

// An unreachable collector changes nothing but one warning on stderr.
func TestRun_Telemetry_Unreachable(t *testing.T) {
	workdir(t)
	cases := []struct {
		name  string
		args  []string
		code  int
		state string
	}{
		{"completed", []string{"--allow", "filesystem.read:.", "--input", `{"path":"hello.txt"}`}, ExitCompleted, "COMPLETED"},
		{"denied", []string{"--input", `{"path":"hello.txt"}`}, ExitDenied, "DENIED"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
			base, r0 := runJSON(t, tc.args...)
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
			res, r := runJSON(t, tc.args...)
			if r.code != tc.code || r0.code != tc.code || res.State != tc.state || base.State != tc.state {
				t.Fatalf("exit %d (without telemetry %d), state %s; want %d %s", r.code, r0.code, res.State, tc.code, tc.state)
			}
			if base.TraceID != "" || res.TraceID == "" {
				t.Fatalf("trace ids %q without, %q with an endpoint", base.TraceID, res.TraceID)
			}
			if n := strings.Count(r.stderr, "warning"); n != 1 || !strings.Contains(r.stderr, "toolgate: warning: telemetry was not exported") ||
				!strings.Contains(r.stderr, "127.0.0.1:1") {
				t.Fatalf("want one warning naming the endpoint, stderr:\n%s", r.stderr)
			}
			if strings.Count(r.stderr, "\n") != strings.Count(r0.stderr, "\n")+1 {
				t.Fatalf("stderr has more than the warning:\n%s\nwithout telemetry:\n%s", r.stderr, r0.stderr)
			}
		})
	}
}

func TestRun_Telemetry_Off(t *testing.T) {
	workdir(t)
	c, endpoint := httpCollector(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
	t.Setenv("OTEL_SDK_DISABLED", "true")
	res, r := runJSON(t, "--allow", "filesystem.read:.", "--input", `{"path":"hello.txt"}`)
	if traces, metrics := c.counts(); r.code != 0 || res.TraceID != "" || traces+metrics != 0 {
		t.Fatalf("OTEL_SDK_DISABLED: exit %d, trace id %q, %d exports", r.code, res.TraceID, traces+metrics)
	}

	// Traces off by their own exporter setting, metrics still on.
	t.Setenv("OTEL_SDK_DISABLED", "")
	t.Setenv("OTEL_TRACES_EXPORTER", "none")
	res, r = runJSON(t, "--allow", "filesystem.read:.", "--input", `{"path":"hello.txt"}`)
	if traces, metrics := c.counts(); r.code != 0 || res.TraceID != "" || traces != 0 || metrics != 1 {
		t.Fatalf("OTEL_TRACES_EXPORTER=none: exit %d, trace id %q, %d trace and %d metric exports", r.code, res.TraceID, traces, metrics)
	}

	// An unsupported protocol: a warning, the invocation unaffected.
	t.Setenv("OTEL_TRACES_EXPORTER", "")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
	res, r = runJSON(t, "--allow", "filesystem.read:.", "--input", `{"path":"hello.txt"}`)
	if r.code != 0 || res.State != "COMPLETED" || strings.Count(r.stderr, "warning") != 1 || !strings.Contains(r.stderr, "http/json") {
		t.Fatalf("http/json: exit %d\n%s", r.code, r.stderr)
	}
}

// A W3C TRACEPARENT in the environment: the invocation joins that trace.
func TestRun_Telemetry_Traceparent(t *testing.T) {
	workdir(t)
	c, endpoint := httpCollector(t)
	const parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	t.Setenv("TRACEPARENT", parent)
	res, _ := runJSON(t, "--allow", "filesystem.read:.", "--input", `{"path":"hello.txt"}`)
	if res.TraceID != "0af7651916cd43dd8448eb211c80319c" {
		t.Fatalf("without export: trace id %q, want the parent's", res.TraceID)
	}
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
	res, _ = runJSON(t, "--allow", "filesystem.read:.", "--input", `{"path":"hello.txt"}`)
	if res.TraceID != "0af7651916cd43dd8448eb211c80319c" {
		t.Fatalf("trace id %q, want the parent's", res.TraceID)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range c.spans {
		if s.Name == "execute_tool file.read" && hex.EncodeToString(s.ParentSpanId) != "b7ad6b7169203331" {
			t.Fatalf("invocation span's parent %x, want the TRACEPARENT's span", s.ParentSpanId)
		}
	}
}

// The hidden --max-time lowers the tool's limit: a timeout without a slow
// tool (file.read retries it, being idempotent).
func TestRun_MaxTime(t *testing.T) {
	workdir(t)
	res, r := runJSON(t, "--allow", "filesystem.read:.", "--input", `{"path":"big.txt"}`, "--max-time", "1ns")
	if r.code != ExitAborted || res.State != "ROLLED_BACK" || !strings.Contains(r.stdout, `"code": "timeout"`) {
		t.Fatalf("exit %d\n%s", r.code, r.stdout)
	}
	r = toolgate(t, "", "run", "file.read", "--allow", "filesystem.read:.", "--input", `{"path":"hello.txt"}`, "--max-time", "1h")
	if r.code != ExitFailed || !strings.Contains(r.stderr, "may only lower a limit") {
		t.Fatalf("raising the limit: exit %d\n%s", r.code, r.stderr)
	}
	if r := toolgate(t, "", "run", "--help"); strings.Contains(r.stdout, "max-time") {
		t.Fatal("--max-time is listed in the help")
	}
}
