package runtime

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/toolgate/toolgate/lifecycle"
)

// scope is the instrumentation scope of the runtime's spans and metrics.
const scope = "github.com/toolgate/toolgate/runtime"

// toolgate's own attributes. The GenAI ones (gen_ai.*) and error.type are
// the OpenTelemetry semantic conventions'; semconv v1.41.0 is the last
// release of the Go module that carries them.
const (
	keyExecutionID = attribute.Key("toolgate.execution.id")
	keyAttempt     = attribute.Key("toolgate.attempt")
	keyAttempts    = attribute.Key("toolgate.attempts")
	keyState       = attribute.Key("toolgate.lifecycle.state")
	keyEventID     = attribute.Key("toolgate.audit.event_id")
	keyEventHash   = attribute.Key("toolgate.audit.event_hash")
	keyToolVersion = attribute.Key("toolgate.tool.version")
)

// Metric names. gen_ai.execute_tool.duration is the GenAI semantic
// conventions'; the others are toolgate's (RFC-0001 8.2).
const (
	metricDuration   = "gen_ai.execute_tool.duration"
	metricExecutions = "toolgate.executions"
	metricDenials    = "toolgate.capability.denials"
	metricRollbacks  = "toolgate.rollbacks"
	metricRetries    = "toolgate.retries"
)

// durationBuckets are the explicit bucket boundaries, in seconds, that the
// GenAI semantic conventions give gen_ai.execute_tool.duration.
var durationBuckets = []float64{0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92}

var toolTypeFunction = semconv.GenAIToolTypeKey.String("function")

// telemetry is a runtime's tracer and instruments. The zero value emits
// nothing and costs nothing: Execute checks tracer and metrics before it
// reads a clock or builds an attribute.
type telemetry struct {
	tracer     trace.Tracer // nil: no spans
	recordArgs bool
	metrics    bool // the instruments are set
	executions metric.Int64Counter
	duration   metric.Float64Histogram
	denials    metric.Int64Counter
	rollbacks  metric.Int64Counter
	retries    metric.Int64Counter
}

// newTelemetry sets up the tracer and instruments of o's providers. The
// no-op providers count as none. An instrument that cannot be created is
// reported to the OpenTelemetry error handler and left a no-op: telemetry
// never fails Open.
func newTelemetry(o *Options) telemetry {
	t := telemetry{recordArgs: o.RecordArguments}
	switch tp := o.TracerProvider.(type) {
	case nil, tracenoop.TracerProvider, *tracenoop.TracerProvider:
	default:
		t.tracer = tp.Tracer(scope, trace.WithSchemaURL(semconv.SchemaURL))
	}
	switch mp := o.MeterProvider.(type) {
	case nil, metricnoop.MeterProvider, *metricnoop.MeterProvider:
	default:
		m := mp.Meter(scope, metric.WithSchemaURL(semconv.SchemaURL))
		t.metrics = true
		t.executions = counter(m, metricExecutions, "{execution}", "Execution attempts, by tool and final lifecycle state.")
		t.denials = counter(m, metricDenials, "{denial}", "Attempts denied a capability, at authorization (capability_denied) or by a handle during execution (capability_boundary).")
		t.rollbacks = counter(m, metricRollbacks, "{rollback}", "Attempts that ended ROLLED_BACK.")
		t.retries = counter(m, metricRetries, "{retry}", "Attempts retried under the retry policy, by the error that caused the retry.")
		h, err := m.Float64Histogram(metricDuration, metric.WithUnit("s"),
			metric.WithDescription("Duration of tool execution operations, retries included."),
			metric.WithExplicitBucketBoundaries(durationBuckets...))
		if err != nil {
			otel.Handle(err)
		}
		if h == nil {
			h = metricnoop.Float64Histogram{}
		}
		t.duration = h
	}
	return t
}

func counter(m metric.Meter, name, unit, desc string) metric.Int64Counter {
	c, err := m.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
	if err != nil {
		otel.Handle(err)
	}
	if c == nil {
		return metricnoop.Int64Counter{}
	}
	return c
}

func (t *telemetry) on() bool { return t.tracer != nil || t.metrics }

// errorType is the low-cardinality error.type of an error: its code.
func errorType(err error) string {
	if c := classOf(err); c != nil {
		return c.code()
	}
	return "_OTHER"
}

func infoType(info *ErrorInfo) string {
	if info.Code == "" {
		return "_OTHER"
	}
	return info.Code
}

// startTelemetry starts the invocation's clock and its span, named
// "execute_tool {tool}", a child of the span in ctx, if any. It returns the
// context for the attempts.
func (c *call) startTelemetry(ctx context.Context) context.Context {
	t := &c.r.tel
	c.start = time.Now()
	if t.tracer == nil {
		return ctx
	}
	ctx, span := t.tracer.Start(ctx, "execute_tool "+c.decl.ID,
		trace.WithSpanKind(trace.SpanKindInternal), trace.WithTimestamp(c.start),
		// Set at the start, so that samplers see them.
		trace.WithAttributes(semconv.GenAIOperationNameExecuteTool, semconv.GenAIToolName(c.decl.ID)))
	if !span.IsRecording() {
		return ctx
	}
	c.span = span
	span.SetAttributes(
		semconv.GenAIToolCallID(spanText(c.inv.CallID, maxSpanText)),
		semconv.GenAIToolDescription(c.decl.Description),
		toolTypeFunction,
		keyToolVersion.String(c.decl.Version),
	)
	if t.recordArgs {
		span.SetAttributes(semconv.GenAIToolCallArgumentsKey.String(spanText(string(c.inv.Input), maxSpanText)))
	}
	return ctx
}

// finishTelemetry ends the invocation's span and records its metrics.
func (c *call) finishTelemetry(ctx context.Context, res *Result) {
	t := &c.r.tel
	end := time.Now()
	errType := ""
	if res.Error != nil {
		errType = infoType(res.Error)
	}
	if t.metrics {
		tool := semconv.GenAIToolName(c.decl.ID)
		attrs := []attribute.KeyValue{tool, toolTypeFunction}
		if errType != "" {
			attrs = append(attrs, semconv.ErrorTypeKey.String(errType))
		}
		t.duration.Record(ctx, end.Sub(c.start).Seconds(), metric.WithAttributes(attrs...))
		for i := range res.Attempts {
			a := &res.Attempts[i]
			state := keyState.String(string(a.State))
			if a.Error == nil {
				t.executions.Add(ctx, 1, metric.WithAttributes(tool, state))
				continue
			}
			et := semconv.ErrorTypeKey.String(infoType(a.Error))
			t.executions.Add(ctx, 1, metric.WithAttributes(tool, state, et))
			switch a.Error.Code {
			case "capability_denied", "capability_boundary":
				t.denials.Add(ctx, 1, metric.WithAttributes(tool, et))
			}
			if a.State == lifecycle.RolledBack {
				t.rollbacks.Add(ctx, 1, metric.WithAttributes(tool, et))
			}
			if i < len(res.Attempts)-1 {
				t.retries.Add(ctx, 1, metric.WithAttributes(tool, et))
			}
		}
	}
	if span := c.span; span != nil {
		span.SetAttributes(
			keyState.String(string(res.State)),
			keyExecutionID.String(res.ExecutionID),
			keyAttempts.Int(len(res.Attempts)),
		)
		if t.recordArgs && len(res.Output) > 0 {
			span.SetAttributes(semconv.GenAIToolCallResultKey.String(spanText(string(res.Output), maxSpanText)))
		}
		if res.Error != nil {
			span.SetAttributes(semconv.ErrorTypeKey.String(errType))
			span.SetStatus(codes.Error, c.statusText(res.Error))
		}
		span.End(trace.WithTimestamp(end))
	}
}

// maxSpanText caps a caller-supplied string on a span (arguments, results,
// call ids, messages): a span is not the record of truth, and one huge
// attribute must not push an export batch past a collector's limit.
const maxSpanText = 8 << 10

// spanText makes s safe for a span attribute: valid UTF-8 (OTLP refuses
// anything else, and the whole export batch with it) and at most max bytes,
// marked when cut.
func spanText(s string, max int) string {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	if len(s) > max {
		s = runePrefix(s, max) + "...(truncated)"
	}
	return s
}

// statusText describes a failure for a span status: its class and code,
// and its message only with RecordArguments (messages may quote the input).
func (c *call) statusText(info *ErrorInfo) string {
	s := info.Type + " (" + info.Code + ")"
	if c.r.tel.recordArgs {
		s += ": " + spanText(info.Message, maxSpanText)
	}
	return s
}

// attemptSpans traces one attempt: its span, a child of the invocation's,
// and under it a span per lifecycle phase (validate, authorize, acquire,
// begin, execute, validate_output, commit, rollback: those that happened).
// A phase ends in at most one transition, whose audit event's id and hash
// its span carries. Events are built after the phase ends (several are
// written together), so an ended phase waits in done until flush. A nil
// *attemptSpans traces nothing: every method returns at once.
type attemptSpans struct {
	c      *call
	ctx    context.Context // the attempt span's: the phases' parent
	span   trace.Span
	cur    trace.Span // the phase in progress, if any
	done   []endedPhase
	events []auditRef // by transition index, once built
}

type endedPhase struct {
	span  trace.Span
	at    time.Time
	state lifecycle.State
	trans int // the transition's index in the attempt's history
	err   error
}

type auditRef struct{ id, hash string }

// startAttempt starts attempt n's span. It returns nil when the invocation
// is not traced.
func (c *call) startAttempt(ctx context.Context, executionID string, n int) (context.Context, *attemptSpans) {
	if c.span == nil {
		return ctx, nil
	}
	ctx, span := c.r.tel.tracer.Start(ctx, "attempt "+strconv.Itoa(n), trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(keyExecutionID.String(executionID), keyAttempt.Int(n)))
	return ctx, &attemptSpans{c: c, ctx: ctx, span: span, events: make([]auditRef, 0, 5)}
}

// phase starts the span of the next phase.
func (p *attemptSpans) phase(name string) {
	if p == nil {
		return
	}
	_, p.cur = p.c.r.tel.tracer.Start(p.ctx, name, trace.WithSpanKind(trace.SpanKindInternal))
}

// context returns ctx carrying the phase in progress, for the tool: spans
// it starts are the execute phase's children.
func (p *attemptSpans) context(ctx context.Context) context.Context {
	if p == nil || p.cur == nil {
		return ctx
	}
	return trace.ContextWithSpan(ctx, p.cur)
}

// transitioned ends the phase in progress in m's last transition, failing
// with err if it is not nil. Its span ends at flush.
func (p *attemptSpans) transitioned(m *lifecycle.Machine, err error) {
	if p == nil || p.cur == nil {
		return
	}
	h := m.History()
	p.done = append(p.done, endedPhase{span: p.cur, at: time.Now(), state: h[len(h)-1].To, trans: len(h) - 1, err: err})
	p.cur = nil
}

// ended ends the phase in progress without a transition: the attempt is
// still in state.
func (p *attemptSpans) ended(state lifecycle.State, err error) {
	if p == nil || p.cur == nil {
		return
	}
	p.endPhase(endedPhase{span: p.cur, state: state, trans: -1, err: err}, false)
	p.cur = nil
}

// event notes the audit event built for transition i: its id, and the hex
// SHA-256 of its bytes as stored.
func (p *attemptSpans) event(i int, id string, data []byte) {
	if p == nil {
		return
	}
	for len(p.events) <= i {
		p.events = append(p.events, auditRef{})
	}
	sum := sha256.Sum256(data)
	p.events[i] = auditRef{id: id, hash: hex.EncodeToString(sum[:])}
}

// flush ends the phases waiting for their audit events; stored says
// whether the events were written (if not, the spans carry none).
func (p *attemptSpans) flush(stored bool) {
	if p == nil {
		return
	}
	for _, e := range p.done {
		p.endPhase(e, stored)
	}
	p.done = p.done[:0]
}

func (p *attemptSpans) endPhase(e endedPhase, stored bool) {
	e.span.SetAttributes(keyState.String(string(e.state)))
	if stored && e.trans >= 0 && e.trans < len(p.events) {
		ev := p.events[e.trans]
		e.span.SetAttributes(keyEventID.String(ev.id), keyEventHash.String(ev.hash))
	}
	if e.err != nil {
		e.span.SetAttributes(semconv.ErrorTypeKey.String(errorType(e.err)))
		e.span.SetStatus(codes.Error, p.c.statusText(errorInfo(e.err)))
	}
	if e.at.IsZero() {
		e.span.End()
	} else {
		e.span.End(trace.WithTimestamp(e.at))
	}
}

// finish ends the attempt's span with its outcome.
func (p *attemptSpans) finish(a *Attempt) {
	if p == nil {
		return
	}
	p.flush(false) // none should be left; never leave a span open
	if p.cur != nil {
		p.cur.End()
	}
	p.span.SetAttributes(keyState.String(string(a.State)))
	if a.Error != nil {
		p.span.SetAttributes(semconv.ErrorTypeKey.String(infoType(a.Error)))
		p.span.SetStatus(codes.Error, p.c.statusText(a.Error))
	}
	p.span.End()
}
