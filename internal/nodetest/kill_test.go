// Package nodetest holds the test of several toolgate servers sharing one
// Postgres database while they are killed and restarted.
package nodetest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/toolgate/toolgate/internal/testdb"
	"github.com/toolgate/toolgate/server"
	"github.com/toolgate/toolgate/txn"
)

// TestKilledServersOnePostgres runs three `toolgate serve` processes on one
// Postgres database, spreads calls over them (keyed calls, approved
// intents, plain calls; each tool appends its tag to a file outside
// toolgate), and kills a server with SIGKILL at random, restarting it under
// its node name, at least 50 times. Then: every acknowledged call is stored
// COMPLETED with its audit events; no keyed call and no intent ran twice (the file); nothing is
// EXECUTING once the leases have expired; `toolgate audit verify` passes.
//
// It needs Postgres: bash scripts/pg-test.sh run go test -race ./internal/nodetest
func TestKilledServersOnePostgres(t *testing.T) {
	base := os.Getenv("TOOLGATE_TEST_POSTGRES")
	if base == "" {
		t.Skip("TOOLGATE_TEST_POSTGRES is not set; run it with: bash scripts/pg-test.sh run go test ./internal/nodetest")
	}
	if testing.Short() {
		t.Skip("-short: the kill test runs for about a minute")
	}
	const (
		servers = 3
		kills   = 51
		lease   = time.Second
	)
	dir := t.TempDir()
	if d := os.Getenv("KILLTEST_DIR"); d != "" { // to keep the servers' logs and the file
		dir = d
	}
	bin := filepath.Join(dir, "toolgate")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/toolgate/toolgate/cmd/toolgate").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	dbURL := freshDatabase(t, base)
	effects := filepath.Join(dir, "effects.log")
	registry := filepath.Join(dir, "registry.yaml")
	tool := func(id string, approval bool) string {
		return fmt.Sprintf(`  - id: %s
    version: 1.0.0
    description: Appends its tag to a file outside toolgate
    command: sh
    search_path: /usr/bin:/bin
    argv: ["-c", "printf '%%s\\n' \"$1\" >> %s; sleep 0.05", "sh", "{tag}"]
    input_schema:
      $schema: https://json-schema.org/draft/2020-12/schema
      type: object
      properties:
        tag: {type: string, pattern: "^[a-z0-9-]+$", description: the line to append}
      required: [tag]
      additionalProperties: false
    limits: {max_execution_time: 20s}
    requires_approval: %v
`, id, effects, approval)
	}
	must(t, os.WriteFile(registry, []byte("tools:\n"+tool("kill.append", false)+tool("kill.approved", true)), 0o600))
	policy := filepath.Join(dir, "policy.json")
	must(t, os.WriteFile(policy, []byte(`{"version":1,"principals":{"agent":["process.exec:sh"]}}`), 0o600))
	config := filepath.Join(dir, "server.json")
	must(t, os.WriteFile(config, []byte(`{"tokens":[{"principal":"agent","sha256":"`+server.HashToken("tok-agent")+
		`"},{"principal":"alice","sha256":"`+server.HashToken("tok-alice")+`","approver":true}],"maxConcurrent":64}`), 0o600))

	nodes := make([]*node, servers)
	for i := range nodes {
		nodes[i] = &node{t: t, name: fmt.Sprintf("node-%d", i), addr: freeAddr(t), dir: dir,
			args: []string{"--db", dbURL, "--registry", registry, "--policy", policy, "serve", "--config", config, "--no-request-log"}, bin: bin,
			env: []string{"TOOLGATE_LEASE=" + lease.String()}}
		must(t, nodes[i].start())
	}
	defer func() {
		for _, n := range nodes {
			n.stop(syscall.SIGKILL)
		}
	}()

	// The kills: one every 100 to 400 ms, of a server chosen at random,
	// restarted at once under its node name.
	var killed atomic.Int32
	stopCalls := make(chan struct{})
	go func() {
		defer close(stopCalls)
		for killed.Load() < kills {
			time.Sleep(time.Duration(100+mrand.IntN(300)) * time.Millisecond)
			n := nodes[mrand.IntN(len(nodes))]
			n.stop(syscall.SIGKILL)
			killed.Add(1)
			if err := n.start(); err != nil {
				t.Error(err)
				return
			}
		}
	}()

	c := &caller{nodes: nodes, http: &http.Client{Timeout: 30 * time.Second}}
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stopCalls:
					return
				default:
				}
				switch tag := fmt.Sprintf("w%d-%d", w, i); i % 3 {
				case 0:
					c.keyed("k-" + tag)
				case 1:
					c.intent("i-" + tag)
				default:
					c.plain("p-" + tag)
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("%d kills; %d calls acknowledged (answers: %d keyed, %d intents)", killed.Load(), len(c.acked), c.keyedAcks, c.intentAcks)

	// Nothing EXECUTING once the leases have expired: the servers (all
	// running) finish what the killed runs left.
	ctx := context.Background()
	check, err := pgx.Connect(ctx, dbURL)
	must(t, err)
	defer check.Close(ctx)
	time.Sleep(3 * lease)
	var executing int
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		must(t, check.QueryRow(ctx, `SELECT count(*) FROM toolgate_executions WHERE executing`).Scan(&executing))
		if executing == 0 || time.Now().After(deadline) {
			break
		}
	}
	if executing != 0 {
		t.Errorf("%d executions are still EXECUTING after the leases expired", executing)
	}
	for _, n := range nodes {
		n.stop(syscall.SIGTERM)
	}

	// The file: no keyed call, no intent ran twice; every acknowledged
	// call ran.
	data, err := os.ReadFile(effects)
	must(t, err)
	ran := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		ran[line]++
	}
	for tag, n := range ran {
		if n > 1 && !strings.HasPrefix(tag, "p-") {
			t.Errorf("%s ran %d times", tag, n)
		}
	}
	store, err := txn.Open(dbURL, &txn.Options{ReadOnly: true})
	must(t, err)
	defer store.Close()
	for tag, id := range c.acked {
		if ran[tag] == 0 {
			t.Errorf("acknowledged call %s never ran", tag)
		}
		rec, err := store.Get(ctx, id)
		if err != nil || rec.State != "COMPLETED" || len(rec.AuditEvents) == 0 {
			t.Errorf("acknowledged call %s: execution %s not stored COMPLETED with its events: %v", tag, id, err)
		}
	}
	out, err := exec.Command(bin, "--db", dbURL, "audit", "verify").CombinedOutput()
	if err != nil {
		t.Errorf("toolgate audit verify: %v\n%s", err, out)
	}
	if killed.Load() < kills || len(c.acked) == 0 || c.keyedAcks == 0 || c.intentAcks == 0 {
		t.Errorf("too little happened: %d kills, %d acknowledged calls (%d keyed, %d intents)", killed.Load(), len(c.acked), c.keyedAcks, c.intentAcks)
	}
}

type node struct {
	t         *testing.T
	name      string
	addr, dir string
	bin       string
	args, env []string

	mu  sync.Mutex
	cmd *exec.Cmd
}

func (n *node) start() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	cmd := exec.Command(n.bin, append(n.args, "--addr", n.addr)...)
	cmd.Env = append(os.Environ(), append(n.env, "TOOLGATE_NODE="+n.name)...)
	logf, err := os.OpenFile(filepath.Join(n.dir, n.name+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return err
	}
	n.cmd = cmd
	// Ready: it answers once its store is open and its recovery done.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		resp, err := http.Get("http://" + n.addr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(n.dir, n.name+".log"))
			return fmt.Errorf("%s did not become ready: %v\n%s", n.name, err, log)
		}
	}
}

// stop signals the server and waits for it to exit.
func (n *node) stop(sig syscall.Signal) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil {
		return
	}
	_ = n.cmd.Process.Signal(sig)
	done := make(chan struct{})
	go func() { _ = n.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		_ = n.cmd.Process.Kill()
		<-done
	}
	n.cmd = nil
}

// caller spreads calls over the servers and keeps what was acknowledged.
type caller struct {
	nodes []*node
	http  *http.Client

	mu                    sync.Mutex
	acked                 map[string]string // tag -> execution id of a COMMITTED answer
	keyedAcks, intentAcks int
}

func (c *caller) ack(tag, id string, n *int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.acked == nil {
		c.acked = map[string]string{}
	}
	c.acked[tag] = id
	if n != nil {
		*n++
	}
}

func (c *caller) post(path, token, key string, body any) (int, map[string]any) {
	n := c.nodes[mrand.IntN(len(c.nodes))]
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest(http.MethodPost, "http://"+n.addr+path, bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, nil
	}
	defer resp.Body.Close()
	var out map[string]any
	raw, _ := io.ReadAll(resp.Body)
	_ = json.Unmarshal(raw, &out)
	return resp.StatusCode, out
}

func completed(code int, out map[string]any) (string, bool) {
	if code != http.StatusOK || out["state"] != "COMPLETED" {
		return "", false
	}
	id, _ := out["executionId"].(string)
	return id, id != ""
}

// keyed sends one call under an idempotency key up to three times, to
// servers chosen at random: a retry after a kill must never run it twice.
func (c *caller) keyed(tag string) {
	for range 3 {
		code, out := c.post("/v1/tools/kill.append/execute", "tok-agent", tag, map[string]any{"input": map[string]any{"tag": tag}})
		if id, ok := completed(code, out); ok {
			c.ack(tag, id, &c.keyedAcks)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// intent proposes, approves and executes an intent, the execution sent
// to two servers at once, and again: it must run once.
func (c *caller) intent(tag string) {
	var code int
	var in map[string]any
	for range 3 {
		if code, in = c.post("/v1/intents", "tok-agent", "", map[string]any{"tool": "kill.approved", "input": map[string]any{"tag": tag}}); code == http.StatusCreated {
			break
		}
	}
	if code != http.StatusCreated {
		return
	}
	id, _ := in["id"].(string)
	hash, _ := in["hash"].(string)
	approved := false
	for range 3 {
		if code, _ := c.post("/v1/intents/"+url.PathEscape(id)+"/approve", "tok-alice", "", map[string]any{}); code == http.StatusOK {
			approved = true
			break
		}
	}
	if !approved {
		return
	}
	for range 2 {
		var wg sync.WaitGroup
		for range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				code, out := c.post("/v1/intents/"+url.PathEscape(id)+"/execute", "tok-agent", "", map[string]any{"hash": hash})
				if xid, ok := completed(code, out); ok && out["replayed"] != true {
					c.ack(tag, xid, &c.intentAcks)
				}
			}()
		}
		wg.Wait()
	}
}

func (c *caller) plain(tag string) {
	code, out := c.post("/v1/tools/kill.append/execute", "tok-agent", "", map[string]any{"input": map[string]any{"tag": tag}})
	if id, ok := completed(code, out); ok {
		c.ack(tag, id, nil)
	}
}

func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	defer l.Close()
	return l.Addr().String()
}

// freshDatabase creates an empty database on the test server, dropped at
// cleanup, and returns its URL.
func freshDatabase(t *testing.T, base string) string {
	return testdb.FreshPostgres(t)
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
