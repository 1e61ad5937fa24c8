package runtime_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/lifecycle"
	tgruntime "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/tools"
)

// telemetry is a runtime wired to an in-memory span recorder and a manual
// metric reader.
type telemetry struct {
	rt      *tgruntime.Runtime
	spans   *tracetest.SpanRecorder
	metrics *sdkmetric.ManualReader
	tp      *sdktrace.TracerProvider
}

func openTraced(t *testing.T, opts *tgruntime.Options, ts ...tools.Tool) *telemetry {
	t.Helper()
	if opts == nil {
		opts = &tgruntime.Options{}
	}
	tel := &telemetry{spans: tracetest.NewSpanRecorder(), metrics: sdkmetric.NewManualReader()}
	tel.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(tel.spans))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(tel.metrics))
	t.Cleanup(func() {
		tel.tp.Shutdown(context.Background())
		mp.Shutdown(context.Background())
	})
	opts.TracerProvider, opts.MeterProvider = tel.tp, mp
	tel.rt, _ = openRuntime(t, opts, ts...)
	return tel
}

// execute runs inv under a caller span, as an application would, and
// returns the result and the caller's span context.
func (tel *telemetry) execute(t *testing.T, inv tgruntime.Invocation) (*tgruntime.Result, error, trace.SpanContext) {
	t.Helper()
	ctx, caller := tel.tp.Tracer("test").Start(context.Background(), "caller")
	res, err := tel.rt.Execute(ctx, inv)
	caller.End()
	return res, err, caller.SpanContext()
}

// tree is the ended spans of one trace, by parent.
type tree struct {
	all      []sdktrace.ReadOnlySpan
	children map[trace.SpanID][]sdktrace.ReadOnlySpan // in start order
}

func spanTree(t *testing.T, rec *tracetest.SpanRecorder, traceID trace.TraceID) tree {
	t.Helper()
	order := map[trace.SpanID]int{}
	for i, s := range rec.Started() {
		order[s.SpanContext().SpanID()] = i
	}
	tr := tree{children: map[trace.SpanID][]sdktrace.ReadOnlySpan{}}
	for _, s := range rec.Ended() {
		if s.SpanContext().TraceID() == traceID {
			tr.all = append(tr.all, s)
		}
	}
	slices.SortFunc(tr.all, func(a, b sdktrace.ReadOnlySpan) int {
		return order[a.SpanContext().SpanID()] - order[b.SpanContext().SpanID()]
	})
	for _, s := range tr.all {
		tr.children[s.Parent().SpanID()] = append(tr.children[s.Parent().SpanID()], s)
	}
	return tr
}

func attrs(s sdktrace.ReadOnlySpan) map[string]attribute.Value {
	m := map[string]attribute.Value{}
	for _, kv := range s.Attributes() {
		m[string(kv.Key)] = kv.Value
	}
	return m
}

func names(spans []sdktrace.ReadOnlySpan) []string {
	out := make([]string, len(spans))
	for i, s := range spans {
		out[i] = s.Name()
	}
	return out
}

// storedEvents maps audit event ids to the event bytes as stored.
func storedEvents(t *testing.T, rt *tgruntime.Runtime) map[string][]byte {
	t.Helper()
	log, err := rt.AuditLog(context.Background(), 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for _, e := range log {
		var ev audit.Event
		if err := json.Unmarshal(e.Event, &ev); err != nil {
			t.Fatal(err)
		}
		out[ev.EventID] = e.Event
	}
	return out
}

// checkInvocationSpan asserts the shape of one traced invocation: the
// execute_tool span under the caller, an attempt span per attempt under it,
// the phase spans under each attempt carrying the audit events of the
// attempt's record, in order, with their hashes. It returns the phase
// spans of each attempt.
func checkInvocationSpan(t *testing.T, tel *telemetry, res *tgruntime.Result, caller trace.SpanContext) (inv sdktrace.ReadOnlySpan, phases [][]sdktrace.ReadOnlySpan) {
	t.Helper()
	if res.TraceID != caller.TraceID().String() {
		t.Fatalf("result trace id %q, want the caller's %s", res.TraceID, caller.TraceID())
	}
	tr := spanTree(t, tel.spans, caller.TraceID())
	top := tr.children[caller.SpanID()]
	if len(top) != 1 || top[0].Name() != "execute_tool "+res.Tool {
		t.Fatalf("caller's children %v, want one execute_tool %s", names(top), res.Tool)
	}
	inv = top[0]
	if inv.SpanKind() != trace.SpanKindInternal {
		t.Fatalf("invocation span kind %v", inv.SpanKind())
	}
	a := attrs(inv)
	for k, want := range map[string]string{
		"gen_ai.operation.name":    "execute_tool",
		"gen_ai.tool.name":         res.Tool,
		"gen_ai.tool.call.id":      res.CallID,
		"gen_ai.tool.type":         "function",
		"toolgate.lifecycle.state": string(res.State),
		"toolgate.execution.id":    res.ExecutionID,
	} {
		if got := a[k].AsString(); got != want {
			t.Errorf("invocation span %s = %q, want %q", k, got, want)
		}
	}
	if !strings.HasPrefix(a["gen_ai.tool.description"].AsString(), "test tool ") {
		t.Errorf("gen_ai.tool.description = %q", a["gen_ai.tool.description"].AsString())
	}
	if a["toolgate.attempts"].AsInt64() != int64(len(res.Attempts)) {
		t.Errorf("toolgate.attempts = %d, want %d", a["toolgate.attempts"].AsInt64(), len(res.Attempts))
	}
	if res.Error == nil {
		if _, ok := a["error.type"]; ok || inv.Status().Code == codes.Error {
			t.Errorf("completed invocation has error.type %v, status %v", a["error.type"], inv.Status())
		}
	} else if a["error.type"].AsString() != res.Error.Code || inv.Status().Code != codes.Error {
		t.Errorf("invocation error.type %q status %v; want %q, Error", a["error.type"].AsString(), inv.Status(), res.Error.Code)
	}

	attempts := tr.children[inv.SpanContext().SpanID()]
	if len(attempts) != len(res.Attempts) {
		t.Fatalf("attempt spans %v for %d attempts", names(attempts), len(res.Attempts))
	}
	stored := storedEvents(t, tel.rt)
	for i, as := range attempts {
		att := res.Attempts[i]
		a := attrs(as)
		if as.Name() != "attempt "+string(rune('1'+i)) || a["toolgate.attempt"].AsInt64() != int64(i+1) ||
			a["toolgate.execution.id"].AsString() != att.ExecutionID || a["toolgate.lifecycle.state"].AsString() != string(att.State) {
			t.Fatalf("attempt span %s %v does not match attempt %+v", as.Name(), as.Attributes(), att)
		}
		if (att.Error != nil) != (as.Status().Code == codes.Error) || att.Error != nil && a["error.type"].AsString() != att.Error.Code {
			t.Fatalf("attempt span status %v, error.type %q; attempt error %+v", as.Status(), a["error.type"].AsString(), att.Error)
		}
		if as.StartTime().Before(inv.StartTime()) || as.EndTime().After(inv.EndTime()) {
			t.Fatalf("attempt span outside the invocation span")
		}
		ph := tr.children[as.SpanContext().SpanID()]
		rec := record(t, tel.rt, att.ExecutionID)
		if rec.TraceID != res.TraceID {
			t.Fatalf("record trace id %q, want %q", rec.TraceID, res.TraceID)
		}
		var ids []string
		var states []string
		for _, p := range ph {
			if p.StartTime().Before(as.StartTime()) || p.EndTime().After(as.EndTime()) {
				t.Fatalf("phase %s outside its attempt span", p.Name())
			}
			pa := attrs(p)
			state := pa["toolgate.lifecycle.state"].AsString()
			if state == "" {
				t.Fatalf("phase %s has no toolgate.lifecycle.state", p.Name())
			}
			id, ok := pa["toolgate.audit.event_id"]
			if !ok {
				continue
			}
			ids = append(ids, id.AsString())
			states = append(states, state)
			data, ok := stored[id.AsString()]
			if !ok {
				t.Fatalf("phase %s names audit event %s, which is not stored", p.Name(), id.AsString())
			}
			sum := sha256.Sum256(data)
			if got := pa["toolgate.audit.event_hash"].AsString(); got != hex.EncodeToString(sum[:]) {
				t.Fatalf("phase %s event hash %s, want SHA-256 of the stored event %x", p.Name(), got, sum)
			}
		}
		if !slices.Equal(ids, rec.AuditEvents) {
			t.Fatalf("attempt %d: phase spans carry audit events %v, the record lists %v", i+1, ids, rec.AuditEvents)
		}
		if want := statePath(rec)[1:]; !slices.Equal(states, want) {
			t.Fatalf("attempt %d: phase spans reached %v, the record %v", i+1, states, want)
		}
		phases = append(phases, ph)
	}
	return inv, phases
}

func TestTelemetry_Completed(t *testing.T) {
	tel := openTraced(t, nil, echo("test.echo"))
	res, err, caller := tel.execute(t, invoke("test.echo", `{"msg":"secret"}`))
	if err != nil {
		t.Fatal(err)
	}
	inv, phases := checkInvocationSpan(t, tel, res, caller)
	want := []string{"validate", "authorize", "acquire", "begin", "execute", "validate_output", "commit"}
	if got := names(phases[0]); !slices.Equal(got, want) {
		t.Fatalf("phases %v, want %v", got, want)
	}
	for _, p := range phases[0] {
		if p.Status().Code == codes.Error {
			t.Fatalf("phase %s failed", p.Name())
		}
	}
	// Arguments and results are opt-in.
	for _, s := range append([]sdktrace.ReadOnlySpan{inv}, phases[0]...) {
		for _, kv := range s.Attributes() {
			if strings.Contains(kv.Value.Emit(), "secret") || strings.HasPrefix(string(kv.Key), "gen_ai.tool.call.a") ||
				strings.HasPrefix(string(kv.Key), "gen_ai.tool.call.r") {
				t.Fatalf("span %s carries %s without RecordArguments", s.Name(), kv.Key)
			}
		}
	}
}

// Every way an attempt ends: the span's error.type and status, and the
// phases that happened, each ending in its transition.
func TestTelemetry_Failures(t *testing.T) {
	slow := tool(decl("test.slow", limit(20*time.Millisecond)), func(ctx context.Context, env *tools.Env, in msg) (msg, error) {
		<-ctx.Done()
		return msg{}, ctx.Err()
	})
	boom := tool(decl("test.boom"), func(ctx context.Context, env *tools.Env, in msg) (msg, error) {
		return msg{}, errors.New("boom")
	})
	panics := tool(decl("test.panic"), func(ctx context.Context, env *tools.Env, in msg) (msg, error) {
		panic("kaboom")
	})
	badOut := tool(decl("test.badout"), func(ctx context.Context, env *tools.Env, in msg) (msg, error) {
		return msg{Msg: strings.Repeat("y", 100)}, nil
	})
	bigOut := echo("test.bigout", func(d *tools.Declaration) { d.ResourceLimits.MaxOutputBytes = 5 })
	tel := openTraced(t, nil, echo("test.echo"), slow, boom, panics, badOut, bigOut)
	cases := []struct {
		name, tool, input string
		principal         string
		state             lifecycle.State
		code              string
		phases            []string
		failed            string // the phase whose span has status Error
		reached           string // the state the failed phase reached
	}{
		{"failed", "test.echo", `{"msg":1}`, "tester", lifecycle.Failed, "invalid_input", []string{"validate"}, "validate", "FAILED"},
		{"denied", "test.echo", `{"msg":"x"}`, "nobody", lifecycle.Denied, "capability_denied", []string{"validate", "authorize"}, "authorize", "DENIED"},
		{"timeout", "test.slow", `{"msg":"x"}`, "tester", lifecycle.RolledBack, "timeout",
			[]string{"validate", "authorize", "acquire", "begin", "execute", "rollback"}, "execute", "ABORTED"},
		{"tool error", "test.boom", `{"msg":"x"}`, "tester", lifecycle.RolledBack, "tool_error",
			[]string{"validate", "authorize", "acquire", "begin", "execute", "rollback"}, "execute", "EXECUTING"},
		{"panic", "test.panic", `{"msg":"x"}`, "tester", lifecycle.RolledBack, "panic",
			[]string{"validate", "authorize", "acquire", "begin", "execute", "rollback"}, "execute", "EXECUTING"},
		{"invalid output", "test.badout", `{"msg":"x"}`, "tester", lifecycle.RolledBack, "invalid_output",
			[]string{"validate", "authorize", "acquire", "begin", "execute", "validate_output", "rollback"}, "validate_output", "EXECUTING"},
		{"output limit", "test.bigout", `{"msg":"too long"}`, "tester", lifecycle.RolledBack, "output_limit",
			[]string{"validate", "authorize", "acquire", "begin", "execute", "validate_output", "rollback"}, "validate_output", "ABORTED"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			inv := invoke(tc.tool, tc.input)
			inv.Principal = tc.principal
			res, err, caller := tel.execute(t, inv)
			if err == nil || res.State != tc.state || res.Error.Code != tc.code {
				t.Fatalf("state %s, error %+v; want %s %s", res.State, res.Error, tc.state, tc.code)
			}
			_, phases := checkInvocationSpan(t, tel, res, caller)
			if got := names(phases[0]); !slices.Equal(got, tc.phases) {
				t.Fatalf("phases %v, want %v", got, tc.phases)
			}
			for _, p := range phases[0] {
				failed := p.Status().Code == codes.Error
				if failed != (p.Name() == tc.failed) {
					t.Fatalf("phase %s status %v; want only %s failed", p.Name(), p.Status(), tc.failed)
				}
				if !failed {
					continue
				}
				if a := attrs(p); a["error.type"].AsString() != tc.code || a["toolgate.lifecycle.state"].AsString() != tc.reached {
					t.Fatalf("failed phase %s: error.type %q, reached %s; want %q, %s", p.Name(),
						a["error.type"].AsString(), a["toolgate.lifecycle.state"].AsString(), tc.code, tc.reached)
				}
			}
			if msg := res.Error.Message; strings.Contains(phases[0][len(phases[0])-1].Status().Description, msg) {
				t.Fatalf("error message %q in a span status without RecordArguments", msg)
			}
		})
	}
}

// No free slot: the acquire phase ends ABORTED, a rollback phase follows.
func TestTelemetry_NoSlot(t *testing.T) {
	started, release := make(chan struct{}, 1), make(chan struct{})
	tel := openTraced(t, &tgruntime.Options{MaxConcurrent: 1, SlotWait: -1}, blocker(started, release), echo("test.echo"))
	done := make(chan struct{})
	go func() {
		defer close(done)
		tel.rt.Execute(context.Background(), invoke("test.block", `{"msg":"x"}`))
	}()
	<-started
	res, _, caller := tel.execute(t, invoke("test.echo", `{"msg":"x"}`))
	close(release)
	<-done
	if res.Error == nil || res.Error.Code != "resource_unavailable" {
		t.Fatalf("error %+v", res.Error)
	}
	_, phases := checkInvocationSpan(t, tel, res, caller)
	if got, want := names(phases[0]), []string{"validate", "authorize", "acquire", "rollback"}; !slices.Equal(got, want) {
		t.Fatalf("phases %v, want %v", got, want)
	}
}

// Retries are attempts: one invocation span, an attempt span each.
func TestTelemetry_Retries(t *testing.T) {
	var calls atomic.Int32
	tel := openTraced(t, &tgruntime.Options{Retry: tgruntime.RetryPolicy{MaxRetries: 2}}, flaky(2, &calls, idempotent))
	res, err, caller := tel.execute(t, invoke("test.flaky", `{"msg":"x"}`))
	if err != nil || len(res.Attempts) != 3 {
		t.Fatalf("err %v, %d attempts", err, len(res.Attempts))
	}
	inv, phases := checkInvocationSpan(t, tel, res, caller)
	if len(phases) != 3 || phases[2][len(phases[2])-1].Name() != "commit" {
		t.Fatalf("phases %v", phases)
	}
	if inv.Status().Code == codes.Error {
		t.Fatal("an invocation that completed on retry is marked failed")
	}
}

func TestTelemetry_RecordArguments(t *testing.T) {
	boom := tool(decl("test.boom"), func(ctx context.Context, env *tools.Env, in msg) (msg, error) {
		return msg{}, errors.New("boom: " + in.Msg)
	})
	tel := openTraced(t, &tgruntime.Options{RecordArguments: true}, echo("test.echo"), boom)
	res, _, caller := tel.execute(t, invoke("test.echo", `{"msg":"hi"}`))
	inv, _ := checkInvocationSpan(t, tel, res, caller)
	a := attrs(inv)
	if a["gen_ai.tool.call.arguments"].AsString() != `{"msg":"hi"}` || a["gen_ai.tool.call.result"].AsString() != `{"msg":"hi"}` {
		t.Fatalf("arguments %q, result %q", a["gen_ai.tool.call.arguments"].AsString(), a["gen_ai.tool.call.result"].AsString())
	}
	res, _, caller = tel.execute(t, invoke("test.boom", `{"msg":"why"}`))
	inv, _ = checkInvocationSpan(t, tel, res, caller)
	if !strings.Contains(inv.Status().Description, "boom: why") {
		t.Fatalf("status %q lacks the error message", inv.Status().Description)
	}
	if _, ok := attrs(inv)["gen_ai.tool.call.result"]; ok {
		t.Fatal("a failed invocation has a result")
	}
}

// The trace id of a caller's span is the invocation's even without a
// tracer of the runtime's own, and without any nothing is traced.
func TestTelemetry_NoProvider(t *testing.T) {
	rt, _ := openRuntime(t, nil, echo("test.echo"))
	res, err := rt.Execute(context.Background(), invoke("test.echo", `{"msg":"x"}`))
	if err != nil || res.TraceID != "" || record(t, rt, res.ExecutionID).TraceID != "" {
		t.Fatalf("untraced: trace id %q, %v", res.TraceID, err)
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4}, TraceFlags: trace.FlagsSampled, Remote: true})
	ctx := trace.ContextWithRemoteSpanContext(context.Background(), sc)
	res, err = rt.Execute(ctx, invoke("test.echo", `{"msg":"x"}`))
	if err != nil || res.TraceID != sc.TraceID().String() || record(t, rt, res.ExecutionID).TraceID != res.TraceID {
		t.Fatalf("remote parent: trace id %q, %v", res.TraceID, err)
	}

	// The no-op providers are as good as none.
	rt, _ = openRuntime(t, &tgruntime.Options{TracerProvider: noop.NewTracerProvider()}, echo("test.echo"))
	res, err = rt.Execute(ctx, invoke("test.echo", `{"msg":"x"}`))
	if err != nil || res.TraceID != sc.TraceID().String() {
		t.Fatalf("no-op provider: trace id %q, %v", res.TraceID, err)
	}
}

// A sampler that drops the invocation: no child spans, the trace id stays.
func TestTelemetry_NotSampled(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithSampler(sdktrace.NeverSample()))
	rt, _ := openRuntime(t, &tgruntime.Options{TracerProvider: tp}, echo("test.echo"))
	res, err := rt.Execute(context.Background(), invoke("test.echo", `{"msg":"x"}`))
	if err != nil || res.TraceID == "" {
		t.Fatalf("trace id %q, %v", res.TraceID, err)
	}
	if n := len(rec.Started()); n != 0 {
		t.Fatalf("%d spans started for a dropped trace", n)
	}
}

func TestTelemetry_Metrics(t *testing.T) {
	var calls atomic.Int32
	tel := openTraced(t, &tgruntime.Options{Retry: tgruntime.RetryPolicy{MaxRetries: 1}},
		echo("test.echo"), flaky(100, &calls, idempotent),
		tool(decl("test.boom"), func(ctx context.Context, env *tools.Env, in msg) (msg, error) {
			return msg{}, errors.New("boom")
		}))
	run := func(id, input, principal string) {
		inv := invoke(id, input)
		inv.Principal = principal
		tel.rt.Execute(context.Background(), inv)
	}
	run("test.echo", `{"msg":"a"}`, "tester")
	run("test.echo", `{"msg":"b"}`, "tester")
	run("test.echo", `{"msg":"c"}`, "nobody")  // DENIED
	run("test.echo", `{"msg":1}`, "tester")    // FAILED
	run("test.boom", `{"msg":"d"}`, "tester")  // ROLLED_BACK
	run("test.flaky", `{"msg":"e"}`, "tester") // timeout, retried once: two attempts ROLLED_BACK

	var rm metricdata.ResourceMetrics
	if err := tel.metrics.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]metricdata.Aggregation{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != "github.com/toolgate/toolgate/runtime" {
			t.Fatalf("scope %q", sm.Scope.Name)
		}
		for _, m := range sm.Metrics {
			got[m.Name] = m.Data
		}
	}
	key := func(set attribute.Set, keys ...string) string {
		var parts []string
		for _, k := range keys {
			v, _ := set.Value(attribute.Key(k))
			parts = append(parts, v.Emit())
		}
		return strings.Join(parts, " ")
	}
	sums := func(name string, keys ...string) map[string]int64 {
		t.Helper()
		s, ok := got[name].(metricdata.Sum[int64])
		if !ok || !s.IsMonotonic {
			t.Fatalf("%s: %T, want a monotonic int64 sum", name, got[name])
		}
		out := map[string]int64{}
		for _, dp := range s.DataPoints {
			out[key(dp.Attributes, keys...)] += dp.Value
		}
		return out
	}
	check := func(name string, got, want map[string]int64) {
		t.Helper()
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%s{%s} = %d, want %d (all: %v)", name, k, got[k], v, got)
			}
		}
		if len(got) != len(want) {
			t.Errorf("%s: %v, want %v", name, got, want)
		}
	}
	check("toolgate.executions", sums("toolgate.executions", "gen_ai.tool.name", "toolgate.lifecycle.state", "error.type"), map[string]int64{
		"test.echo COMPLETED ":               2,
		"test.echo DENIED capability_denied": 1,
		"test.echo FAILED invalid_input":     1,
		"test.boom ROLLED_BACK tool_error":   1,
		"test.flaky ROLLED_BACK timeout":     2,
	})
	check("toolgate.capability.denials", sums("toolgate.capability.denials", "gen_ai.tool.name", "error.type"), map[string]int64{
		"test.echo capability_denied": 1,
	})
	check("toolgate.rollbacks", sums("toolgate.rollbacks", "gen_ai.tool.name", "error.type"), map[string]int64{
		"test.boom tool_error": 1,
		"test.flaky timeout":   2,
	})
	check("toolgate.retries", sums("toolgate.retries", "gen_ai.tool.name", "error.type"), map[string]int64{
		"test.flaky timeout": 1,
	})

	h, ok := got["gen_ai.execute_tool.duration"].(metricdata.Histogram[float64])
	if !ok {
		t.Fatalf("gen_ai.execute_tool.duration: %T", got["gen_ai.execute_tool.duration"])
	}
	counts := map[string]uint64{}
	buckets := []float64{0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92}
	for _, dp := range h.DataPoints {
		counts[key(dp.Attributes, "gen_ai.tool.name", "gen_ai.tool.type", "error.type")] += dp.Count
		if !slices.Equal(dp.Bounds, buckets) || dp.Sum <= 0 {
			t.Fatalf("histogram bounds %v, sum %v", dp.Bounds, dp.Sum)
		}
	}
	want := map[string]uint64{
		"test.echo function ":                  2,
		"test.echo function capability_denied": 1,
		"test.echo function invalid_input":     1,
		"test.boom function tool_error":        1,
		"test.flaky function timeout":          1, // one invocation, its retries included
	}
	if !maps.Equal(counts, want) {
		t.Fatalf("duration counts %v, want %v", counts, want)
	}
}

// Caller-supplied text reaches spans as valid UTF-8 (OTLP drops a whole
// export batch otherwise) and capped in size. (A call id that is not plain
// text is refused before anything runs: TestExecute_InvocationIdentity.)
func TestTelemetry_SpanTextIsSafe(t *testing.T) {
	big := tool(decl("test.big", func(d *tools.Declaration) {
		d.InputSchema = json.RawMessage(`{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object",
			"properties":{"msg":{"type":"string","description":"a message"}},"required":["msg"],"additionalProperties":false}`)
		d.OutputSchema = d.InputSchema
	}), func(ctx context.Context, env *tools.Env, in msg) (msg, error) { return in, nil })
	tel := openTraced(t, &tgruntime.Options{RecordArguments: true}, big)
	inv := invoke("test.big", `{"msg":"`+strings.Repeat("é", 20000)+`"}`)
	inv.CallID = "call-" + strings.Repeat("9", tgruntime.MaxCallID-len("call-"))
	tel.execute(t, inv)
	var a map[string]attribute.Value
	for _, s := range tel.spans.Ended() {
		if s.Name() == "execute_tool test.big" {
			a = attrs(s)
		}
	}
	for _, k := range []string{"gen_ai.tool.call.id", "gen_ai.tool.call.arguments", "gen_ai.tool.call.result"} {
		v := a[k].AsString()
		if !utf8.ValidString(v) || len(v) > 9<<10 || v == "" {
			t.Fatalf("%s: %d bytes, valid UTF-8 %v", k, len(v), utf8.ValidString(v))
		}
	}
	if !strings.HasSuffix(a["gen_ai.tool.call.arguments"].AsString(), "(truncated)") {
		t.Fatal("a cut argument is not marked")
	}
}
