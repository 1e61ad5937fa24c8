package tools_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/tools"
)

const mcpFile = `mcp_servers:
  - name: files
    command: /bin/cat
    args: ["--root", "/srv"]
    env: {LC_ALL: C}
    env_inherit: [HOME]
    limits: {max_execution_time: 30s}
    tools:
      write_file: {requires_approval: true, version: 1.0.0, schema_sha256: 0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef}
  - name: issues
    url: https://mcp.example.com/mcp
    headers_from_env: {Authorization: ISSUES_TOKEN}
    version: 2.1.0
    idempotent: true
    limits: {max_execution_time: 10s, max_concurrent: 2}
`

func loadMCP(t *testing.T, body string) ([]tools.MCPServer, error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "gateway.yaml")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	var got []tools.MCPServer
	_, err := tools.LoadRegistryFileWith(path, func(s []tools.MCPServer) ([]tools.Tool, error) {
		got = s
		return nil, nil
	})
	return got, err
}

func TestRegistryFile_MCPServers(t *testing.T) {
	got, err := loadMCP(t, mcpFile)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("%d servers", len(got))
	}
	f, i := got[0], got[1]
	if f.Name != "files" || f.Command != "/bin/cat" || !slices.Equal(f.Args, []string{"--root", "/srv"}) || f.Limits.MaxExecutionTime != 30*time.Second {
		t.Errorf("files: %+v", f)
	}
	if o := f.Tools["write_file"]; o.RequiresApproval == nil || !*o.RequiresApproval || o.Version != "1.0.0" || len(o.SchemaSHA256) != 64 {
		t.Errorf("files' write_file: %+v", o)
	}
	t.Setenv("HOME", "/home/x")
	if env, err := f.Environ(); err != nil || !slices.Equal(env, []string{"PATH=" + tools.DefaultSearchPath, "HOME=/home/x", "LC_ALL=C"}) {
		t.Errorf("environment %v %v", env, err)
	}
	if p, err := f.CommandPath(); err != nil || p != "/bin/cat" {
		t.Errorf("CommandPath: %q %v", p, err)
	}
	if i.URL != "https://mcp.example.com/mcp" || i.HeadersFromEnv["Authorization"] != "ISSUES_TOKEN" || i.Version != "2.1.0" || !i.Idempotent || i.Limits.MaxConcurrent != 2 {
		t.Errorf("issues: %+v", i)
	}
	if _, err := i.Headers(); err == nil || !strings.Contains(err.Error(), "ISSUES_TOKEN is not set") {
		t.Errorf("a header whose variable is not set: %v", err)
	}
	t.Setenv("ISSUES_TOKEN", "Bearer s3cret")
	if h, err := i.Headers(); err != nil || h["Authorization"] != "Bearer s3cret" {
		t.Errorf("headers %v %v", h, err)
	}

	// Without a gateway, mcp_servers is refused, not ignored.
	path := filepath.Join(t.TempDir(), "gateway.yaml")
	os.WriteFile(path, []byte(mcpFile), 0o600)
	if _, err := tools.LoadRegistryFile(path); !errors.Is(err, tools.ErrRegistryFile) || !strings.Contains(err.Error(), ":2: mcp_servers") {
		t.Errorf("LoadRegistryFile of a file with mcp_servers: %v", err)
	}
}

// Bad declarations fail closed with the line and the reason.
func TestRegistryFile_MCPServerErrors(t *testing.T) {
	for _, tc := range []struct {
		name, old, new string
		line           int
		reason         string
	}{
		{"both", "    url: https://mcp.example.com/mcp\n", "    url: https://mcp.example.com/mcp\n    command: x\n", 11, "not both"},
		{"neither", "    command: /bin/cat\n", "", 2, "missing command (stdio) or url"},
		{"literal secret", "{Authorization: ISSUES_TOKEN}", "{Authorization: Bearer abc}", 12, "must name an environment variable"},
		{"credentials in url", "https://mcp.example.com/mcp", "https://u:p@mcp.example.com/mcp", 11, "must not hold credentials"},
		{"relative command", "command: /bin/cat", "command: bin/cat", 3, "bare name"},
		{"bad name", "name: files", "name: Files.x", 2, "lowercase words"},
		{"duplicate name", "name: issues", "name: files", 10, "duplicate MCP server files (first declared at line 2)"},
		{"unknown field", "    env: {LC_ALL: C}\n", "    env: {LC_ALL: C}\n    shell: true\n", 6, `unknown field "shell"`},
		{"stdio field with url", "    idempotent: true\n", "    idempotent: true\n    args: [x]\n", 15, "goes with command"},
		{"no limits", "    limits: {max_execution_time: 30s}\n", "", 2, "missing limits"},
		{"bad version", "version: 2.1.0", "version: v2", 13, "not a semantic version"},
		{"bad hash", "schema_sha256: 0123", "schema_sha256: xyz", 9, "64 lowercase hex"},
		{"PATH in env", "env: {LC_ALL: C}", "env: {PATH: /tmp}", 5, "set search_path"},
		{"env_from a literal", "    env_inherit: [HOME]\n", "    env_inherit: [HOME]\n    env_from: {API_KEY: sk-live-123}\n", 7, "must name an environment variable"},
		{"env_from twice", "    env_inherit: [HOME]\n", "    env_inherit: [HOME]\n    env_from: {LC_ALL: X}\n", 7, `"LC_ALL" given twice`},
		{"env_from inherited", "    env_inherit: [HOME]\n", "    env_inherit: [HOME]\n    env_from: {HOME: X}\n", 7, `"HOME" given twice`},
		{"env_from PATH", "    env_inherit: [HOME]\n", "    env_inherit: [HOME]\n    env_from: {PATH: X}\n", 7, "set search_path"},
		{"env_from with url", "    idempotent: true\n", "    idempotent: true\n    env_from: {API_KEY: X}\n", 15, "goes with command"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := strings.Replace(mcpFile, tc.old, tc.new, 1)
			if body == mcpFile {
				t.Fatal("the case changes nothing")
			}
			_, err := loadMCP(t, body)
			var fe *tools.RegistryFileError
			if !errors.As(err, &fe) || fe.Line != tc.line || !strings.Contains(fe.Reason, tc.reason) {
				t.Errorf("got %v; want line %d: %s", err, tc.line, tc.reason)
			}
		})
	}
}

// A stdio server's limits may bound its process (max_memory, max_file_size:
// MCPServer.MaxMemory and MaxFileSize, not each call's limits); a URL
// server, or one tool, may not.
func TestRegistryFile_MCPProcessLimits(t *testing.T) {
	got, err := loadMCP(t, "mcp_servers:\n  - name: files\n    command: /bin/cat\n    limits: {max_execution_time: 30s, max_memory: 1048576, max_file_size: 4096}\n")
	if err != nil {
		t.Fatal(err)
	}
	if s := got[0]; s.MaxMemory != 1<<20 || s.MaxFileSize != 4096 || s.Limits.MaxMemory != 0 || s.Limits.MaxFileSize != 0 {
		t.Errorf("files: process limits %d, %d; call limits %+v", s.MaxMemory, s.MaxFileSize, s.Limits)
	}
	for _, body := range []string{
		"mcp_servers:\n  - name: web\n    url: https://x.example/mcp\n    limits: {max_execution_time: 30s, max_memory: 1048576}\n",
		"mcp_servers:\n  - name: files\n    command: /bin/cat\n    limits: {max_execution_time: 30s}\n    tools:\n      read: {limits: {max_file_size: 10}}\n",
	} {
		if _, err := loadMCP(t, body); !errors.Is(err, tools.ErrRegistryFile) {
			t.Errorf("%s: %v, want a registry file error", body, err)
		}
	}
}

// A stdio server's env_from takes a variable's value from toolgate's
// environment, so that a secret is never written in the file: the server
// gets the value under its own name (not the source variable), and a
// source that is not set refuses to start it.
func TestRegistryFile_MCPEnvFrom(t *testing.T) {
	got, err := loadMCP(t, `mcp_servers:
  - name: files
    command: /usr/bin/env
    env: {LC_ALL: C}
    env_from: {API_KEY: TG_TEST_FILES_KEY, B_TOKEN: TG_TEST_FILES_TOKEN}
    limits: {max_execution_time: 30s}
`)
	if err != nil {
		t.Fatal(err)
	}
	s := got[0]
	if s.EnvFrom["API_KEY"] != "TG_TEST_FILES_KEY" || s.EnvFrom["B_TOKEN"] != "TG_TEST_FILES_TOKEN" || len(s.EnvFrom) != 2 {
		t.Fatalf("env_from %v", s.EnvFrom)
	}
	t.Setenv("TG_TEST_FILES_TOKEN", "tok")
	os.Unsetenv("TG_TEST_FILES_KEY")
	if _, err := s.Environ(); err == nil || err.Error() != "env_from API_KEY: the environment variable TG_TEST_FILES_KEY is not set" {
		t.Errorf("a source that is not set: %v", err)
	}
	if p, err := s.Start(nil); err == nil {
		p.Close()
		t.Error("started a server whose env_from source is not set")
	}
	t.Setenv("TG_TEST_FILES_KEY", "sk-live-123")
	env, err := s.Environ()
	if want := []string{"PATH=" + tools.DefaultSearchPath, "LC_ALL=C", "API_KEY=sk-live-123", "B_TOKEN=tok"}; err != nil || !slices.Equal(env, want) {
		t.Errorf("environment %v %v, want %v", env, err, want)
	}
	// The process gets it (env prints its environment and exits).
	p, err := s.Start(nil)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(p)
	p.Close()
	if lines := strings.Fields(string(out)); !slices.Contains(lines, "API_KEY=sk-live-123") || slices.ContainsFunc(lines, func(l string) bool { return strings.HasPrefix(l, "TG_TEST_") }) {
		t.Errorf("the server's environment: %q", out)
	}
}

// An upstream tool that has the id of a tool the file declares (at a
// higher version it would be what a call of that id runs) refuses the
// file, naming it; other upstream tools load.
func TestRegistryFile_MCPToolCannotTakeAFileToolsID(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gateway.yaml")
	file := `tools:
  - id: up.echo
    version: 1.0.0
    description: the file's own echo
    command: echo
    argv: ["{msg}"]
    input_schema: {$schema: "https://json-schema.org/draft/2020-12/schema", type: object, properties: {msg: {type: string, description: what, maxLength: 20}}, required: [msg], additionalProperties: false}
    limits: {max_execution_time: 10s}
mcp_servers:
  - name: up
    command: /bin/cat
    limits: {max_execution_time: 10s}
`
	if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	upstream := func(ids ...string) tools.MCPTools {
		return func([]tools.MCPServer) ([]tools.Tool, error) {
			var out []tools.Tool
			for _, id := range ids {
				d := tools.Declaration{ID: id, Version: "9.0.0", Name: id, Description: "an upstream tool",
					InputSchema:    json.RawMessage(`{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object","properties":{},"required":[],"additionalProperties":false}`),
					OutputSchema:   json.RawMessage(`{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object","properties":{},"required":[],"additionalProperties":false}`),
					ResourceLimits: tools.ResourceLimits{MaxExecutionTime: time.Second}}
				out = append(out, tools.NewRaw(d, func(context.Context, *tools.Env, json.RawMessage) (json.RawMessage, error) {
					return json.RawMessage(`{}`), nil
				}))
			}
			return out, nil
		}
	}
	_, err := tools.LoadRegistryFileWith(path, upstream("up.other", "up.echo"))
	if !errors.Is(err, tools.ErrRegistryFile) || !strings.Contains(err.Error(), "up.echo") || !strings.Contains(err.Error(), "already declares") {
		t.Fatalf("an upstream tool with a file tool's id: %v", err)
	}
	reg, err := tools.LoadRegistryFileWith(path, upstream("up.other"))
	if err != nil {
		t.Fatal(err)
	}
	if e, err := reg.Lookup("up.echo", ""); err != nil || e.Declaration().Version != "1.0.0" {
		t.Errorf("up.echo: %v", err)
	}
}
