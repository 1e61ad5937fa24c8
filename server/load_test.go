package server_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"runtime/metrics"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/internal/bench"
	tgruntime "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/txn"
)

// TestLoad drives the server through the client package with 64
// concurrent clients over loopback for 20 s (TOOLGATE_LOAD_DURATION
// overrides; at most 200,000 requests), with durable commits, then runs the
// in-process `toolgate bench` for comparison. It fails if a request was
// lost: every accepted request must have exactly one execution record.
func TestLoad(t *testing.T) {
	duration := 20 * time.Second
	if s := os.Getenv("TOOLGATE_LOAD_DURATION"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			t.Fatalf("TOOLGATE_LOAD_DURATION=%q: not a positive duration", s)
		}
		duration = d
	}
	const clients, maxRequests = 64, 200_000
	f := newFixtureWith(t, nil, nil, false) // durable commits, as in production
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients, MaxConnsPerHost: clients}}
	c, err := client.New(f.http.URL, agentToken, hc)
	if err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), duration)
	defer cancel()
	var (
		mu        sync.Mutex
		latencies []time.Duration
		accepted  = map[string]bool{}
		failures  = map[string]int{}
		issued    int
	)
	start := time.Now()
	var wg sync.WaitGroup
	for w := range clients {
		wg.Go(func() {
			for n := 0; ; n++ {
				mu.Lock()
				if ctx.Err() != nil || issued >= maxRequests {
					mu.Unlock()
					return
				}
				issued++
				mu.Unlock()
				callID := fmt.Sprintf("load-%02d-%06d", w, n)
				in := client.Invocation{Tool: "test.echo", Input: []byte(fmt.Sprintf(`{"msg":"%s"}`, callID)), CallID: callID}
				t0 := time.Now()
				res, err := c.Execute(context.Background(), in) // not ctx: a request once sent is seen through
				d := time.Since(t0)
				mu.Lock()
				switch {
				case err == nil && res.State == "COMPLETED":
					latencies = append(latencies, d)
					accepted[callID] = true
				default:
					failures[fmt.Sprint(err)]++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if len(failures) > 0 {
		t.Errorf("failed requests: %v", failures)
	}
	recs, err := f.rt.Executions(context.Background(), txn.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	perCall := map[string]int{}
	for _, r := range recs {
		perCall[r.CallID]++
	}
	lost := 0
	for id := range accepted {
		if perCall[id] != 1 {
			lost++
			if lost < 5 {
				t.Errorf("accepted call %s has %d execution records", id, perCall[id])
			}
		}
	}
	slices.Sort(latencies)
	pct := func(p float64) time.Duration {
		if len(latencies) == 0 {
			return 0
		}
		return latencies[min(len(latencies)-1, int(p*float64(len(latencies))))]
	}
	t.Logf("HTTP, %d clients, durable: %d requests in %v: %.0f req/s, p50 %v, p99 %v; %d lost",
		clients, len(latencies), elapsed.Round(time.Millisecond), float64(len(latencies))/elapsed.Seconds(),
		pct(0.50).Round(time.Microsecond), pct(0.99).Round(time.Microsecond), lost)

	rep, err := bench.Run(context.Background(), bench.Options{Callers: clients, Duration: 2 * time.Second, Sync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("in-process toolgate bench, same run, durable: runtime w%d %.0f ops/s p50 %.0fus p99 %.0fus; w1 %.0f ops/s; floor w1 %.0f ops/s",
		clients, rep.Runtime.WN.OpsPerS, rep.Runtime.WN.P50us, rep.Runtime.WN.P99us, rep.Runtime.W1.OpsPerS, rep.Floor.W1.OpsPerS)
}

// TestServer_HostileLoadMemoryBound sends many more concurrent oversized
// bodies than the server admits, of every kind it refuses: over
// maxBodyBytes by their Content-Length, over it with no length (chunked),
// and within it but over the runtime's MaxInputBytes (refused by rule 1, or
// by Propose). The server's heap, sampled throughout, stays under the bound
// the README states, derived from the configuration: at most
// 2 x maxConcurrent bodies held at once, each costing at most
// 3 x maxBodyBytes while it is read and decoded, plus a constant, and twice
// that for the garbage collector's headroom (GOGC=100).
func TestServer_HostileLoadMemoryBound(t *testing.T) {
	const (
		maxConcurrent = 2
		maxBody       = 1 << 20
		maxInput      = 256 << 10
		clients       = 24 // each with one connection: far more than the server reads at once
		rounds        = 8  // requests per client
	)
	cfg := testConfig()
	cfg.MaxConcurrent, cfg.MaxBodyBytes = maxConcurrent, maxBody
	f := newFixtureWith(t, cfg, nil, true, func(o *tgruntime.Options) { o.MaxInputBytes = maxInput })

	numbers := func(n int) []byte { // a JSON array of about n bytes of numbers
		b := append(make([]byte, 0, n+32), '[')
		for i := 0; len(b) < n; i++ {
			if i > 0 {
				b = append(b, ',')
			}
			b = fmt.Appendf(b, "%d.%d", i, i%7)
		}
		return append(b, ']')
	}
	within := append(append([]byte(`{"input":`), numbers(maxBody-64)...), '}')                      // passes the server, over MaxInputBytes
	proposal := append(append([]byte(`{"tool":"test.echo","input":`), numbers(maxBody-64)...), '}') // the same through Propose
	over := append(append([]byte(`{"input":`), numbers(4*maxBody)...), '}')                         // over maxBodyBytes
	kinds := []struct {
		name, path string
		body       []byte
		chunked    bool // no Content-Length: the server finds out by reading
		want       int
	}{
		{"within the body limit, over the input limit", "/v1/tools/test.echo/execute", within, false, http.StatusUnprocessableEntity},
		{"proposal over the input limit", "/v1/intents", proposal, false, http.StatusUnprocessableEntity},
		{"over the body limit", "/v1/tools/test.echo/execute", over, false, http.StatusRequestEntityTooLarge},
		{"over the body limit, chunked", "/v1/tools/test.echo/execute", over, true, http.StatusRequestEntityTooLarge},
	}

	heap := func() uint64 {
		s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
		metrics.Read(s)
		return s[0].Value.Uint64()
	}
	runtime.GC()
	base := heap()
	// What is live: what was before, and 2 x maxConcurrent bodies of at
	// most 3 x maxBodyBytes each; the collector lets the heap grow to twice
	// that (GOGC=100); 8 MiB for the connections, records and audit events.
	bound := 2*(base+2*maxConcurrent*3*maxBody) + 8<<20

	var peak atomic.Uint64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			if h := heap(); h > peak.Load() {
				peak.Store(h)
			}
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Microsecond):
			}
		}
	}()

	var (
		mu       sync.Mutex
		statuses = map[string]map[int]int{}
		errs     = map[string]int{}
	)
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			hc := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 1}}
			defer hc.CloseIdleConnections()
			for n := range rounds {
				k := kinds[(c+n)%len(kinds)]
				var body io.Reader = bytes.NewReader(k.body)
				if k.chunked {
					body = io.MultiReader(body) // not a sized reader: sent chunked
				}
				req, err := http.NewRequest(http.MethodPost, f.http.URL+k.path, body)
				if err != nil {
					t.Error(err)
					return
				}
				req.Header.Set("Authorization", "Bearer "+agentToken)
				req.Header.Set("Content-Type", "application/json")
				resp, err := hc.Do(req)
				mu.Lock()
				if err != nil {
					errs[k.name]++ // a refused upload: the server may close before reading it all
				} else {
					if statuses[k.name] == nil {
						statuses[k.name] = map[int]int{}
					}
					statuses[k.name][resp.StatusCode]++
				}
				mu.Unlock()
				if err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	<-sampled

	t.Logf("heap: %d MiB before, peak %d MiB under load, bound %d MiB; statuses %v, connection errors %v",
		base>>20, peak.Load()>>20, bound>>20, statuses, errs)
	if peak.Load() > bound {
		t.Errorf("the heap reached %d MiB under hostile load, more than the %d MiB bound", peak.Load()>>20, bound>>20)
	}
	for _, k := range kinds {
		for code := range statuses[k.name] {
			if code != k.want && code != http.StatusServiceUnavailable {
				t.Errorf("%s: answered %d (want %d, or 503 busy)", k.name, code, k.want)
			}
		}
		if k.chunked || k.want != http.StatusRequestEntityTooLarge {
			if statuses[k.name][k.want] == 0 {
				t.Errorf("%s: never answered %d: %v, %d connection errors", k.name, k.want, statuses[k.name], errs[k.name])
			}
		}
	}
}
