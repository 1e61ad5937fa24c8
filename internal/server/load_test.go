package server_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/internal/bench"
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
