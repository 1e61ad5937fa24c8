package mcp_test

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/capability"
	"github.com/toolgate/toolgate/mcp"
	tgruntime "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/tools"
)

var outputBytes = regexp.MustCompile(`; (\d+) bytes of output so far$`)

// A process tool's progress notifications report the bytes of output the
// process wrote so far. The process writes a line, waits for the test to
// have seen a notification counting it, writes a second, and waits again:
// the counts grow with the output, whatever the machine's speed.
func TestProgress_ProcessOutputBytes(t *testing.T) {
	dir := t.TempDir()
	reg := tools.NewRegistry()
	for _, tl := range tools.ProcessTools() {
		if err := reg.Register(tl); err != nil {
			t.Fatal(err)
		}
	}
	reg.Freeze()
	rt, err := tgruntime.Open(filepath.Join(dir, "tg.db"), &tgruntime.Options{Registry: reg, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(context.Background())
	p := newProgress()
	srv := &mcp.Options{Principal: principal, ProgressInterval: 10 * time.Millisecond, Grants: []capability.Capability{
		capability.MustParse("process.exec:sh"), capability.MustParse("filesystem.read:" + dir),
	}}
	cs := pipeSession(t, rt, srv, &sdk.ClientOptions{ProgressNotificationHandler: p.handler})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	const first, second = "first line\n", "a longer second line\n" // 11 and 21 bytes
	script := `printf 'first line\n'; while [ ! -e go ]; do sleep 0.01; done; ` +
		`printf 'a longer second line\n'; while [ ! -e done ]; do sleep 0.01; done`
	params := &sdk.CallToolParams{Name: "exec_capture", Arguments: map[string]any{"command": "sh", "args": []string{"-c", script}, "cwd": dir}}
	params.SetProgressToken("out")
	res := make(chan *sdk.CallToolResult, 1)
	go func() {
		r, err := cs.CallTool(ctx, params)
		if err != nil {
			t.Error(err)
		}
		res <- r
	}()
	// waitFor waits for a notification counting want bytes and returns
	// every count seen so far.
	seen := 0
	var counts []int
	waitFor := func(want int) {
		t.Helper()
		for {
			p.mu.Lock()
			got := p.got[seen:]
			seen = len(p.got)
			p.mu.Unlock()
			for _, n := range got {
				m := outputBytes.FindStringSubmatch(n.Message)
				if m == nil {
					t.Fatalf("progress message %q does not count the output", n.Message)
				}
				c, _ := strconv.Atoi(m[1])
				counts = append(counts, c)
				if c == want {
					return
				}
			}
			select {
			case <-p.ch:
			case <-ctx.Done():
				t.Fatalf("no progress notification counting %d bytes; %d notifications, the last counting %v", want, len(counts), counts[max(0, len(counts)-3):])
			}
		}
	}
	waitFor(len(first))
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	waitFor(len(first) + len(second))
	if err := os.WriteFile(filepath.Join(dir, "done"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	completed(t, <-res)
	for i := 1; i < len(counts); i++ {
		if counts[i] < counts[i-1] {
			t.Errorf("the byte counts went down: %v", counts)
		}
	}
}
