package runtime

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"

	"github.com/toolgate/toolgate/tools"
)

// Process metric names (RFC-0001 8.2, resource usage).
const (
	metricProcCPU = "toolgate.process.cpu_time"
	metricProcRSS = "toolgate.process.max_rss"
)

// procMetrics records the resource usage of the processes tools run.
type procMetrics struct {
	cpu metric.Float64Histogram
	rss metric.Int64Histogram
}

func newProcMetrics(mp metric.MeterProvider) *procMetrics {
	switch mp.(type) {
	case nil, metricnoop.MeterProvider, *metricnoop.MeterProvider:
		return nil
	}
	m := mp.Meter(scope, metric.WithSchemaURL(semconv.SchemaURL))
	p := &procMetrics{}
	var err error
	if p.cpu, err = m.Float64Histogram(metricProcCPU, metric.WithUnit("s"),
		metric.WithDescription("CPU time (user and system) of each process a tool ran.")); err != nil {
		otel.Handle(err)
		p.cpu = metricnoop.Float64Histogram{}
	}
	if p.rss, err = m.Int64Histogram(metricProcRSS, metric.WithUnit("By"),
		metric.WithDescription("Largest resident set of each process a tool ran.")); err != nil {
		otel.Handle(err)
		p.rss = metricnoop.Int64Histogram{}
	}
	return p
}

// observer returns the Env hook that records a process of tool, or nil.
func (p *procMetrics) observer(tool string) func(*tools.ProcessResult) {
	if p == nil {
		return nil
	}
	return func(r *tools.ProcessResult) {
		attrs := []attribute.KeyValue{semconv.GenAIToolName(tool)}
		if r.Limit != "" {
			attrs = append(attrs, semconv.ErrorTypeKey.String(r.Limit))
		}
		set := metric.WithAttributes(attrs...)
		p.cpu.Record(context.Background(), (r.UserTime + r.SystemTime).Seconds(), set)
		p.rss.Record(context.Background(), r.MaxRSS, set)
	}
}
