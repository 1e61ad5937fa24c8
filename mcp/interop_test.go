package mcp_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/mcp"
)

// interopEnv, set to "require" (scripts/interop-gateway.sh, in CI), makes
// a missing peer (node, the npm packages) a failure instead of a skip.
const interopEnv = "TOOLGATE_TEST_INTEROP"

const interopHowTo = "run scripts/interop-gateway.sh (it installs the npm peers pinned in scripts/interop/gateway/package-lock.json, with node, and runs this test)"

// interopPeers returns node and the directory of the npm peers
// (scripts/interop/gateway/node_modules), or skips (fails under
// TOOLGATE_TEST_INTEROP=require).
func interopPeers(t *testing.T) (node, modules string) {
	t.Helper()
	miss := func(why string) {
		if os.Getenv(interopEnv) == "require" {
			t.Fatalf("%s, and %s=require: %s", why, interopEnv, interopHowTo)
		}
		t.Skipf("%s: %s", why, interopHowTo)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		miss("node is not installed")
	}
	modules, err = filepath.Abs("../scripts/interop/gateway/node_modules/@modelcontextprotocol")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(modules, "server-filesystem", "package.json")); err != nil {
		miss("the npm peers are not installed")
	}
	return node, modules
}

// npmVersion is the version of the installed npm package dir.
func npmVersion(t *testing.T, dir string) string {
	b, err := os.ReadFile(filepath.Join(dir, "package.json"))
	if err != nil {
		t.Fatal(err)
	}
	var p struct{ Name, Version string }
	if err := json.Unmarshal(b, &p); err != nil {
		t.Fatal(err)
	}
	return p.Name + "@" + p.Version
}

// buildEverything builds the Go SDK's own example server
// (examples/server/everything: ten tools, five with spaces and
// parentheses in their names, no version) from the module source.
func buildEverything(t *testing.T) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "everything")
	gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
	if b, err := exec.Command(gobin, "build", "-o", out, "github.com/modelcontextprotocol/go-sdk/examples/server/everything").CombinedOutput(); err != nil {
		t.Fatalf("building the Go SDK's example server: %v\n%s", err, b)
	}
	return out
}

// serverInfo is a stdio server's name and version, as it reports them.
func serverInfo(t *testing.T, command string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := sdk.NewClient(&sdk.Implementation{Name: "info", Version: "1"}, nil)
	cs, err := c.Connect(ctx, &sdk.CommandTransport{Command: exec.Command(command)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	si := cs.InitializeResult().ServerInfo
	return fmt.Sprintf("%s (version %q)", si.Name, si.Version)
}

// Widely used MCP servers this project did not write, from the npm
// registry and unchanged (@modelcontextprotocol/server-filesystem and
// server-memory, pinned in scripts/interop/gateway/package-lock.json), and the Go
// SDK's example server (names with spaces, no version), sit behind the
// gateway of `toolgate mcp` (the example pinned with the block `toolgate
// pin` prints); an agent with the Go SDK's client drives each
// through a granted read, a refused write that never reaches it (the disk
// and the memory file prove it), and the server's own refusal coming back
// as the call's error. Then toolgate audit verify passes. Each flow's
// answer is logged (go test -v).
func TestInterop_GatewayPeers(t *testing.T) {
	node, modules := interopPeers(t)
	bin := toolgate(t)
	everything := buildEverything(t)
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	if err := os.Mkdir(data, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(data, "note.txt"), []byte("hello from the disk\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	memFile := filepath.Join(dir, "memory.jsonl")
	everythingInfo := serverInfo(t, everything)
	t.Logf("peers: %s, %s, Go SDK example server %s", npmVersion(t, filepath.Join(modules, "server-filesystem")),
		npmVersion(t, filepath.Join(modules, "server-memory")), everythingInfo)

	reg := filepath.Join(dir, "gateway.yaml")
	body := fmt.Sprintf(`mcp_servers:
  - name: fs
    command: %s
    args: [%q, %q]
    limits: {max_execution_time: 30s}
  - name: memory
    command: %s
    args: [%q]
    env: {MEMORY_FILE_PATH: %q}
    limits: {max_execution_time: 30s}
  - name: everything
    command: %s
    limits: {max_execution_time: 30s}
`, node, filepath.Join(modules, "server-filesystem", "dist", "index.js"), data,
		node, filepath.Join(modules, "server-memory", "dist", "index.js"), memFile,
		everything)
	if err := os.WriteFile(reg, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(dir, "tg.db")

	// It reports no version: pin it, with the block toolgate pin prints
	// (its version line replaced by the one chosen after review).
	out, err := exec.Command(bin, "--db", db, "--registry", reg, "pin", "everything").Output()
	if err != nil {
		t.Fatalf("toolgate pin everything: %v\n%s", err, out)
	}
	lines := strings.Split(string(out), "\n")
	if len(lines) < 3 || !strings.HasPrefix(lines[1], "    version: 0.0.0  # the server reports") {
		t.Fatalf("toolgate pin everything:\n%s", out)
	}
	lines[1] = "    version: 1.0.0"
	body += strings.Join(lines[1:], "\n")
	if err := os.WriteFile(reg, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}

	out, err = exec.Command(bin, "--db", db, "--registry", reg, "tools").CombinedOutput()
	if err != nil {
		t.Fatalf("toolgate tools: %v\n%s", err, out)
	}
	for _, want := range []string{`everything.greet_structured  is the MCP tool "greet (structured)"`, "fs.read_text_file ", "memory.read_graph "} {
		if !strings.Contains(string(out), want) {
			t.Errorf("toolgate tools lacks %q:\n%s", want, out)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	cmd := exec.Command(bin, "--db", db, "--registry", reg, "mcp", "--principal", "agent",
		"--allow", "mcp.call:fs/read_text_file", "--allow", "mcp.call:memory/read_graph", "--allow", "mcp.call:memory/add_observations",
		"--allow", "mcp.call:everything/greet_structured", "--allow", "mcp.call:everything/sample")
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	cs := connect(t, &sdk.CommandTransport{Command: cmd}, nil, "")
	defer func() {
		cs.Close()
		cmd.Wait()
		if t.Failed() {
			t.Logf("toolgate's stderr:\n%s", stderr)
		}
	}()
	show := func(flow string, res *sdk.CallToolResult) {
		b, _ := json.Marshal(res.Content)
		if len(b) > 400 {
			b = append(b[:400], "..."...)
		}
		t.Logf("%s: state %v, isError %v: %s", flow, res.Meta[mcp.MetaState], res.IsError, b)
	}

	// server-filesystem
	res := call(t, ctx, cs, "fs.read_text_file", map[string]any{"path": filepath.Join(data, "note.txt")}, nil)
	show("fs granted read (read_text_file)", res)
	completed(t, res)
	if !strings.Contains(text(t, res), "hello from the disk") {
		t.Errorf("fs.read_text_file: %s", text(t, res))
	}
	res = call(t, ctx, cs, "fs.write_file", map[string]any{"path": filepath.Join(data, "new.txt"), "content": "x"}, nil)
	show("fs refused write (write_file, not granted)", res)
	if o := failed(t, res); o.State != "DENIED" {
		t.Errorf("fs.write_file, not granted: %+v", o)
	}
	if _, err := os.Stat(filepath.Join(data, "new.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the refused write reached the disk: %v", err)
	}
	res = call(t, ctx, cs, "fs.read_text_file", map[string]any{"path": "/etc/hostname"}, nil)
	show("fs's own refusal (read outside its root)", res)
	if o := failed(t, res); o.State != "ROLLED_BACK" || !strings.Contains(o.Error.Message, "MCP server fs reported an error") {
		t.Errorf("fs refusing a path outside its root: %+v", o)
	}

	// server-memory
	res = call(t, ctx, cs, "memory.read_graph", map[string]any{}, nil)
	show("memory granted read (read_graph)", res)
	completed(t, res)
	res = call(t, ctx, cs, "memory.create_entities", map[string]any{"entities": []any{map[string]any{"name": "x", "entityType": "t", "observations": []string{}}}}, nil)
	show("memory refused write (create_entities, not granted)", res)
	if o := failed(t, res); o.State != "DENIED" {
		t.Errorf("memory.create_entities, not granted: %+v", o)
	}
	res = call(t, ctx, cs, "memory.add_observations", map[string]any{"observations": []any{map[string]any{"entityName": "nobody", "contents": []string{"y"}}}}, nil)
	show("memory's own refusal (add_observations to an entity that does not exist)", res)
	if o := failed(t, res); o.State != "ROLLED_BACK" || !strings.Contains(o.Error.Message, "nobody") {
		t.Errorf("memory refusing an unknown entity: %+v", o)
	}
	if b, err := os.ReadFile(memFile); err == nil && strings.Contains(string(b), `"x"`) {
		t.Errorf("the refused write reached the memory file:\n%s", b)
	}

	// the Go SDK's example server
	res = call(t, ctx, cs, "everything.greet_structured", map[string]any{"name": "toolgate"}, nil)
	show("everything granted call (greet (structured))", res)
	completed(t, res)
	if !strings.Contains(text(t, res), "Hi toolgate") {
		t.Errorf("everything.greet_structured: %s", text(t, res))
	}
	res = call(t, ctx, cs, "everything.greet", map[string]any{"name": "x"}, nil)
	show("everything refused call (greet, not granted)", res)
	if o := failed(t, res); o.State != "DENIED" {
		t.Errorf("everything.greet, not granted: %+v", o)
	}
	res = call(t, ctx, cs, "everything.sample", map[string]any{}, nil)
	show("everything's own refusal (sample: the gateway offers no sampling)", res)
	if o := failed(t, res); o.State != "ROLLED_BACK" {
		t.Errorf("everything.sample: %+v", o)
	}
	cs.Close()
	cmd.Wait()

	if out, err := exec.Command(bin, "--db", db, "audit", "verify").CombinedOutput(); err != nil {
		t.Errorf("toolgate audit verify: %v\n%s", err, out)
	} else {
		t.Logf("audit verify: %s", strings.TrimSpace(string(out)))
	}
}
