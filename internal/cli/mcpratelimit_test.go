package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/mcp"
	"github.com/toolgate/toolgate/server"
)

type lockedWriter struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *lockedWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

type bearerRT struct{ token string }

func (b bearerRT) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// toolgate mcp takes the "rateLimits" of toolgate serve's config file,
// over stdio (--config without --http) and over HTTP: the calls past the
// principal's burst are refused with retryAfter, and each refusal is logged
// on stderr.
func TestMCP_RateLimitsFromConfig(t *testing.T) {
	for _, transport := range []string{"stdio", "http"} {
		t.Run(transport, func(t *testing.T) {
			dir := workdir(t)
			cfg := filepath.Join(dir, "server.json")
			must(t, os.WriteFile(cfg, []byte(`{"tokens":[{"principal":"agent","sha256":"`+server.HashToken("tok")+`"}],`+
				`"rateLimits":{"perPrincipal":{"perSecond":0.001,"burst":2}}}`), 0o600))
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			stderr := &lockedWriter{}
			args := []string{"mcp", "--config", cfg, "--allow", "filesystem.read:.", "--no-local-socket"}
			done := make(chan int, 1)
			var tr sdk.Transport
			closeIn := func() {}
			if transport == "stdio" {
				crd, swr := io.Pipe()
				srd, cwr := io.Pipe()
				go func() {
					done <- Main(ctx, args, Stdio{In: srd, Out: swr, Err: stderr})
					swr.Close()
				}()
				tr, closeIn = &sdk.IOTransport{Reader: crd, Writer: cwr}, func() { cwr.Close() }
			} else {
				sctx, stop := context.WithCancel(ctx)
				defer stop()
				go func() {
					done <- Main(sctx, append(args, "--http", "127.0.0.1:0"), Stdio{In: strings.NewReader(""), Out: io.Discard, Err: stderr})
				}()
				re := regexp.MustCompile(`serving MCP on http://(\S+)`)
				var addr string
				if !waitFor(30*time.Second, func() bool {
					m := re.FindStringSubmatch(stderr.String())
					if m != nil {
						addr = m[1]
					}
					return m != nil
				}) {
					t.Fatalf("toolgate mcp --http did not start:\n%s", stderr.String())
				}
				tr, closeIn = &sdk.StreamableClientTransport{Endpoint: "http://" + addr, HTTPClient: &http.Client{Transport: bearerRT{"tok"}}, MaxRetries: -1}, stop
			}
			cs, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx, tr, nil)
			must(t, err)
			read := &sdk.CallToolParams{Name: "file.read", Arguments: map[string]any{"path": filepath.Join(dir, "hello.txt")}}
			for i := range 2 {
				res, err := cs.CallTool(ctx, read)
				must(t, err)
				if res.IsError {
					t.Fatalf("call %d, within the burst: %+v", i+1, res)
				}
			}
			res, err := cs.CallTool(ctx, read)
			must(t, err)
			var body struct {
				State string
				Error struct {
					Code       string
					RetryAfter int `json:"retryAfter"`
				}
			}
			if len(res.Content) == 1 {
				json.Unmarshal([]byte(res.Content[0].(*sdk.TextContent).Text), &body)
			}
			if !res.IsError || body.State != "REFUSED" || body.Error.Code != "rate_limited" || body.Error.RetryAfter < 1 || res.Meta[mcp.MetaRetryAfter] == nil {
				t.Fatalf("the call past the burst: %+v %+v; want REFUSED rate_limited with retryAfter", res, body)
			}
			cs.Close()
			closeIn()
			if code := <-done; code != 0 {
				t.Fatalf("toolgate mcp exited %d: %s", code, stderr.String())
			}
			if log := stderr.String(); !strings.Contains(log, `msg="call refused" code=rate_limited limit=perPrincipal principal=`) {
				t.Errorf("stderr does not log the refusal:\n%s", log)
			}
		})
	}
}
