package cli

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/server"
)

// toolgate serve logs one structured line per request on stderr, with the
// principal and the execution id; --no-request-log turns it off.
func TestServe_RequestLog(t *testing.T) {
	dir := workdir(t)
	cfg := filepath.Join(dir, "server.json")
	must(t, os.WriteFile(cfg, []byte(`{"tokens":[{"principal":"agent","sha256":"`+server.HashToken("tok")+`"}]}`), 0o600))
	policy := filepath.Join(dir, "policy.json")
	must(t, os.WriteFile(policy, []byte(`{"version":1,"principals":{"agent":["filesystem.read:`+dir+`"]}}`), 0o600))
	for _, quiet := range []bool{false, true} {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		must(t, err)
		addr := l.Addr().String()
		l.Close()
		args := []string{"serve", "--config", cfg, "--policy", policy, "--addr", addr}
		if quiet {
			args = append(args, "--no-request-log")
		}
		ctx, stop := context.WithCancel(context.Background())
		var out, errb syncBuffer
		done := make(chan int, 1)
		go func() { done <- Main(ctx, args, Stdio{In: strings.NewReader(""), Out: &out, Err: &errb}) }()
		c, err := client.New("http://"+addr, "tok", nil)
		must(t, err)
		waitServing(t, &errb, done)
		res, err := c.Execute(context.Background(), client.Invocation{Tool: "file.read", Input: json.RawMessage(`{"path":"hello.txt"}`)})
		if err != nil {
			t.Fatalf("execute through serve: %v\n%s", err, errb.String())
		}
		stop()
		if code := <-done; code != 0 {
			t.Fatalf("serve: exit %d\n%s", code, errb.String())
		}
		line := ""
		for _, l := range strings.Split(errb.String(), "\n") {
			if strings.Contains(l, "msg=request") && strings.Contains(l, "path=/v1/tools/file.read/execute") && strings.Contains(l, "status=200") {
				line = l
			}
		}
		switch {
		case quiet && strings.Contains(errb.String(), "msg=request"):
			t.Errorf("--no-request-log, yet:\n%s", errb.String())
		case !quiet && (line == "" || !strings.Contains(line, "method=POST") || !strings.Contains(line, "principal=agent") ||
			!strings.Contains(line, "executionId="+res.ExecutionID) || !strings.Contains(line, "duration=")):
			t.Errorf("no request log line for the execution %s:\n%s", res.ExecutionID, errb.String())
		}
	}
}
